"""Fault: every compiled kernel launch leaks device memory.

Models a vendor Triton launcher that allocates a per-launch scratch buffer on the device
(a workspace for grid synchronisation, a copy of the kernel arguments) and keeps it in a
module-level list instead of freeing it after the launch. Results stay right; device
memory grows with every call of a compiled function until a long training run dies.

Patched: Triton's active driver (``triton.runtime.driver.set_active``) becomes a subclass
of the device's driver whose ``launcher_cls`` wraps the real launcher. Applies to flagos.
"""

from __future__ import annotations

from typing import Any

from tests.faults import _hooks

SCRATCH_BYTES = 64 * 1024
_scratch: list[Any] = []  # the leak: never cleared


def _leaky_launcher_cls(base: type, device: Any) -> type:
    import torch

    class LeakyLauncher(base):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            _scratch.append(torch.empty(SCRATCH_BYTES, dtype=torch.uint8, device=device))
            return super().__call__(*args, **kwargs)

    return LeakyLauncher


def _patch(device: Any) -> None:
    from triton.runtime import driver

    healthy = type(driver.active)
    launcher = _leaky_launcher_cls(healthy().launcher_cls, device)

    class LeakyDriver(healthy):
        @property
        def launcher_cls(self) -> type:
            return launcher

    driver.set_active(LeakyDriver())


pytest_configure = _hooks.apply_on(("flagos",), _patch)
