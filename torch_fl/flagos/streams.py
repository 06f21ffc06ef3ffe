"""flagos streams and events.

Both are torch's device-agnostic ``torch.Stream``/``torch.Event`` on the flagos
device: their record/wait/query/synchronize/elapsed_time go through the flagos
DeviceGuardImpl (csrc/runtime/streams.cpp) to the accelerator.

Event lineage: the autotuner's Event bug was a flagos Event deriving from
``torch.cuda.Event``, which on the CPU-only wheel is the
``torch._utils._dummy_type`` placeholder whose constructor raises "Tried to
instantiate dummy base class Event" -- so inductor's autotuner could not time
anything. Two lineages, chosen once at import:

* on the cuda accelerator of a CUDA torch build, ``Event`` keeps
  ``torch.cuda.Event``'s lineage (code written for CUDA events works), and
  records and waits on the CUDA stream that the flagos stream is;
* everywhere else ``Event(...)`` builds a device-agnostic ``torch.Event`` on
  the flagos device. It is not a Python subclass on purpose:
  ``torch.Event.elapsed_time`` checks the exact type of its argument (torch
  2.13), so subclass instances would be rejected.
  ``isinstance(e, torch.flagos.Event)`` still holds for flagos events.
"""

import functools

import torch

from flagos_autoload.device_type import DEVICE_TYPE

from .. import _C
from ..compile import _inductor_adapter
from ._device import _checked


def cuda_event_is_dummy() -> bool:
    """True when ``torch.cuda.Event`` cannot be constructed in this torch build.

    ``torch._utils._dummy_type`` stands in for the C++ ``_CudaEventBase`` when
    torch was built without CUDA; the placeholder is defined in Python, the
    real class in ``torch._C``.
    """
    base = _inductor_adapter.cuda_event_base()
    return not (isinstance(base, type) and base.__module__ == "torch._C")


def event_lineage() -> str:
    """``"torch.cuda.Event"`` on the cuda accelerator of a CUDA build, else ``"torch.Event"``."""
    if _C._accelerator_name() == "cuda" and not cuda_event_is_dummy():
        return "torch.cuda.Event"
    return "torch.Event"


class _FlagosEventType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device.type == DEVICE_TYPE


class _DeviceAgnosticEvent(metaclass=_FlagosEventType):
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


def _as_cuda_stream(stream):
    """The CUDA stream that a flagos stream (default: the current one) is, on the cuda accelerator."""
    if stream is None:  # every record() of a timing loop: no Stream object, no checks to make
        index = _C._current_device()
        return _cuda_stream(_C._current_raw_stream(index), index)
    _check_flagos(stream)
    index = stream.device_index
    return _cuda_stream(_C._raw_stream(stream.stream_id, index), index)


@functools.lru_cache(maxsize=256)
def _cuda_stream(handle: int, index: int):
    # An ExternalStream costs a device switch and back to build, a few microseconds that a
    # timing loop's record() would add to what it times. It owns nothing, so one per handle
    # serves every record and wait on that stream.
    return torch.cuda.ExternalStream(handle, device=torch.device("cuda", index))


def _cuda_lineage_event():
    class Event(torch.cuda.Event):
        """A CUDA event that records and waits on flagos streams (the cuda accelerator).

        ``record()``/``wait()`` default to the current *flagos* stream, not the
        current CUDA stream, so timings measure flagos work.
        """

        def __new__(cls, enable_timing=False, blocking=False, interprocess=False, *, device=None):
            _checked(device)
            return super().__new__(cls, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)

        def record(self, stream=None):
            super().record(_as_cuda_stream(stream))

        def wait(self, stream=None):
            super().wait(_as_cuda_stream(stream))

        def __repr__(self):
            return f"<torch.flagos.Event (torch.cuda.Event lineage) {self.cuda_event or 'uninitialized'}>"

    return Event


Event = _cuda_lineage_event() if event_lineage() == "torch.cuda.Event" else _DeviceAgnosticEvent
Event.__name__ = Event.__qualname__ = "Event"


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
