"""The runtime pieces a CUDA graph capture of flagos work relies on (torch_fl/compile/cuda_graphs.py)."""

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
