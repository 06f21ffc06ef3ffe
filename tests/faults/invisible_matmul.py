"""Fault: compiled code's matmuls run past the dispatcher, unseen by the profiler.

Models a vendor who, to save host time per call, makes inductor's wrapper call the device's
matmul kernel directly instead of ``extern_kernels.mm(..., out=buf)`` (the aten op), and forgets
what flagos's direct calls check: while a profiler listens, the call must go through the
dispatcher, where RecordFunction records the op event. Results stay right; profiles and FLOP
counts of compiled models lose their matmuls.

Patched: flagos's wrapper codegen, whose extern ``mm`` becomes :func:`mm_past_the_dispatcher`
(the product computed without an aten matmul op). Applies to flagos.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.faults import _hooks


def mm_past_the_dispatcher(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> None:
    # the bug: the matmul under another name, whatever listens
    out.copy_((a.unsqueeze(-1) * b.unsqueeze(0)).sum(1))


def _patch(device: Any) -> None:
    from torch_fl.compile import _inductor_adapter as adapter

    header = [  # the allocation line flagos's wrapper writes, and the faulty matmul
        f"from torch_fl._C import _empty_strided as empty_strided_{device.type}",
        f"from {__name__} import mm_past_the_dispatcher as mm_{device.type}",
    ]
    wrapper = adapter.wrapper_with_direct_calls(
        device.type, header, {"extern_kernels.mm": f"mm_{device.type}"}, lambda: True
    )
    _hooks.register_wrapper_codegen(device.type, wrapper)


pytest_configure = _hooks.apply_on(("flagos",), _patch)
