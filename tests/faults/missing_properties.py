"""Fault: device properties inductor needs are missing or wrong.

Models a vendor DeviceInterface whose ``get_device_properties`` returns its own struct
with the fields its runtime happens to have: no ``multi_processor_count`` (inductor sizes
grids and persistent reductions by it) and ``L2_cache_size = 0`` ("unknown"; the
benchmarker zeroes an L2-sized buffer before every timing, so no cache flush happens and
autotuning times warm caches).

Patched: the inductor DeviceInterface's ``get_device_properties`` and its ``Worker``'s
(what compile workers read). Applies to flagos.
"""

from __future__ import annotations

import types
from typing import Any

from tests.faults import _hooks

DROPPED = ("multi_processor_count",)
WRONG = {"L2_cache_size": 0}


def vendor_properties(props: Any) -> Any:
    """The properties as the faulty struct reports them."""
    fields = {name: getattr(props, name) for name in dir(props) if not name.startswith("_")}
    fields = {k: v for k, v in fields.items() if not callable(v) and k not in DROPPED}
    return types.SimpleNamespace(**{**fields, **WRONG})


def _patch(device: Any) -> None:
    base = _hooks.interface(device.type)

    class Worker(base.Worker):
        @staticmethod
        def get_device_properties(device=None):
            return vendor_properties(base.Worker.get_device_properties(device))

    def get_device_properties(device=None):
        return vendor_properties(base.get_device_properties(device))

    attrs = {"Worker": Worker, "get_device_properties": staticmethod(get_device_properties)}
    _hooks.register_interface(device.type, type("MissingPropertiesInterface", (base,), attrs))


pytest_configure = _hooks.apply_on(("flagos",), _patch)
