"""Fault: compile workers cannot see the device.

The blind-worker bug. inductor's default ``worker_start_method="subprocess"``
starts a bare ``python -m torch._inductor.compile_worker`` that imports only torch and
triton. A device whose package is not loaded there (no ``torch.backends`` autoload: the
entry point is missing, or ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` as here) and no fallback to
``fork`` workers leaves the workers without the device's Triton driver: "Could not find an
active GPU backend", and no kernel compiles once the pool is up. Until the pool is ready
inductor compiles in-process, which hides the bug from quick tests.

Patched: the environment the worker pool copies (autoload off), torch_fl's own switch
``FLAGOS_NO_FORK_FALLBACK=1`` (no fork fallback) and inductor's
``config.worker_start_method="subprocess"``. The test process itself keeps flagos (torch
was imported before the variable is set). Applies to flagos.
"""

from __future__ import annotations

import os
from typing import Any

from tests.faults import _hooks


def _patch(device: Any) -> None:
    from torch._inductor import config

    from torch_fl.compile.workers import NO_FORK_FALLBACK_ENV

    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    os.environ[NO_FORK_FALLBACK_ENV] = "1"
    config.worker_start_method = "subprocess"


pytest_configure = _hooks.apply_on(("flagos",), _patch)
