"""Autotuning: the eight graphs that first exposed the autotuner's bugs. Graphs that need more than one Triton kernel and
autotuning (stacked Linears, normalizations, reductions over rows of one block and over rows
looped block by block, a multi-kernel backward, dynamic shapes, max-autotune), the
autotuner's own Event/benchmark call, and a worker-pool check.

Each test runs on a fresh cache with the compile worker pool up and proven (single-Linear
graphs need neither autotuning nor the pool, which is how the autotuner's Event bug and the blind-worker bug
stayed hidden). Autotuning of kernel configs is what inductor's Triton codegen does; a
device with another codegen skips this area by its capability manifest.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

from conformance_support import benchmark_calls, fail

# inductor autotunes Triton kernel configs, timed with the device's events
pytestmark = [pytest.mark.flagos_area("autotune"), pytest.mark.requires("triton_codegen")]


@pytest.fixture
def pool(proven_workers):
    """The worker pool, proven to have compiled Triton kernels in worker processes."""
    return proven_workers


def _expect_benchmarked(before, what):
    if benchmark_calls() <= before:
        fail(
            f"{what}: inductor's benchmarker timed nothing "
            "(counters['inductor']['benchmarking.*.benchmark_gpu'] did not grow): the kernel "
            "configs were not autotuned on the device",
            "benchmarker",
        )


class RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def test_stacked_linears(pool, assert_compiles_like_eager):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()) for _ in range(3)])
    assert_compiles_like_eager(model, torch.randn(16, 64))


NORMS = {
    "layernorm": lambda: torch.nn.LayerNorm(64),
    "rmsnorm": lambda: RMSNorm(64),
    "groupnorm": lambda: torch.nn.GroupNorm(4, 64),
}


@pytest.mark.parametrize("norm", sorted(NORMS))
def test_normalizations_are_autotuned(pool, assert_compiles_like_eager, norm):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), NORMS[norm]())
    before = benchmark_calls()
    assert_compiles_like_eager(model, torch.randn(32, 64))
    _expect_benchmarked(before, f"{norm}: its reduction has several configs to time")


# module-level functions, not lambdas: the plugin's repro scripts can import them
def reduce_sum(x):
    return x.sum(-1)


def reduce_mean(x):
    return x.mean(0)


def reduce_amax(x):
    return x.amax(-1)


def reduce_softmax(x):
    return torch.softmax(x, -1)


def reduce_var(x):
    return x.var(-1)


REDUCTIONS = {"sum": reduce_sum, "mean": reduce_mean, "amax": reduce_amax, "softmax": reduce_softmax, "var": reduce_var}


@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_reductions(pool, assert_compiles_like_eager, reduction):
    assert_compiles_like_eager(REDUCTIONS[reduction], torch.randn(48, 300))


def reduce_long_rows(x):
    return x.sum(-1), x.var(-1), x.amax(-1)


def test_reduction_rows_longer_than_one_block(pool, assert_compiles_like_eager):
    """Rows too long for one block: inductor loops over blocks of the row (triton_red_*,
    R0_BLOCK autotuned), and 3001 elements leave a partial last block for every block size
    -- the case a wrong trip count or tail mask gets wrong. The rows above fit one block."""
    assert_compiles_like_eager(reduce_long_rows, torch.randn(6, 3001))


def test_multi_kernel_backward(pool, assert_compiles_like_eager):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.GELU(), torch.nn.Linear(64, 8)
    )
    before = benchmark_calls()
    assert_compiles_like_eager(model, torch.randn(16, 32), grads=True)
    _expect_benchmarked(before, "LayerNorm forward + backward")


def test_dynamic_shapes_one_compile(pool, assert_compiles_like_eager):
    def f(x):
        return torch.softmax(x * 2, dim=-1).sum(0)

    result = assert_compiles_like_eager(
        f, torch.randn(8, 64), mark_dynamic=[(0, 0)], replay=[(torch.randn(13, 64),), (torch.randn(40, 64),)]
    )
    if result.graphs != 1:
        fail(f"sizes 8, 13, 40 of a dimension marked dynamic took {result.graphs} compiles, not 1", "dynamic")


def test_max_autotune(pool, assert_compiles_like_eager):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64))
    before = benchmark_calls()
    assert_compiles_like_eager(model, torch.randn(32, 64), mode="max-autotune-no-cudagraphs")
    _expect_benchmarked(before, "mode='max-autotune-no-cudagraphs'")


@pytest.mark.requires("device_interface")
def test_the_autotuners_event_and_benchmark_call(flagos_device, device_interface):
    """What triton_heuristics.CachingAutotuner.bench calls: benchmarker.benchmark(fn,
    device=<type>) -> benchmark_gpu -> get_event_pairs -> DeviceInterface.Event(
    enable_timing=True)."""
    from pytest_flagos._torch_compat import inductor_benchmarker

    benchmarker = inductor_benchmarker()
    x = torch.randn(512, 512, device=flagos_device)
    error = None
    try:
        ms = benchmarker.benchmark(
            lambda: torch.mm(x, x), device=flagos_device.type, rep=5, is_vetted_benchmarking=True
        )
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is not None:
        fail(
            f"benchmarker.benchmark(fn, device={flagos_device.type!r}) -- the autotuner's own call -- raised {error}",
            "benchmarker",
            "event",
        )
    if not (isinstance(ms, float) and math.isfinite(ms) and 0.0 < ms < 60_000.0):
        fail(
            f"benchmarker.benchmark timed a 512x512 matmul at {ms!r} ms: not a plausible device time in milliseconds",
            "benchmarker",
            "event",
        )


def test_kernels_were_compiled_by_the_worker_pool(pool):
    proof = pool.proof
    if proof.kernels_from_pool < 1:
        fail(f"the proof compile got no Triton kernel from a worker process: {proof.note}", "workers")
    if proof.kernels_in_process:
        fail(
            f"{proof.kernels_in_process} Triton kernel(s) were compiled in the test process "
            "although the pool was ready",
            "workers",
        )
    if pool.worker_pid == os.getpid():
        fail("a pool job ran in the test process", "workers")
