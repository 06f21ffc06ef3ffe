"""Driver half of the ``flagos`` Triton back end (host accelerator).

Active only where the flagos host accelerator is (``presence.py``). Device,
stream and property queries go to ``torch.flagos`` when the device is
registered; kernels are launched by ``launcher.FlagosLauncher``.

This module must hold exactly one concrete ``DriverBase`` subclass (Triton's
``_find_concrete_subclasses``).
"""

from __future__ import annotations

import os
import statistics
import time

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

from . import presence

BACKEND_NAME = "flagos"
# GPUTarget.arch of the host accelerator. Inductor builds its compile target
# from the device interface's get_compute_capability(); return the same value
# there so the targets (and Triton's cache keys) agree.
HOST_ARCH = "host"
DEFAULT_WARP_SIZE = 32
# Used only when torch.flagos does not report a size: the benchmark cache
# buffer is zeroed before every timed run, so keep it near a CPU's L2/L3 size.
DEFAULT_L2_CACHE_SIZE = 8 * 1024 * 1024
# No shared-memory limit exists on the host; large enough never to reject a
# config, small enough for a C int.
HOST_MAX_SHARED_MEM = 1 << 30


def _flagos_module():
    """``torch.flagos`` if the device is registered in this process, else None."""
    try:
        import torch
    except Exception:
        return None
    return getattr(torch, "flagos", None)  # the driver is active only where torch_fl is loaded


def _device_index(device) -> int:
    if device is None:
        mod = _flagos_module()
        return int(mod.current_device()) if mod is not None and hasattr(mod, "current_device") else 0
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)
    return 0 if index is None else int(index)


def _torch_properties(device):
    mod = _flagos_module()
    if mod is None or not hasattr(mod, "get_device_properties"):
        return None
    try:
        return mod.get_device_properties(_device_index(device))
    except Exception:
        return None


def _prop(props, names, default):
    for name in names:
        value = getattr(props, name, None) if props is not None else None
        if value is None and isinstance(props, dict):
            value = props.get(name)
        if value is not None:
            return value
    return default


def host_warp_size(device=None) -> int:
    return int(_prop(_torch_properties(device), ("warp_size", "warpSize"), DEFAULT_WARP_SIZE))


class FlagosUtils:
    """``driver.utils``: what Triton's runtime and inductor call on it."""

    def load_binary(self, name, kernel, shared, device):
        """Parse the binary; returns (module, function, n_regs, n_spills, n_max_threads)
        like the CUDA driver's ``load_binary``."""
        from . import binary

        program = binary.load(kernel)
        if program.name != name:
            raise RuntimeError(f"flagos binary holds kernel {program.name!r}, asked for {name!r}")
        # n_max_threads: Triton checks num_warps * warp_size against it; the
        # host runs any block size.
        return program, program, 0, 0, 1 << 30

    def get_device_properties(self, device=0):
        props = _torch_properties(device)
        return {
            "max_shared_mem": int(_prop(props, ("max_shared_mem", "shared_memory_per_block"), HOST_MAX_SHARED_MEM)),
            "max_num_regs": int(_prop(props, ("max_num_regs", "regs_per_multiprocessor"), 65536)),
            "multiprocessor_count": int(
                _prop(props, ("multi_processor_count", "multiprocessor_count"), os.cpu_count() or 1)
            ),
            "warpSize": int(_prop(props, ("warp_size", "warpSize"), DEFAULT_WARP_SIZE)),
            "sm_clock_rate": int(_prop(props, ("clock_rate", "sm_clock_rate"), 0)),
            "mem_clock_rate": int(_prop(props, ("memory_clock_rate", "mem_clock_rate"), 0)),
            "mem_bus_width": int(_prop(props, ("memory_bus_width", "mem_bus_width"), 0)),
        }


_CPP_TYPES = {
    "i1": "int8_t",
    "i8": "int8_t",
    "i16": "int16_t",
    "i32": "int32_t",
    "i64": "int64_t",
    "u1": "uint8_t",
    "u8": "uint8_t",
    "u16": "uint16_t",
    "u32": "uint32_t",
    "u64": "uint64_t",
    "fp16": "double",
    "bf16": "double",
    "fp32": "double",
    "f32": "double",
    "fp64": "double",
}


