"""Discovery, presence, driver API and compile metadata of the flagos back end."""

import sys
import types

import pytest
import torch
import triton
import triton.language as tl
from triton.backends import _find_concrete_subclasses
from triton.backends.compiler import BaseBackend, GPUTarget
from triton.backends.driver import DriverBase

import flagos_triton.compiler as flagos_compiler
import flagos_triton.driver as flagos_driver
from flagos_triton import presence
from flagos_triton.compiler import FlagosBackend, FlagosOptions
from flagos_triton.driver import FlagosDriver

REAL_ACCELERATOR_NAME = presence.accelerator_name  # before conftest's autouse pin


def test_modules_have_exactly_one_concrete_class_each():
    # What triton.backends._discover_backends requires of an entry point package.
    assert _find_concrete_subclasses(flagos_compiler, BaseBackend) is FlagosBackend
    assert _find_concrete_subclasses(flagos_driver, DriverBase) is FlagosDriver


def test_discovered_through_the_entry_point():
    # Needs the distribution installed (pip install -e . registers the
    # ``triton.backends`` entry point); Triton discovered it at import time.
    from importlib.metadata import entry_points

    if not [ep for ep in entry_points().select(group="triton.backends") if ep.name == "flagos"]:
        pytest.skip("flagos is not installed (no triton.backends entry point)")
    backend = triton.backends.backends["flagos"]
    assert backend.compiler is FlagosBackend
    assert backend.driver is FlagosDriver


@pytest.mark.parametrize(
    "fake_c, expected",
    [
        (types.SimpleNamespace(_accelerator_name=lambda: "host"), True),
        (types.SimpleNamespace(_accelerator_name=lambda: "cuda"), False),
        (types.SimpleNamespace(), False),  # runtime without _accelerator_name
        (None, False),  # torch_fl not loaded in this process
    ],
)
def test_presence(monkeypatch, fake_c, expected):
    monkeypatch.setattr(presence, "accelerator_name", REAL_ACCELERATOR_NAME)  # conftest pins "host"
    monkeypatch.setattr(presence, "_gpu_available", lambda: False)
    if fake_c is None:
        monkeypatch.delitem(sys.modules, "torch_fl._C", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "torch_fl._C", fake_c)
    assert presence.host_accelerator_active() is expected


def test_a_real_gpu_keeps_triton_even_on_the_host_accelerator(monkeypatch):
    monkeypatch.setattr(presence, "accelerator_name", REAL_ACCELERATOR_NAME)
    monkeypatch.setitem(sys.modules, "torch_fl._C", types.SimpleNamespace(_accelerator_name=lambda: "host"))
    monkeypatch.setattr(presence, "_gpu_available", lambda: True)
    assert presence.host_accelerator_active() is False


def test_is_active_follows_presence(monkeypatch):
    monkeypatch.setattr(presence, "host_accelerator_active", lambda: False)
    assert not FlagosDriver.is_active()
    monkeypatch.setattr(presence, "host_accelerator_active", lambda: True)
    assert FlagosDriver.is_active()


def test_driver_without_torch_flagos(host_backend):
    drv = host_backend
    assert drv.get_current_target() == GPUTarget("flagos", flagos_driver.HOST_ARCH, 32)
    assert drv.get_current_device() == 0
    assert drv.get_current_stream(0) == 0
    props = drv.utils.get_device_properties(0)
    assert props["max_shared_mem"] > 0 and props["multiprocessor_count"] >= 1 and props["warpSize"] == 32
    assert drv.map_python_to_cpp_type("*fp32") == "void*"
    assert drv.map_python_to_cpp_type("i32") == "int32_t"
    assert callable(drv.get_benchmarker())


def test_driver_delegates_to_torch_flagos(monkeypatch):
    calls = []
    stream = types.SimpleNamespace(stream_id=1234)
    fake = types.SimpleNamespace(
        current_device=lambda: 1,
        set_device=lambda i: calls.append(("set_device", i)),
        current_stream=lambda i: stream,
        get_device_properties=lambda i: types.SimpleNamespace(
            warp_size=64, multi_processor_count=7, L2_cache_size=1024, max_shared_mem=4096
        ),
    )
    monkeypatch.setattr(flagos_driver, "_flagos_module", lambda: fake)
    drv = FlagosDriver()
    assert drv.get_current_device() == 1
    drv.set_current_device(0)
    assert calls == [("set_device", 0)]
    assert drv.get_current_stream(1) == 1234
    assert drv.get_current_target().warp_size == 64
    props = drv.utils.get_device_properties(1)
    assert props["multiprocessor_count"] == 7 and props["max_shared_mem"] == 4096
    assert drv.get_device_interface() is fake
    fake.get_raw_stream = lambda i: 99
    assert drv.get_current_stream(1) == 99


def test_active_torch_device_needs_registered_device(host_backend, monkeypatch):
    if torch._C._get_privateuse1_backend_name() == "flagos":
        assert host_backend.get_active_torch_device() == torch.device("flagos", 0)
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")
    with pytest.raises(RuntimeError, match="not registered"):
        host_backend.get_active_torch_device()


def test_options():
    backend = FlagosBackend(GPUTarget("flagos", "host", 32))
    opts = backend.parse_options({"num_warps": 8, "num_stages": 2, "debug": True, "unknown_option": 1})
    assert isinstance(opts, FlagosOptions)
    assert (opts.num_warps, opts.num_stages, opts.debug, opts.backend_name) == (8, 2, True, "flagos")
    assert opts.hash() == backend.parse_options({"num_warps": 8, "num_stages": 2, "debug": True}).hash()
    with pytest.raises(ValueError):
        backend.parse_options({"num_warps": 3})
    assert FlagosBackend.supports_target(GPUTarget("flagos", 0, 32))
    assert not FlagosBackend.supports_target(GPUTarget("cuda", 80, 32))


@triton.jit
def _copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_compiled_kernel_metadata(compile_kernel):
    k = compile_kernel(
        _copy_kernel,
        {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        {"BLOCK": 128},
        num_warps=2,
        num_stages=1,
    )
    md = k.metadata
    # what CompiledKernel, CachingAutotuner and inductor's launcher read
    assert md.name == "_copy_kernel" and k.name == "_copy_kernel"
    assert (md.num_warps, md.num_stages, md.num_ctas, md.shared) == (2, 1, 1, 0)
    assert md.target.backend == "flagos"
    assert md.global_scratch_size == 0 and md.profile_scratch_size == 0
    assert md.launch_cooperative_grid is False and md.launch_pdl is False
    assert k.packed_metadata == (2, 1, 0)
    assert set(k.asm) >= {"ttir", "flagosbin"}
    assert "tt.func" in k.asm["ttir"]
    assert isinstance(k.kernel, bytes)


def test_a_real_gpu_keeps_triton(monkeypatch):
    """Where torch.cuda has a GPU, the flagos host driver stands down (one active driver per process)."""
    import torch

    monkeypatch.setitem(sys.modules, "torch_fl._C", types.SimpleNamespace(_accelerator_name=lambda: "host"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert presence.host_accelerator_active() is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert presence.host_accelerator_active() is True
