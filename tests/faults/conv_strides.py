"""Fault: a convolution kernel returns other strides than its fake/meta kernel predicts.

The convolution stride bug. inductor plans every buffer from fake tensors; fake
tensors predict a convolution's layout with ``_determine_backend_memory_format`` for the
device's conv backend. A device kernel that simply returns what its compute library
produced (channels_last kept where fake tensors predict contiguous, or the reverse) breaks
inductor's stride assertions and its layout optimisation for every conv graph.

Patched (torch.library, the registry a vendor's kernels use), forward only:
- flagos: ``aten::convolution`` for PrivateUse1 (flagos's own convolution kernel) runs the
  CPU convolution and returns its layout unchanged (the layout fix removed);
- cpu: ``aten::convolution`` for CPU returns a contiguous result where the CPU's own
  fake kernel predicts channels_last.
"""

from __future__ import annotations

from typing import Any

from tests.faults import _hooks

_libraries: list[Any] = []  # a torch.library registration lives as long as its Library


def _compute_library_layout(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    import torch

    out = torch.ops.aten.convolution.default(
        input.cpu(),
        weight.cpu(),
        None if bias is None else bias.cpu(),
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    )
    return out.to(input.device)  # keeps the CPU's strides: the bug


def _always_contiguous(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    import torch

    out = torch.ops.aten._convolution.default(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, False, False, True, True
    )
    return out.contiguous()  # the bug: channels_last inputs get a contiguous result


def _patch(device: Any) -> None:
    import warnings

    import torch

    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": the point
        warnings.simplefilter("ignore")
        if device.type == "cpu":
            library.impl("convolution", _always_contiguous, "CPU")
        else:
            library.impl("convolution", _compute_library_layout, "PrivateUse1")
    _libraries.append(library)


pytest_configure = _hooks.apply_on(("flagos", "cpu"), _patch)
