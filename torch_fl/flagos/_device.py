"""Device selection and properties."""

from collections import namedtuple

import torch

from flagos_autoload.device_type import DEVICE_TYPE

from .. import _C

# An out-of-range device index: an IndexError and the RuntimeError cuda code expects.
DeviceIndexError = _C.DeviceIndexError


def _index(device=None, optional=True) -> int:
    """The device index meant by ``device`` (None -> current device)."""
    if device is None:
        return _C._current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_TYPE:
            raise ValueError(f"flagos: expected a flagos device, got {device}")
        return _C._current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"flagos: expected a device index, name or torch.device, got {type(device).__name__}")


def _checked(device=None) -> int:
    index = _index(device)
    _C._check_index(index)
    return index


def is_available() -> bool:
    return _C._device_count() > 0


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device) -> None:
    """Makes ``device`` current; a negative index is a no-op, as for torch.cuda.set_device."""
    if type(device) is int:  # compiled code's form, once per call: no conversions
        if device >= 0:
            _C._set_device(device)
        return
    index = _index(device)
    if index >= 0:
        _C._set_device(index)


def _lazy_init() -> None:
    """Called by torch before the first flagos tensor (as torch.cuda._lazy_init): marks flagos
    initialised in ATen's context, which asks its hooks (is_pinned(), ...) only after that."""
    _C._lazy_init()


def init() -> None:
    """Initialises flagos in ATen's context now, as torch.cuda.init does (the devices themselves
    are ready at import)."""
    _lazy_init()


def is_initialized() -> bool:
    return True


def accelerator_name() -> str:
    """The accelerator behind flagos in this process ("host", "cuda", ...)."""
    return _C._accelerator_name()


def synchronize(device=None) -> None:
    """Waits for all work on every stream of the device."""
    _C._synchronize(_checked(device))


class device:
    """Context manager that makes ``device`` current, then restores the previous one."""

    def __init__(self, device):
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self):
        self.previous = _C._current_device()
        if self.index >= 0 and self.index != self.previous:
            _C._set_device(self.index)
        return self

    def __exit__(self, *exc):
        if self.index >= 0 and self.index != self.previous:
            _C._set_device(self.previous)
        return False


class _DeviceGuard:
    """The device guard inductor's wrapper enters on every call of compiled code: an int index, two
    calls into the runtime (``torch.flagos.device`` converts and checks its argument first)."""

    __slots__ = ("idx", "prev_idx")

    def __init__(self, index: int):
        self.idx = index
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc):
        _C._exchange_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor ``obj`` current (no-op for other devices)."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == DEVICE_TYPE else None)


_Properties = namedtuple(  # type: ignore[name-match]  # the class name shows in repr()
    "_FlagosDeviceProperties",
    [
        "name",
        "total_memory",
        "multi_processor_count",
        "warp_size",
        "max_threads_per_block",
        "max_threads_per_multi_processor",
        "regs_per_multiprocessor",
        "shared_memory_per_block",
        "L2_cache_size",
        "major",
        "minor",
        "clock_rate_khz",
        "accelerator",
    ],
)


def get_device_properties(device=None):
    props = _C._get_device_properties(_checked(device))
    return _Properties(accelerator=_C._accelerator_name(), **props)


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple:
    props = get_device_properties(device)
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    # The compute device runs bf16 kernels (CPU: emulated in fp32; CUDA: native).
    return True
