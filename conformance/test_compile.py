"""Compile basics: the device gets the codegen its manifest names (Triton kernels for GPU-like
devices, C++ for cpu), compiled code really ran (dynamo and inductor counters), the device's
own torch.compile backend really compiles (does not hand the graph back to run eagerly), and
backend="inductor" and the device's own backends compile a module forward and backward like
eager. A device that inductor has no code generator for is checked through its own backend
(a dynamo backend named after the device, or the manifest's extra["compile_backends"])."""

from __future__ import annotations

import re

import pytest
import torch

from pytest_flagos import _torch_compat, session
from pytest_flagos.requirements import device_compile_backends, missing_reason, require

from conformance_support import assert_close, bullet, fail, generated_sources, inductor_counters

pytestmark = pytest.mark.flagos_area("compile")

_CALL = re.compile(r"def call\((self, )?args\)")


def _pointwise_and_reduction(x):
    return torch.sin(x) * 2 + torch.cos(x).sum(-1, keepdim=True)


@pytest.mark.requires("inductor")
def test_device_gets_the_codegen_its_manifest_names(flagos_device, flagos_capabilities, fresh_inductor_cache):
    codegen = flagos_capabilities.codegen
    if _torch_compat.is_inductor_gpu(flagos_device.type) and flagos_device.type != "mps" and codegen == "cpp":
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
        pytest.skip(f"flagos: requires a source check for codegen {codegen!r} (capability manifest): none here")


@pytest.mark.requires("inductor")
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


def _sin_cos(x):
    return torch.sin(x) * 3 + torch.cos(x)


_GRAPH_OPS = ("aten.sin.", "aten.cos.", "aten.mul.", "aten.add.")


class _RecordOps(_torch_compat.torch_dispatch_mode_class()):
    """Records every aten op dispatched while active."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _device_backends():
    """inductor where it has a code generator for the device, then the device's own
    backends (requirements.device_compile_backends); skips when there is none."""
    backends = [] if missing_reason("inductor") else ["inductor"]
    backends += device_compile_backends(session.current())
    if not backends:
        require("inductor", "compile_backend")
    return backends


def test_compile_backends_really_compile(flagos_device, fresh_inductor_cache):
    """A backend that hands the FX graph back (``return gm.forward``) "compiles" every model:
    dynamo counts a graph and no fallback, and results match eager. The code a backend
    returns must not dispatch the graph's aten ops one by one."""
    lookup_backend = _torch_compat.lookup_dynamo_backend
    x = torch.randn(256, device=flagos_device)
    problems = []
    for name in _device_backends():
        compiled_graphs = []

        def spy(graph_module, example_inputs, name=name, compiled_graphs=compiled_graphs):
            compiled = lookup_backend(name)(graph_module, example_inputs)
            compiled_graphs.append(compiled)
            return compiled

        _torch_compat.reset_dynamo(clear_counters=False)
        out = torch.compile(_sin_cos, backend=spy, fullgraph=True)(x)
        assert_close(out, _sin_cos(x.cpu()), f"backend={name!r}: compiled sin(x) * 3 + cos(x) differs from eager")
        if len(compiled_graphs) != 1:
            problems.append(f"backend={name!r}: dynamo handed it {len(compiled_graphs)} graphs, not 1")
            continue
        with _RecordOps() as recorded:
            compiled_graphs[0](x)
        eager_ops = sorted({op for op in recorded.ops if op.startswith(_GRAPH_OPS)})
        if eager_ops:
            problems.append(
                f"backend={name!r} returned code that runs the graph's aten ops one by one "
                f"({', '.join(eager_ops)}): it ran the graph eagerly instead of compiling it"
            )
    if problems:
        fail("a torch.compile backend of the device silently ran eagerly:\n" + bullet(problems), "backend")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))


@pytest.mark.requires("inductor")
def test_backend_inductor_module_forward_and_backward(flagos_device, fresh_inductor_cache, assert_compiles_like_eager):
    result = assert_compiles_like_eager(_mlp(), torch.randn(8, 32), backend="inductor", grads=True)
    assert result.graphs >= 1, "dynamo compiled no graph"


@pytest.mark.requires("compile_backend")
def test_device_backends_module_forward_and_backward(flagos_device, fresh_inductor_cache, assert_compiles_like_eager):
    """The device's own torch.compile backends (the compile path of a device inductor may
    not know): a module forward and backward like eager, really compiled (the oracle fails
    a compile that fell back to eager; test_compile_backends_really_compile fails one that
    returned the graph to run op by op)."""
    for name in device_compile_backends(session.current()):
        result = assert_compiles_like_eager(_mlp(), torch.randn(8, 32), backend=name, grads=True)
        assert result.graphs >= 1, f"backend={name!r}: dynamo compiled no graph"


@pytest.mark.requires("inductor")
def test_reduce_overhead_module_forward_and_backward(flagos_device, fresh_inductor_cache, assert_compiles_like_eager):
    """mode="reduce-overhead": CUDA graphs where inductor records them for the device (cuda; flagos on
    its cuda accelerator), plain compiled code where it does not; eager's results either way, over
    a recording's replays and over other batch sizes (the second one compiles a dynamic graph, the
    third replays it at a size it was not recorded at)."""
    batches = [(torch.randn(rows, 32),) for rows in (8, 5, 6)]
    result = assert_compiles_like_eager(_mlp(), torch.randn(8, 32), mode="reduce-overhead", grads=True, replay=batches)
    assert result.graphs >= 1, "dynamo compiled no graph"
