"""Fault: the device's Event derives from ``torch.cuda.Event``.

The autotuner's Event bug. A vendor keeps the CUDA lineage (``class Event(
torch.cuda.Event)``) so that code checking ``isinstance(e, torch.cuda.Event)`` works. On a
torch build without CUDA (the CPU wheel every vendor CI uses) ``torch.cuda.Event`` is the
``torch._utils._dummy_type`` placeholder, whose constructor raises "Tried to instantiate
dummy base class Event": inductor's benchmarker (``get_event_pairs``) cannot build a timing
event, so every autotuned kernel fails to compile. Graphs that need no autotuning (one
Linear) still pass, which is how the bug shipped.

Patched: the inductor DeviceInterface's ``Event`` (what the autotuner builds). Applies to
flagos.
"""

from __future__ import annotations

from typing import Any

from tests.faults import _hooks


def cannot_plant() -> str | None:
    """Why the bug cannot happen in this process (a CUDA build's Event is real), if so."""
    from torch_fl.flagos.streams import cuda_event_is_dummy

    return None if cuda_event_is_dummy() else "torch.cuda.Event is a real class in this torch build"


def _patch(device: Any) -> None:
    import torch

    class Event(torch.cuda.Event):  # the bug: the lineage of a class that may be a dummy
        pass

    base = _hooks.interface(device.type)
    _hooks.register_interface(device.type, type("CudaLineageInterface", (base,), {"Event": Event}))


pytest_configure = _hooks.apply_on(("flagos",), _patch)
