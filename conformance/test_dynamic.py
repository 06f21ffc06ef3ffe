"""Dynamic shapes: one compile serves several sizes of a dimension marked dynamic (forward and
backward), and without marks automatic dynamic shapes bound the recompiles."""

from __future__ import annotations

import pytest
import torch

from conformance_support import assert_close, fail, inductor_counters

pytestmark = [pytest.mark.flagos_area("dynamic"), pytest.mark.requires("inductor")]


def _softmax_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.LayerNorm(48), torch.nn.Linear(48, 16)
    )


def test_one_compile_serves_several_sizes(fresh_inductor_cache, assert_compiles_like_eager):
    def f(x):
        return torch.softmax(x * 2, dim=-1).sum(0) + x.mean()

    result = assert_compiles_like_eager(
        f,
        torch.randn(8, 64),
        mark_dynamic=[(0, 0)],
        replay=[(torch.randn(13, 64),), (torch.randn(40, 64),), (torch.randn(2, 64),)],
    )
    if result.graphs != 1:
        fail(
            f"sizes 8, 13, 40, 2 of a dimension marked dynamic took {result.graphs} "
            "compiles, not 1: the device's codegen specialised the size",
            "dynamic",
        )


def test_dynamic_batch_forward_and_backward(fresh_inductor_cache, assert_compiles_like_eager):
    result = assert_compiles_like_eager(
        _softmax_mlp(),
        torch.randn(6, 32),
        grads=True,
        mark_dynamic=[(0, 0)],
        replay=[(torch.randn(11, 32),), (torch.randn(3, 32),)],
    )
    if result.graphs != 1:
        fail(f"three batch sizes through a dynamic forward+backward took {result.graphs} compiles, not 1", "dynamic")


def test_automatic_dynamic_bounds_recompiles(flagos_device, fresh_inductor_cache):
    """No marks: the first call compiles static, the first new size recompiles dynamic, and
    every later size reuses that graph (torch._dynamo.config.automatic_dynamic_shapes)."""

    def f(x):
        return (torch.tanh(x) * x.shape[0]).sum(-1)

    compiled = torch.compile(f, backend="inductor")
    sizes = (5, 9, 17, 33, 65, 7)
    for n in sizes:
        x = torch.randn(n, 24, device=flagos_device)
        assert_close(compiled(x), f(x.cpu()), f"size {n}: compiled differs from eager", "dynamic", "compiled")
    counters = inductor_counters()
    graphs = counters["stats"]["unique_graphs"]
    if counters["frames"]["ok"] < 1 or graphs < 1:
        fail("dynamo compiled nothing: every call ran eagerly", "dynamic")
    if graphs > 2:
        fail(
            f"{len(sizes)} sizes took {graphs} compiles; automatic dynamic shapes should "
            "settle after 2 (static, then dynamic)",
            "dynamic",
        )
    fallbacks = counters["frames"]["total"] - counters["frames"]["ok"]
    if fallbacks > 0:
        fail(f"dynamo fell back to eager for {fallbacks} frame(s)", "dynamic")