def host_benchmarker(
    kernel_call, *, quantiles=None, warmup=1, rep=20, grad_to_none=None, return_mode="mean", max_runs=100, **_ignored
):
    """The driver's benchmarker (``triton.autotune`` uses it): ``do_bench``'s
    interface, timed with a wall clock.

    Host launches run synchronously on the calling thread, so the wall clock
    is exact here and no device events or cache flushes are needed. ``warmup``
    runs first, then runs are repeated for ``rep`` ms (at least once, at most
    ``max_runs`` times). Times are in milliseconds.
    """
    for _ in range(max(int(warmup), 0)):
        kernel_call()
    times = []
    budget = rep / 1000.0
    start = time.perf_counter()
    while True:
        if grad_to_none is not None:
            for x in grad_to_none:
                x.grad = None
        t0 = time.perf_counter()
        kernel_call()
        times.append((time.perf_counter() - t0) * 1000.0)
        if time.perf_counter() - start >= budget or len(times) >= max_runs:
            break
    if quantiles is not None:
        ordered = sorted(times)
        values = [ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] for q in quantiles]
        return values[0] if len(values) == 1 else values
    return {"all": lambda t: t, "min": min, "max": max, "mean": statistics.mean, "median": statistics.median}[
        return_mode
    ](times)


class FlagosDriver(DriverBase):
    def __init__(self):
        super().__init__()
        self.utils = FlagosUtils()

    @property
    def launcher_cls(self):
        # Imported on first use: this module is imported while Triton itself
        # is still initialising (backend discovery).
        from .launcher import FlagosLauncher

        return FlagosLauncher

    @classmethod
    def is_active(cls):
        return presence.host_accelerator_active()

    def map_python_to_cpp_type(self, ty: str) -> str:
        if ty.startswith("*"):
            return "void*"
        return _CPP_TYPES[ty]

    def get_current_target(self):
        return GPUTarget(BACKEND_NAME, HOST_ARCH, host_warp_size())

    def get_active_torch_device(self):
        import torch

        from ._triton_adapter import privateuse1_backend_name

        name = privateuse1_backend_name()
        if name != BACKEND_NAME:
            raise RuntimeError("the flagos device is not registered in this process (import torch_fl first)")
        return torch.device(BACKEND_NAME, self.get_current_device())

    def get_device_interface(self):
        mod = _flagos_module()
        if mod is None:
            raise RuntimeError("torch.flagos is not registered in this process")
        return mod

    def get_current_device(self):
        mod = _flagos_module()
        if mod is None or not hasattr(mod, "current_device"):
            return 0
        return int(mod.current_device())

    def set_current_device(self, device):
        mod = _flagos_module()
        if mod is not None and hasattr(mod, "set_device"):
            mod.set_device(_device_index(device))

    def get_current_stream(self, device=None):
        """The raw handle of the current flagos stream (what inductor's
        ``get_raw_stream`` passes to launchers)."""
        mod = _flagos_module()
        if mod is None:
            return 0
        index = _device_index(device)
        for name in ("get_raw_stream", "_get_current_raw_stream"):
            fn = getattr(mod, name, None)
            if fn is not None:
                return fn(index)
        current = getattr(mod, "current_stream", None)
        if current is None:
            return 0
        stream = current(index)
        for name in ("flagos_stream", "stream_id"):
            value = getattr(stream, name, None)
            if value is not None:
                return value
        return 0

    def get_benchmarker(self):
        return host_benchmarker

    def get_empty_cache_for_benchmark(self):
        import torch

        size = int(_prop(_torch_properties(None), ("L2_cache_size", "l2_cache_size"), DEFAULT_L2_CACHE_SIZE))
        return torch.empty(max(size, 4) // 4, dtype=torch.int, device=self.get_active_torch_device())

    def clear_cache(self, cache):
        cache.zero_()
