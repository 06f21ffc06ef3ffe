"""Fault: ``Event.elapsed_time`` reports seconds instead of milliseconds.

Models a vendor Event class that wraps the runtime's event and converts the runtime's
timestamps with the wrong unit (its C API returns seconds, or nanoseconds divided by 1e9
instead of 1e6). torch.cuda's contract, which inductor's benchmarker and every profiler
rely on, is milliseconds; autotuning still ranks configs, so nothing crashes and the unit
bug survives until someone reads a timing.

Patched: ``torch.<device>.Event`` and the inductor DeviceInterface's ``Event`` become the
wrapping class. Applies to flagos.
"""

from __future__ import annotations

from typing import Any

from tests.faults import _hooks


def _seconds_event_class(make_event: Any) -> type:
    class SecondsEvent:
        """The device's event, with elapsed_time in seconds."""

        def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kwargs):
            self._event = make_event(enable_timing, blocking, interprocess, **kwargs)

        def elapsed_time(self, end: Any) -> float:
            return self._event.elapsed_time(getattr(end, "_event", end)) / 1000.0  # the bug

        def __getattr__(self, name: str) -> Any:  # record, query, synchronize, wait, device
            return getattr(self._event, name)

    return SecondsEvent


def _patch(device: Any) -> None:
    import torch

    module = getattr(torch, device.type)
    event = _seconds_event_class(module.Event)
    module.Event = event
    base = _hooks.interface(device.type)
    _hooks.register_interface(device.type, type("SecondsEventInterface", (base,), {"Event": event}))


pytest_configure = _hooks.apply_on(("flagos",), _patch)
