"""Fault: the raw stream handed to compiled code is a constant.

Models a vendor ``get_raw_stream`` that returns 0 (the default/null stream, "we only have
one queue") instead of the handle of the *current* stream. Compiled kernels then launch
on the default stream whatever ``with torch.<device>.stream(s)`` says: their results race
with the work the user ordered on ``s``. On a synchronous executor nothing computes wrong,
so only comparing the handles inside and outside a stream context shows it.

Patched: the inductor DeviceInterface's ``get_raw_stream`` and the device op overrides'
``import_get_raw_stream_as`` (the import inductor writes into every wrapper module).
Applies to flagos.
"""

from __future__ import annotations

from typing import Any

from tests.faults import _hooks


def get_raw_stream(device_index: int) -> int:
    return 0  # the bug: not the current stream's handle


def _patch(device: Any) -> None:
    base = _hooks.interface(device.type)
    _hooks.register_interface(
        device.type, type("ConstantStreamInterface", (base,), {"get_raw_stream": staticmethod(get_raw_stream)})
    )
    overrides = type(_hooks.device_op_overrides(device.type))

    class ConstantStreamOverrides(overrides):
        def import_get_raw_stream_as(self, name: str) -> str:
            return f"from {__name__} import get_raw_stream as {name}"

    _hooks.register_device_op_overrides(device.type, ConstantStreamOverrides())


pytest_configure = _hooks.apply_on(("flagos",), _patch)
