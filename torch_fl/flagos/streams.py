"""flagos streams and events.

Both are torch's device-agnostic ``torch.Stream``/``torch.Event`` on the flagos
device: their record/wait/query/synchronize/elapsed_time go through the flagos
DeviceGuardImpl (csrc/runtime/streams.cpp) to the accelerator.

Event lineage: the change request's first bug was a flagos Event deriving from
``torch.cuda.Event``, which on the CPU-only wheel is the
``torch._utils._dummy_type`` placeholder whose constructor raises "Tried to
instantiate dummy base class Event" -- so inductor's autotuner could not time
anything. Here ``Event(...)`` builds a ``torch.Event`` on the flagos device.
It is not a Python subclass on purpose: ``torch.Event.elapsed_time`` checks the
exact type of its argument (torch 2.13), so subclass instances would be
rejected. ``isinstance(e, torch.flagos.Event)`` still holds for flagos events.
"""

import torch

from .. import _C
from ._device import DEVICE_TYPE, _checked


def cuda_event_is_dummy() -> bool:
    """True when ``torch.cuda.Event`` cannot be constructed in this torch build.

    ``torch._utils._dummy_type`` stands in for the C++ ``_CudaEventBase`` when
    torch was built without CUDA; the placeholder is defined in Python, the
    real class in ``torch._C``.
    """
    base = getattr(torch._C, "_CudaEventBase", None)
    return not (isinstance(base, type) and base.__module__ == "torch._C")


class _FlagosEventType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device.type == DEVICE_TYPE


class Event(metaclass=_FlagosEventType):
    """An event on a flagos device (argument order of ``torch.cuda.Event``).

    ``enable_timing=True`` makes ``start.elapsed_time(end)`` report the
    milliseconds between the two records, measured by the accelerator.
    """

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False, *, device=None):
        return torch.Event(
            device=torch.device(DEVICE_TYPE, _checked(device)),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )


class Stream(torch.Stream):
    """A flagos stream: work submitted to it runs in order.

    ``Stream()`` creates a new stream on the current (or given) device;
    ``Stream(stream_id=..., device_index=..., device_type=...)`` wraps an
    existing one. Usable as a context manager, like ``torch.flagos.stream(s)``.
    """

    def __new__(cls, device=None, priority=0, **existing):
        if existing:
            return super().__new__(cls, **existing)
        return super().__new__(cls, device=torch.device(DEVICE_TYPE, _checked(device)), priority=priority)

    @property
    def flagos_stream(self) -> int:
        """The accelerator's handle of this stream (what compiled kernels launch on)."""
        return _C._raw_stream(self.stream_id, self.device_index)

    def __enter__(self):
        self._context = StreamContext(self)
        return self._context.__enter__()

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)

    def __repr__(self):
        return f"<torch.flagos.Stream device=flagos:{self.device_index} id={self.stream_id}>"


def _wrap(packed) -> Stream:
    stream_id, device_index, device_type = packed
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def current_stream(device=None) -> Stream:
    return _wrap(_C._current_stream(_checked(device)))


def default_stream(device=None) -> Stream:
    return _wrap(_C._default_stream(_checked(device)))


def set_stream(stream) -> None:
    if stream is None:
        return
    _check_flagos(stream)
    _C._set_stream(stream.stream_id, stream.device_index)


def _check_flagos(stream):
    if torch.device(stream.device).type != DEVICE_TYPE:
        raise ValueError(f"flagos: expected a flagos stream, got a stream on {stream.device}")


class StreamContext:
    """Makes ``stream`` (and its device) current inside a ``with`` block."""

    def __init__(self, stream):
        self.stream = stream
        self._previous_device = None
        self._previous_stream = None

    def __enter__(self):
        if self.stream is None:
            return None
        _check_flagos(self.stream)
        self._previous_device = _C._current_device()
        if self.stream.device_index != self._previous_device:
            _C._set_device(self.stream.device_index)
        self._previous_stream = _C._current_stream(self.stream.device_index)
        _C._set_stream(self.stream.stream_id, self.stream.device_index)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        stream_id, device_index, _ = self._previous_stream
        _C._set_stream(stream_id, device_index)
        if self._previous_device != self.stream.device_index:
            _C._set_device(self._previous_device)
        return False


def stream(stream) -> StreamContext:
    """``with torch.flagos.stream(s):`` runs the block's flagos work on ``s``."""
    return StreamContext(stream)
