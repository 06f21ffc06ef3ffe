"""assert_compiles_like_eager: what it catches (fast backends) and a real inductor pass."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # at import: pytester unloads what a test imports

# failure modes, each provoked with a cheap backend: the oracle must catch every one
ORACLE_FAILURE_MODES = """
import pytest
import torch
from pytest_flagos import CompiledMismatch, NotCompiledError


def corrupting_backend(gm, example_inputs):
    def run(*args):
        return [out + 1e-2 for out in gm(*args)]
    return run


def contiguous_backend(gm, example_inputs):
    def run(*args):
        return [out.contiguous() for out in gm(*args)]
    return run


def breaks_graph(x):
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()


def doubles(x):
    return x * 2


def identity(x):
    return x


def transposed(x):
    return x.t() * 2


X = torch.randn(4, 8)


def test_wrong_values_fail(assert_compiles_like_eager):
    with pytest.raises(CompiledMismatch, match="differs from the torch.float64 reference"):
        assert_compiles_like_eager(torch.sin, X, backend=corrupting_backend)


def test_wrong_strides_fail(assert_compiles_like_eager):
    with pytest.raises(CompiledMismatch, match=r"compiled strides \\(4, 1\\) != eager strides \\(1, 8\\)"):
        assert_compiles_like_eager(transposed, X, backend=contiguous_backend)


def test_strides_not_checked_when_asked(assert_compiles_like_eager):
    assert_compiles_like_eager(transposed, X, backend=contiguous_backend, check_strides=False)


def test_graph_break_fails_unless_allowed(assert_compiles_like_eager):
    with pytest.raises(NotCompiledError, match="dynamo broke the graph 1 time"):
        assert_compiles_like_eager(breaks_graph, X, backend="eager")
    result = assert_compiles_like_eager(breaks_graph, X, backend="eager", allow_graph_breaks=True)
    assert result.graphs == 2


def test_recompile_limit_fallback_fails(assert_compiles_like_eager):
    replays = [(torch.randn(n, 8),) for n in (5, 6)]
    with torch._dynamo.config.patch(recompile_limit=1):
        with pytest.raises(NotCompiledError, match="fell back to eager.*recompile limit"):
            assert_compiles_like_eager(doubles, X, backend="eager", dynamic=False, replay=replays)


def test_nothing_compiled_fails(assert_compiles_like_eager):
    with pytest.raises(NotCompiledError, match="dynamo compiled nothing"):
        assert_compiles_like_eager(identity, X, backend="eager")


def test_gradient_mismatch_fails(assert_compiles_like_eager):
    class WrongBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * (1.0 + 1e-2 * torch.compiler.is_compiling())

    def fn(x):
        return WrongBackward.apply(x) * 3

    # forward agrees; only the gradient of the input differs
    assert_compiles_like_eager(fn, X, backend="aot_eager")
    with pytest.raises(CompiledMismatch, match="grad of input 0"):
        assert_compiles_like_eager(fn, X, backend="aot_eager", grads=True)


def test_low_precision_compares_against_fp32_reference(assert_compiles_like_eager):
    x = torch.randn(4, 8).to(torch.bfloat16)
    assert_compiles_like_eager(torch.sin, x, backend="eager")
    with pytest.raises(CompiledMismatch, match="bfloat16 result differs from the torch.float32 reference"):
        def big_error(gm, example_inputs):
            return lambda *a: [o + 0.25 for o in gm(*a)]
        assert_compiles_like_eager(torch.sin, x, backend=big_error)
"""

ORACLE_WITH_INDUCTOR = """
import torch


def test_module_with_grads_and_dynamic_replays(assert_compiles_like_eager, fresh_inductor_cache):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
    result = assert_compiles_like_eager(
        model, torch.randn(4, 8), grads=True, mark_dynamic=[(0, 0)],
        replay=[(torch.randn(6, 8),), (torch.randn(3, 8),)])
    assert result.graphs >= 1 and result.graph_breaks == {}
    # the inductor cache of this test received the compiled graph
    assert any(fresh_inductor_cache.inductor.rglob("*.py"))
"""


def test_oracle_catches_each_failure_mode(run_pytest, pytester):
    pytester.makepyfile(ORACLE_FAILURE_MODES)
    run_pytest("--flagos-device=cpu", "-v").assert_outcomes(passed=8)


def test_oracle_passes_a_real_inductor_compile_on_cpu(run_pytest, pytester):
    pytester.makepyfile(ORACLE_WITH_INDUCTOR)
    run_pytest("--flagos-device=cpu").assert_outcomes(passed=1)


def test_tolerances_and_eager_error_rule():
    """check.compare in-process: it is pure torch, no compile state involved."""
    from pytest_flagos import check

    ref = torch.linspace(-1, 1, 64, dtype=torch.float64)
    eager = ref.to(torch.float32)
    assert check.tolerance(torch.float32) == (1e-4, 1e-4)
    assert check.tolerance(torch.float16) == (1e-2, 1e-2)
    assert check.tolerance(torch.bfloat16) == (2e-2, 2e-2)
    assert check.reference_dtype([ref.half()]) == torch.float32
    assert check.reference_dtype([ref.half(), eager]) == torch.float64
    check.compare(eager + 5e-5, eager, ref)  # inside fp32 tolerance
    with pytest.raises(check.CompiledMismatch):
        check.compare(eager + 5e-3, eager, ref)
    # eager itself off by 0.1: compiled may be off by up to 2x that, not more
    eager_off = (ref + 0.1).to(torch.float32)
    check.compare(eager_off + 0.05, eager_off, ref)
    with pytest.raises(check.CompiledMismatch, match=r"compiled deviates more than 2.0x"):
        check.compare(ref.float() + 0.35, eager_off, ref)
    # integer results must be equal
    with pytest.raises(check.CompiledMismatch, match="values differ"):
        check.compare(torch.arange(4) + 1, torch.arange(4), torch.arange(4))
