"""Compile workers that can compile flagos kernels.

inductor's default ``worker_start_method="subprocess"`` starts a bare
``python .../compile_worker/__main__.py`` that imports only torch and triton.
Such a worker sees flagos only through the entry points: ``torch.backends``
(torch autoloads torch_fl) and ``triton.backends`` (the flagos Triton back
end). Without them Triton finds no active driver and inductor's worker dies
with "Could not find an active GPU backend". Where a probe shows that a bare
worker cannot see flagos, compiles of flagos graphs use ``fork`` workers,
which inherit this process, torch_fl included. Compilation stays parallel.
The switch happens only when a flagos graph is compiled, so processes that
never compile for flagos keep inductor's defaults.
"""

import os
import warnings
from importlib.metadata import entry_points

from flagos_autoload.setting import AUTOLOAD_ENV, EAGER, OFF, mode, other_backends

# Set FLAGOS_NO_FORK_FALLBACK=1 to keep inductor's start method whatever the
# probe says (used by tests to reproduce the blind-worker bug).
NO_FORK_FALLBACK_ENV = "FLAGOS_NO_FORK_FALLBACK"


def bare_worker_sees_flagos(env=None) -> tuple:
    """(True, "") if a fresh ``python`` with ``env`` would load flagos; else (False, why)."""
    env = os.environ if env is None else env
    torch_autoload = env.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1")
    if torch_autoload != "1":  # torch's own rule (torch._is_device_backend_autoload_enabled)
        return False, f"TORCH_DEVICE_BACKEND_AUTOLOAD={torch_autoload} stops torch from loading torch_fl"
    chosen = mode(env)
    if chosen == OFF:
        return False, f"{AUTOLOAD_ENV}=0 stops torch from loading torch_fl"
    if chosen != EAGER:
        return False, f"without {AUTOLOAD_ENV}=1 torch only arms flagos, it does not load torch_fl"
    others = other_backends()
    if others:
        return False, (
            f"another torch.backends entry point is installed ({', '.join(others)}), so torch only arms flagos "
            "(flagos_autoload)"
        )
    if not any(ep.value.split(":")[0] == "flagos_autoload" for ep in entry_points(group="torch.backends")):
        return False, "torch_fl is not installed with its torch.backends entry point"
    if not any(ep.name == "flagos" for ep in entry_points(group="triton.backends")):
        return False, "the flagos triton.backends entry point is not installed"
    return True, ""


_switched = False


def ensure_workers_see_flagos() -> None:
    """Before compiling a flagos graph: make sure the worker pool can compile its kernels."""
    global _switched
    from . import _inductor_adapter as adapter

    config = adapter.inductor_config()

    if _switched or config.worker_start_method != "subprocess" or os.environ.get(NO_FORK_FALLBACK_ENV) == "1":
        return
    ok, why = bare_worker_sees_flagos()
    if ok:
        return
    warnings.warn(
        f"flagos: subprocess compile workers cannot see the flagos device ({why}); compiling with fork workers instead",
        RuntimeWarning,
        stacklevel=2,
    )
    config.worker_start_method = "fork"
    _switched = True
    # A subprocess pool started earlier (for another device) cannot serve flagos kernels.
    adapter.shutdown_compile_workers()
