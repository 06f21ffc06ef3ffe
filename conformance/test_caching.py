"""Caching: a second compile of the same graph in a fresh process, on the same
TORCHINDUCTOR_CACHE_DIR, is served by inductor's FX graph cache and gives bit-identical
results (forward and gradients)."""

from __future__ import annotations

import json

import pytest
import torch

from conformance_support import bullet, fail, run_python, tail

pytestmark = [pytest.mark.flagos_area("caching"), pytest.mark.requires("inductor")]

SCRIPT = """
import json
from torch._dynamo.utils import counters

device = torch.device({device!r})
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
    torch.nn.Linear(64, 8)).to(device)
x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1)).to(device)
compiled = torch.compile(model, backend="inductor", fullgraph=True)
out = compiled(x)
out.square().sum().backward()
torch.save({{"out": out.detach().cpu(),
            "grads": {{n: p.grad.cpu() for n, p in model.named_parameters()}}}}, {result!r})
print("RESULT", json.dumps({{
    "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
    "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
    "fx_bypass": counters["inductor"]["fxgraph_cache_bypass"],
    "aot_hit": counters["aot_autograd"]["autograd_cache_hit"],
    "aot_miss": counters["aot_autograd"]["autograd_cache_miss"],
    "aot_bypass": counters["aot_autograd"]["autograd_cache_bypass"],
    "graphs": counters["stats"]["unique_graphs"],
}}))
"""


def _run(flagos_device, cache_dir, result_path):
    env = {
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
        "TRITON_CACHE_DIR": str(cache_dir / "triton"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        # compile in-process: the cache is under test here, not the workers (and starting a
        # pool in each fresh process would double the time)
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }
    proc = run_python(SCRIPT.format(device=str(flagos_device), result=str(result_path)), env=env, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        fail(
            f"compiling in a fresh process failed (exit {proc.returncode}):\n{tail(proc.stderr + proc.stdout)}", "cache"
        )
    return json.loads(lines[-1][len("RESULT ") :])


def test_second_process_hits_the_fx_graph_cache(flagos_device, tmp_path):
    cache = tmp_path / "inductor-cache"
    first = _run(flagos_device, cache, tmp_path / "first.pt")
    second = _run(flagos_device, cache, tmp_path / "second.pt")
    problems = []
    if first["graphs"] < 1:
        problems.append("the first process compiled no graph")
    if first["fx_miss"] < 1 or first["fx_hit"]:
        problems.append(
            f"the first process, on an empty cache, had {first['fx_miss']} FX graph "
            f"cache misses and {first['fx_hit']} hits"
        )
    if first["fx_bypass"]:
        problems.append(
            f"inductor bypassed the FX graph cache {first['fx_bypass']} time(s): "
            "something in the compiled graph cannot be cached"
        )
    if second["fx_miss"] or second["aot_miss"]:
        problems.append(
            f"the second process recompiled: {second['fx_miss']} FX graph cache "
            f"misses, {second['aot_miss']} AOTAutograd cache misses"
        )
    if second["fx_hit"] < 1:
        problems.append(f"the second process had no FX graph cache hit (counters: {second})")
    if problems:
        fail("inductor's cache does not serve the device's graphs in a fresh process:\n" + bullet(problems), "cache")
    a = torch.load(tmp_path / "first.pt")
    b = torch.load(tmp_path / "second.pt")
    differ = [name for name in a["grads"] if not torch.equal(a["grads"][name], b["grads"][name])]
    if not torch.equal(a["out"], b["out"]):
        differ.insert(0, "output")
    if differ:
        fail(
            "the cached compile computes different results than the first compile: " + ", ".join(differ) + " differ",
            "cache",
        )
