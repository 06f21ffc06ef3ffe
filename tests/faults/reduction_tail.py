"""Fault: generated reductions drop their last partial block.

Models a vendor's Triton codegen (a Scheduling/TritonKernel subclass, or a compiler pass)
that computes a looped reduction's trip count with floor division: ``for r0_offset in
range(0, (r0_numel // R0_BLOCK) * R0_BLOCK, R0_BLOCK)``. Reductions whose length is a
multiple of the block size are right; every other one silently loses its tail. Persistent
reductions (one block covers the row) are untouched, so only rows too long for a single
block show it.

Patched: the device's inductor Scheduling (register_backend_for_device) rewrites the loop
bound in each kernel's source before inductor defines the kernel. Applies to flagos.
"""

from __future__ import annotations

import re
from typing import Any

from tests.faults import _hooks

_LOOP = re.compile(r"\b(tl\.range|range)\(0, (r\d+_numel), (R\d+_BLOCK)\)")


def drop_partial_blocks(src_code: str) -> str:
    """The kernel source with each reduction loop's bound rounded down to whole blocks."""
    return _LOOP.sub(r"\1(0, (\2 // \3) * \3, \3)", src_code)


def faulty_scheduling(base: type) -> type:
    class TailDroppingScheduling(base):
        def define_kernel(self, src_code, node_schedule, kernel):
            return super().define_kernel(drop_partial_blocks(src_code), node_schedule, kernel)

    return TailDroppingScheduling


def apply(device: Any) -> None:
    _hooks.register_scheduling(device.type, faulty_scheduling(_hooks.scheduling(device.type)))


pytest_configure = _hooks.apply_on(("flagos",), apply)
