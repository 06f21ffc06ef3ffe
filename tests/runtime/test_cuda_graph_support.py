"""The runtime pieces a CUDA graph capture of flagos work relies on (torch_fl/compile/cuda_graphs.py)."""

import pytest
import torch

from torch_fl import _C


def test_a_known_stream_handle_is_that_flagos_stream():
    stream = torch.Stream(device="flagos:0")
    stream_id, device_index, _ = _C._stream_from_native(stream.native_handle, 0)
    assert (stream_id, device_index) == (stream.stream_id, 0)
    assert _C._stream_from_native(stream.native_handle, 0)[0] == stream_id  # asked twice: one stream


def test_the_stream_of_a_handle_can_be_made_current():
    made = torch.Stream(device="flagos:0")
    stream_id = _C._stream_from_native(made.native_handle, 0)[0]
    previous = _C._current_stream(0)[0]
    _C._set_stream(stream_id, 0)
    try:
        assert _C._current_raw_stream(0) == made.native_handle
    finally:
        _C._set_stream(previous, 0)
    assert _C._current_stream(0)[0] == previous


def test_allocations_can_come_from_the_compute_device_and_are_adopted():
    torch.flagos.synchronize()
    adopted_before = torch.flagos.memory_stats()["adopted_bytes.all.current"]
    previous = _C._allocate_from_compute_device(True)
    try:
        x = torch.empty(1 << 16, device="flagos")
        adopted_during = torch.flagos.memory_stats()["adopted_bytes.all.current"]
    finally:
        assert _C._allocate_from_compute_device(previous) is True
    assert previous is False
    assert adopted_during - adopted_before >= x.numel() * x.element_size()
    x.fill_(3.0)
    assert torch.equal(x.cpu(), torch.full((1 << 16,), 3.0))
    del x
    assert torch.flagos.memory_stats()["adopted_bytes.all.current"] == adopted_before  # freed through the adoption
    y = torch.empty(1 << 16, device="flagos")  # off again: flagos's own pool
    assert torch.flagos.memory_stats()["adopted_bytes.all.current"] == adopted_before
    del y


def test_a_call_on_the_compute_stream_returns_and_raises_what_the_function_does():
    assert _C._on_compute_stream(0, lambda inputs: [x * 2 for x in inputs], [1, 2]) == [2, 4]

    def fails(_):
        raise KeyError("from inside")

    with pytest.raises(KeyError, match="from inside"):
        _C._on_compute_stream(0, fails, None)
    with pytest.raises(IndexError, match="flagos"):
        _C._on_compute_stream(torch.flagos.device_count(), lambda _: None, None)


@pytest.mark.skipif(torch.flagos.accelerator_name() != "cuda", reason="the compute device has streams on cuda only")
def test_a_call_on_the_compute_stream_sees_flagos_current_stream_as_cudas():
    made = torch.Stream(device="flagos:0")
    cuda_before = torch.cuda.current_stream(0).cuda_stream
    with torch.flagos.stream(made):
        seen = _C._on_compute_stream(0, lambda _: torch.cuda.current_stream().cuda_stream, None)
    assert seen == made.native_handle != cuda_before
    assert torch.cuda.current_stream(0).cuda_stream == cuda_before  # switched back


def test_copies_of_outputs_are_new_memory_with_the_same_values_and_strides():
    base = torch.arange(24.0, device="flagos").reshape(2, 3, 4)
    dense_permuted = base.permute(2, 0, 1)
    strided_slice = base[:, ::2]
    conjugated = torch.complex(base, -base).conj()
    outputs = [base, dense_permuted, strided_slice, conjugated, torch.empty(0, 3, device="flagos"), 7, None]
    copies = _C._copies_of_outputs(outputs)
    assert copies[-2:] == [7, None]
    for original, copy in zip(outputs[:-2], copies[:-2], strict=True):
        assert copy.device == original.device and copy.dtype == original.dtype
        assert copy.stride() == original.stride() or original is strided_slice  # clone() makes it contiguous
        assert copy.numel() == 0 or copy.data_ptr() != original.data_ptr()
        torch.testing.assert_close(copy.cpu(), original.cpu(), rtol=0, atol=0)
    base.fill_(-1.0)  # the copies do not follow the buffers they came from
    assert copies[0].cpu().equal(torch.arange(24.0).reshape(2, 3, 4))
    assert copies[1].cpu().equal(torch.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1))
