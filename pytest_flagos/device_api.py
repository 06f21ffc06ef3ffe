"""The device's runtime API, generic torch first, the device module second.

A PrivateUse1 device need not be shaped like torch.cuda: its streams and events may exist
only through torch's device-agnostic ``torch.Stream``/``torch.Event`` (the device's c10
DeviceGuardImpl), its synchronize, device count, current device and memory statistics
only through ``torch.accelerator``. So every lookup here tries the generic API first --
``torch.accelerator`` applies when the device under test is the process's accelerator --
then the device module (``torch.<type>``, as torch.get_device_module finds it), and raises MissingAPI, which names
both, when neither has it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

# What c10's DeviceGuardImplInterface says where a backend did not implement a hook.
NOT_IMPLEMENTED_MARKERS = (
    "Backend doesn't support",
    "does not support",
    "not implemented",
    "Not implemented",
    "is not a DeviceAllocator",  # torch.accelerator.memory_* on an allocator without stats
)


class MissingAPI(AttributeError):
    """Neither the generic torch API nor the device module provides what was asked."""


def device_module(device_type: str) -> Any:
    """torch.<type> (torch.cuda, torch.flagos, ...), or None: what torch.get_device_module
    returns, read without its functools.cache (a module registered later must be seen)."""
    import torch

    return getattr(torch, device_type, None)


def accelerator_is(device: Any) -> bool:
    """Whether ``torch.accelerator`` speaks for the device's type in this process."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return False
    try:
        current = accelerator.current_accelerator()
    except Exception:
        return False
    return current is not None and current.type == device.type


def index_of(device: Any) -> int:
    return device.index if device.index is not None else 0


def is_not_implemented(exc: BaseException) -> bool:
    """An error that says a hook is absent (c10's default), not that it is broken."""
    if isinstance(exc, (NotImplementedError, AttributeError)):
        return True
    text = str(exc)
    return any(marker in text for marker in NOT_IMPLEMENTED_MARKERS)


def _module_function(device: Any, name: str) -> Callable[..., Any] | None:
    fn = getattr(device_module(device.type), name, None)
    return fn if callable(fn) else None


def _missing(device: Any, generic: str, name: str) -> MissingAPI:
    return MissingAPI(
        f"{generic} does not apply to {device.type!r} (not the process's accelerator) and "
        f"torch.{device.type} has no {name}()"
    )


# ---- devices ---------------------------------------------------------------------------


def _generic_then_module(device: Any, generic: Callable[[], Any] | None, generic_name: str, name: str, *args: Any):
    """``generic()`` where the device is the accelerator; if that raises (a PrivateUse1 device
    without hooks, say) or does not apply, the module's ``name(*args)``; else MissingAPI."""
    own = _module_function(device, name)
    if generic is not None and accelerator_is(device):
        try:
            return generic()
        except Exception:
            if own is None:
                raise
    if own is None:
        raise _missing(device, generic_name, name)
    return own(*args)


def device_count(device: Any) -> int:
    import torch

    if device.type == "cpu":
        return 1
    return int(
        _generic_then_module(device, torch.accelerator.device_count, "torch.accelerator.device_count()", "device_count")
    )


def current_device_index(device: Any) -> int:
    import torch

    return int(
        _generic_then_module(
            device,
            torch.accelerator.current_device_index,
            "torch.accelerator.current_device_index()",
            "current_device",
        )
    )


def set_device_index(device: Any, index: int) -> None:
    import torch

    _generic_then_module(
        device,
        lambda: torch.accelerator.set_device_index(index),
        "torch.accelerator.set_device_index()",
        "set_device",
        index,
    )


@contextlib.contextmanager
def on_device(device: Any, index: int) -> Iterator[None]:
    """``with torch.accelerator.device_index(i)``, else the module's ``device(i)``."""
    import torch

    context = getattr(getattr(torch, "accelerator", None), "device_index", None)
    if accelerator_is(device) and context is not None:
        with context(index):
            yield
        return
    fn = _module_function(device, "device")
    if fn is None:
        raise _missing(device, "torch.accelerator.device_index()", "device")
    with fn(index):
        yield


def synchronize(device: Any) -> None:
    """Wait for all work queued on the device: torch.accelerator.synchronize, else the module's."""
    import torch

    if device.type == "cpu" and _module_function(device, "synchronize") is None:
        return
    _generic_then_module(
        device,
        lambda: torch.accelerator.synchronize(index_of(device)),
        "torch.accelerator.synchronize()",
        "synchronize",
        device,
    )


# ---- streams and events ---------------------------------------------------------------


def new_stream(device: Any) -> Any:
    """torch.Stream on the device (its DeviceGuardImpl's getNewStream)."""
    import torch

    return torch.Stream(device=device)


def current_stream(device: Any) -> Any:
    import torch

    return _generic_then_module(
        device,
        lambda: torch.accelerator.current_stream(index_of(device)),
        "torch.accelerator.current_stream()",
        "current_stream",
        device,
    )


@contextlib.contextmanager
def using_stream(device: Any, stream: Any) -> Iterator[None]:
    """Make `stream` current inside the block: torch.Stream's own context manager, else
    torch.accelerator.set_stream and back, else the module's ``stream(s)``."""
    import torch

    if hasattr(type(stream), "__enter__") and isinstance(stream, torch.Stream):
        with stream:
            yield
        return
    if accelerator_is(device):
        previous = current_stream(device)
        torch.accelerator.set_stream(stream)
        try:
            yield
        finally:
            torch.accelerator.set_stream(previous)
        return
    fn = _module_function(device, "stream")
    if fn is None:
        raise _missing(device, "torch.accelerator.set_stream()", "stream")
    with fn(stream):
        yield


def new_event(device: Any, enable_timing: bool = False) -> Any:
    """torch.Event on the device (its DeviceGuardImpl's record/block/query/elapsed_time)."""
    import torch

    return torch.Event(device=device, enable_timing=enable_timing)


def event_factories(device: Any) -> list[tuple[str, Callable[..., Any]]]:
    """(name, factory(enable_timing=...)) for torch.Event and, when the device module has
    its own Event class (an extra, e.g. torch.cuda.Event), that one too: both must work."""
    factories: list[tuple[str, Callable[..., Any]]] = [
        ("torch.Event", lambda enable_timing=False: new_event(device, enable_timing))
    ]
    own = getattr(device_module(device.type), "Event", None)
    if callable(own):
        factories.append((f"torch.{device.type}.Event", lambda enable_timing=False: own(enable_timing=enable_timing)))
    return factories


# ---- memory --------------------------------------------------------------------------

MEMORY_FUNCTIONS = (
    "memory_allocated",
    "memory_reserved",
    "max_memory_allocated",
    "reset_peak_memory_stats",
    "empty_cache",
    "memory_stats",
)


def memory_function(device: Any, name: str) -> Callable[..., Any]:
    """torch.accelerator.<name> (torch 2.8+: the device's c10 DeviceAllocator), falling back
    to the module's where the generic one says the allocator has no such hook; raises
    MissingAPI when neither exists."""
    import torch

    generic = getattr(getattr(torch, "accelerator", None), name, None)
    own = _module_function(device, name)
    if generic is None or not accelerator_is(device):
        if own is None:
            raise _missing(device, f"torch.accelerator.{name}()", name)
        return own

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return generic(*args, **kwargs)
        except Exception as exc:
            if own is None or not is_not_implemented(exc):
                raise
        return own(*args, **kwargs)

    return call
