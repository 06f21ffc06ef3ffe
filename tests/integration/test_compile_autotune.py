"""The autotuner's two bugs reproduced in deliberately broken configurations (flagos-internal).

The autotuner's Event bug (a device Event derived from the dummy torch.cuda.Event) and the
blind-worker bug (compile workers that cannot see the device) stayed hidden because
single-Linear graphs need neither autotuning nor the worker pool. The graphs that expose
them -- stacked Linears, normalizations, reductions, a multi-kernel backward, dynamic
shapes, max-autotune, the autotuner's Event/benchmark call and the worker-pool proof --
are checked on flagos by the conformance suite (conformance/test_autotune.py, `make
conformance`). Here: each bug planted in a fresh interpreter fails the way it did, and
flagos's own fix (its Event class, the fork fallback of torch_fl.compile.workers) makes the
same graph compile.
"""

import textwrap

import pytest

from tests.helpers import run_python
from torch_fl.flagos.streams import cuda_event_is_dummy

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
