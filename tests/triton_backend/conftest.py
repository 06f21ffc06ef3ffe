"""Fixtures for the flagos Triton back end tests.

The back end is tested on its own: flagos "device memory" on the host
accelerator is host RAM, so CPU tensors' data pointers stand in for it, and
the driver is forced active by monkeypatching ``presence.host_accelerator_active``
(the runtime may not report the host accelerator in this process).
"""

import pytest
import torch
import triton
from triton.compiler.compiler import ASTSource
from triton.runtime import driver as triton_driver

from flagos_triton import driver as flagos_driver
from flagos_triton import presence
from flagos_triton.driver import FlagosDriver


@pytest.fixture(autouse=True)
def host_accelerator_compiles(monkeypatch):
    """These tests are about the host back end: its compiler must not hand
    kernels to the NVIDIA back end because this process runs the cuda
    accelerator (test_cuda_delegation.py tests that hand-over)."""
    monkeypatch.setattr(presence, "accelerator_name", lambda: "host")


@pytest.fixture
def host_backend(monkeypatch, tmp_path):
    """The flagos driver, active in this process, with a fresh Triton cache.

    ``torch.flagos`` is hidden from the driver so these tests do not depend on
    the runtime's state (device/stream/property delegation is tested with a
    stand-in module in test_driver.py).
    """
    monkeypatch.setattr(presence, "host_accelerator_active", lambda: True)
    monkeypatch.setattr(flagos_driver, "_flagos_module", lambda: None)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    previous = triton_driver._active
    drv = FlagosDriver()
    triton_driver.set_active(drv)
    try:
        yield drv
    finally:
        triton_driver._active = previous


@pytest.fixture
def compile_kernel(host_backend):
    """compile_kernel(jit_fn, signature, constexprs) -> CompiledKernel for the flagos target."""

    def _compile(fn, signature, constexprs=None, **options):
        src = ASTSource(fn, signature, constexprs or {})
        return triton.compile(src, target=host_backend.get_current_target(), options=options or None)

    return _compile


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(0)
