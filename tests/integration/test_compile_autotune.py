"""The autotuner's guard: graphs that need autotuning and more than one Triton kernel.

Single-Linear models need neither, which is how two bugs (the autotuner's
Event bug, and the blind-worker bug: compile workers that cannot see the
device) stayed hidden. Every test here runs on a fresh cache with the worker
pool up and proven (the `compiled_on_workers` fixture), and checks numbers
against eager.
"""

import textwrap

import pytest
import torch
from torch._dynamo.utils import counters

from tests.conftest import run_python
from torch_fl.flagos.streams import cuda_event_is_dummy


def _benchmarked():
    return sum(v for k, v in counters["inductor"].items() if k.endswith(".benchmark_gpu"))


class RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def test_stacked_linears(compiled_on_workers, assert_compiles_like_eager):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()) for _ in range(3)])
    assert_compiles_like_eager(model, torch.randn(16, 64))


@pytest.mark.parametrize(
    "norm",
    [lambda: torch.nn.LayerNorm(64), lambda: RMSNorm(64), lambda: torch.nn.GroupNorm(4, 64)],
    ids=["layernorm", "rmsnorm", "groupnorm"],
)
def test_normalizations_are_autotuned(compiled_on_workers, assert_compiles_like_eager, norm):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), norm())
    before = _benchmarked()
    assert_compiles_like_eager(model, torch.randn(32, 64))
    assert _benchmarked() > before, "a normalization's reduction has several configs to time"


@pytest.mark.parametrize(
    "reduction",
    [
        lambda x: x.sum(-1),
        lambda x: x.mean(0),
        lambda x: x.amax(-1),
        lambda x: torch.softmax(x, -1),
        lambda x: x.var(-1),
    ],
    ids=["sum", "mean", "amax", "softmax", "var"],
)
def test_reductions(compiled_on_workers, assert_compiles_like_eager, reduction):
    assert_compiles_like_eager(reduction, torch.randn(48, 300))


def test_multi_kernel_backward(compiled_on_workers, assert_compiles_like_eager):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.GELU(), torch.nn.Linear(64, 8)
    )
    result = assert_compiles_like_eager(model, torch.randn(16, 32), grads=True)
    assert result.graphs >= 1


def test_dynamic_shapes_one_compile(compiled_on_workers, assert_compiles_like_eager):
    def f(x):
        return torch.softmax(x * 2, dim=-1).sum(0)

    assert_compiles_like_eager(
        f,
        torch.randn(8, 64),
        mark_dynamic=[(0, 0)],
        replay=[(torch.randn(13, 64),), (torch.randn(40, 64),)],
    )
    assert counters["stats"]["unique_graphs"] == 1, "several sizes must be served by one dynamic compile"


def test_max_autotune(compiled_on_workers, assert_compiles_like_eager):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU(), torch.nn.Linear(128, 64))
    before = _benchmarked()
    assert_compiles_like_eager(model, torch.randn(32, 64), mode="max-autotune-no-cudagraphs")
    assert _benchmarked() > before


def test_autotuner_event_call_works(flagos_device):
    """The exact call InductorBenchmarker makes: Event(enable_timing=True) from the device interface."""
    import torch_fl.compile
    from torch._dynamo.device_interface import get_interface_for_device

    torch_fl.compile.register()
    interface = get_interface_for_device(flagos_device.type)
    start, end = interface.Event(enable_timing=True), interface.Event(enable_timing=True)
    start.record()
    torch.randn(256, 256, device=flagos_device).sum()
    end.record()
    interface.synchronize()
    assert start.elapsed_time(end) >= 0.0


def test_kernels_were_compiled_by_the_worker_pool(compiled_on_workers):
    proof = compiled_on_workers.proof
    assert proof.kernels_from_pool >= 1, proof.note
    assert compiled_on_workers.worker_pid != __import__("os").getpid()


# ---- the autotuner's Event bug and the blind-worker bug, reproduced in a deliberately broken configuration


GRAPH = """
import torch, torch_fl
{setup}
def f(x, w):
    return torch.softmax(torch.relu(x @ w), dim=-1).sum(0)
x = torch.randn(64, 32, device="flagos"); w = torch.randn(32, 256, device="flagos")
try:
    out = torch.compile(f)(x, w)
    torch.testing.assert_close(out.cpu(), f(x.cpu(), w.cpu()))
    print("COMPILED OK")
except Exception as error:
    print("FAILED:", error)
"""

DUMMY_EVENT = """
import torch_fl.compile
from torch._dynamo.device_interface import register_interface_for_device
from torch_fl.compile.device_interface import FlagosInterface
torch_fl.compile.register()
class FlagosEvent(torch.cuda.Event):  # the autotuner's Event bug: the dummy CUDA lineage
    pass
class BrokenInterface(FlagosInterface):
    Event = FlagosEvent
register_interface_for_device("flagos", BrokenInterface)
register_interface_for_device("flagos:0", BrokenInterface)
"""

FORCE_POOL = """
import torch._inductor.config as config
from torch._inductor.async_compile import AsyncCompile
config.compile_threads = 2
import torch_fl.compile; torch_fl.compile.register()
torch_fl.compile.workers.ensure_workers_see_flagos()
AsyncCompile.wait_pool_ready()
"""


def _run(setup, tmp_path, **env):
    code = textwrap.dedent(GRAPH).format(setup=textwrap.dedent(setup))
    result = run_python(code, env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), **env})
    return result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.skipif(not cuda_event_is_dummy(), reason="torch.cuda.Event is real in this (CUDA) torch build")
def test_event_from_dummy_cuda_lineage_breaks_autotuning(tmp_path):
    assert "Tried to instantiate dummy base class FlagosEvent" in _run(DUMMY_EVENT, tmp_path)
    assert "COMPILED OK" in _run("", tmp_path / "fixed")


@pytest.mark.slow
def test_subprocess_workers_without_the_device_fail_and_fork_fixes_them(tmp_path):
    broken = _run(FORCE_POOL, tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0", FLAGOS_NO_FORK_FALLBACK="1")
    # No GPU: Triton finds no driver in the worker. A GPU machine: the flagos
    # back end refuses to compile without knowing the accelerator.
    assert "Could not find an active GPU backend" in broken or "has not loaded torch_fl" in broken, broken
    fixed = _run(
        FORCE_POOL + "assert config.worker_start_method == 'fork'\n",
        tmp_path / "fixed",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert "COMPILED OK" in fixed, fixed
    assert "compiling with fork workers instead" in fixed
