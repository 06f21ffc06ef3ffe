"""Compile basics: the device gets the codegen its manifest names (Triton kernels for GPU-like
devices, C++ for cpu), compiled code really ran (dynamo and inductor counters), and
backend="inductor" compiles a module forward and backward like eager."""

from __future__ import annotations

import re

import pytest
import torch
from conformance_support import assert_close, bullet, fail, generated_sources, inductor_counters

pytestmark = pytest.mark.flagos_area("compile")

_CALL = re.compile(r"def call\((self, )?args\)")


def _pointwise_and_reduction(x):
    return torch.sin(x) * 2 + torch.cos(x).sum(-1, keepdim=True)


def test_device_gets_the_codegen_its_manifest_names(flagos_device, flagos_capabilities, fresh_inductor_cache):
    from torch._inductor.utils import is_gpu

    codegen = flagos_capabilities.codegen
    if codegen == "none":
        fail(
            f"inductor has no code generator for {flagos_device.type!r} (the capability "
            "manifest found no scheduling registered for it): torch.compile cannot lower "
            "graphs for the device",
            "codegen",
        )
    if is_gpu(flagos_device.type) and flagos_device.type != "mps" and codegen == "cpp":
        fail(f"{flagos_device.type!r} is an inductor GPU type but its manifest names the C++ codegen", "codegen")
    x = torch.randn(16, 64, device=flagos_device)
    out = torch.compile(_pointwise_and_reduction, backend="inductor", fullgraph=True)(x)
    assert_close(out, _pointwise_and_reduction(x.cpu()), "compiled pointwise+reduction differs from eager on the host")
    sources = generated_sources(fresh_inductor_cache.inductor)
    text = "\n".join(s for _, s in sources)
    where = f"{fresh_inductor_cache.inductor}"
    if not any(_CALL.search(s) for _, s in sources):
        fail(f"inductor wrote no wrapper module (def call(args)) under {where}", "codegen")
    if codegen == "triton":
        problems = []
        if "@triton.jit" not in text:
            problems.append("no @triton.jit kernel")
        if not re.search(rf"DeviceProperties\(type='{flagos_device.type}'", text):
            problems.append(
                f"no kernel whose triton_meta targets device type '{flagos_device.type}' (DeviceProperties(type=...))"
            )
        if "cpp_fused" in text:
            problems.append("C++ kernels (cpp_fused_*) for a Triton device")
        if problems:
            fail(
                f"inductor did not generate Triton code for {flagos_device.type} ({where}):\n" + bullet(problems),
                "codegen",
            )
    elif codegen == "cpp":
        if "cpp_fused" not in text or "@triton.jit" in text:
            fail(f"inductor did not generate C++ kernels (cpp_fused_*) for {flagos_device.type} ({where})", "codegen")
    else:
        pytest.skip(f"capability manifest: codegen {codegen!r} has no source check here")


def test_compiled_code_really_ran(flagos_device, flagos_capabilities, fresh_inductor_cache):
    def f(x):
        return torch.relu(x) * 3 + 1

    x = torch.randn(1000, device=flagos_device)
    out = torch.compile(f, backend="inductor")(x)
    counters = inductor_counters()
    problems = []
    if counters["stats"]["unique_graphs"] != 1:
        problems.append(f"dynamo captured {counters['stats']['unique_graphs']} graphs, not 1")
    if counters["frames"]["ok"] < 1:
        problems.append("no frame was compiled (counters['frames']['ok'] == 0)")
    if counters["inductor"]["fxgraph_cache_miss"] != 1:
        problems.append(
            f"inductor compiled {counters['inductor']['fxgraph_cache_miss']} "
            "graphs on a fresh cache (fxgraph_cache_miss), not 1: inductor did "
            "not lower the graph"
        )
    if flagos_capabilities.codegen == "triton" and counters["inductor"]["async_compile_cache_miss"] < 1:
        problems.append("no Triton kernel went through async_compile")
    # the compiled module ran: its result is the compiled one, on the device
    if out.device != x.device:
        problems.append(f"the compiled output is on {out.device}, the input on {x.device}")
    if problems:
        fail("torch.compile did not really compile and run on the device:\n" + bullet(problems), "codegen")
    assert_close(out, f(x.cpu()), "compiled relu(x) * 3 + 1 differs from eager on the host")


def test_backend_inductor_module_forward_and_backward(flagos_device, fresh_inductor_cache, assert_compiles_like_eager):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
    result = assert_compiles_like_eager(model, torch.randn(8, 32), backend="inductor", grads=True)
    assert result.graphs >= 1, "dynamo compiled no graph"
