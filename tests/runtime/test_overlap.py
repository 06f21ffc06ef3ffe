"""Writes whose destination shares memory with a source behave as on the compute device.

The compute device's kernels refuse a write whose output partly overlaps an input, or
whose output has elements that share memory ("some elements of the input tensor and the
written-to tensor refer to a single memory location"). Those checks compare storages, so
a flagos op that views its arguments through separate compute storages would skip them
and compute garbage silently. Each case runs on the CPU and on flagos: both must raise
the same error, or both must give the same values.
"""

import pytest
import torch

from tests.requirements import accelerator

COMPUTE = "cpu" if accelerator == "host" else "cuda"


def _arange(device, n=10):
    return torch.arange(float(n), device=device)


def _shifted_copy_forward(d):
    x = _arange(d)
    x[1:].copy_(x[:-1])
    return x


def _shifted_copy_backward(d):
    x = _arange(d)
    x[:-1].copy_(x[1:])
    return x


def _copy_between_disjoint_halves(d):
    x = _arange(d)
    x[:5].copy_(x[5:])
    return x


def _copy_onto_itself(d):
    x = _arange(d)
    x.copy_(x)
    return x


def _copy_same_memory_other_view(d):
    x = _arange(d)
    x.view(2, 5).copy_(x.view(2, 5).clone().flip(0))
    return x


def _copy_transposed_onto_itself(d):
    x = _arange(d, 16).view(4, 4)
    x.copy_(x.t())
    return x


def _copy_cast_overlapping(d):
    x = torch.arange(10, device=d, dtype=torch.int32)
    x.view(torch.float32)[1:].copy_(x[:-1])
    return x


def _copy_into_expanded(d):
    x = torch.zeros(4, device=d).expand(3, 4)
    x.copy_(torch.ones(3, 4, device=d))
    return x


def _add_out_overlaps_input(d):
    x = _arange(d)
    torch.add(x[:-1], 1, out=x[1:])
    return x


def _mul_out_overlaps_input(d):
    x = _arange(d)
    torch.mul(x[1:], 2, out=x[:-1])
    return x


def _fallback_op_out_overlaps_input(d):
    x = _arange(d)
    torch.clamp(x[:-2], min=3, out=x[2:])  # clamp.out reaches the boxed fallback
    return x


def _inplace_on_overlapping_other(d):
    x = _arange(d)
    x[1:].add_(x[:-1])
    return x


def _index_copy_overlap(d):
    x = _arange(d)
    x[:6].index_copy_(0, torch.tensor([0, 1, 2], device=d), x[1:4])
    return x


def _in_place_full_overlap(d):
    x = _arange(d)
    torch.add(x, 1, out=x)
    return x


CASES = [
    _shifted_copy_forward,
    _shifted_copy_backward,
    _copy_between_disjoint_halves,
    _copy_onto_itself,
    _copy_same_memory_other_view,
    _copy_transposed_onto_itself,
    _copy_cast_overlapping,
    _copy_into_expanded,
    _add_out_overlaps_input,
    _mul_out_overlaps_input,
    _fallback_op_out_overlaps_input,
    _inplace_on_overlapping_other,
    _index_copy_overlap,
    _in_place_full_overlap,
]


def _outcome(case, device):
    try:
        return "value", case(device).cpu()
    except (RuntimeError, ValueError) as exc:
        return "error", (type(exc), str(exc).splitlines()[0])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__.strip("_"))
def test_overlapping_write_behaves_as_on_the_compute_device(case):
    kind, expected = _outcome(case, COMPUTE)
    got_kind, got = _outcome(case, "flagos")
    assert got_kind == kind, f"compute device ({COMPUTE}) gave {kind} {expected!r}; flagos gave {got_kind} {got!r}"
    if kind == "value":
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    else:
        assert got[0] is expected[0]
        assert expected[1] in got[1], got[1]


def test_overlap_checks_cover_copies_between_flagos_storages_of_one_allocation():
    # A flagos view made by set_ onto another tensor's storage shares the storage itself.
    x = _arange("flagos")
    y = torch.empty(0, device="flagos").set_(x.untyped_storage(), 1, (9,), (1,))
    with pytest.raises(RuntimeError, match="single memory location"):
        y.copy_(x[:-1])
