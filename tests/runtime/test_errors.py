"""Errors flagos raises where code written for cuda expects cuda's exception types."""

import pytest
import torch

import torch_fl

MISSING = torch.flagos.device_count() + 3

OUT_OF_RANGE = {
    "set_device": lambda: torch.flagos.set_device(MISSING),
    "device context": lambda: torch.flagos.device(MISSING).__enter__(),
    "tensor factory": lambda: torch.empty(2, device=f"flagos:{MISSING}"),
    "Tensor.to": lambda: torch.ones(2).to(f"flagos:{MISSING}"),
    "torch.accelerator.set_device_index": lambda: torch.accelerator.set_device_index(MISSING),
    "synchronize": lambda: torch.flagos.synchronize(MISSING),
    "get_device_properties": lambda: torch.flagos.get_device_properties(MISSING),
    "memory_allocated": lambda: torch.flagos.memory_allocated(MISSING),
    "Stream": lambda: torch.flagos.Stream(device=MISSING),
}


@pytest.mark.parametrize("call", list(OUT_OF_RANGE))
def test_out_of_range_device_raises_an_error_cuda_code_catches(call):
    before = torch.flagos.current_device()
    # cuda raises RuntimeError (torch.AcceleratorError: "invalid device ordinal") here; flagos
    # keeps its message and is an IndexError too, for code written against flagos.
    with pytest.raises(RuntimeError, match=rf"flagos:{MISSING} is out of range: this machine has") as info:
        OUT_OF_RANGE[call]()
    assert isinstance(info.value, IndexError)
    assert isinstance(info.value, torch_fl.flagos.DeviceIndexError)
    if hasattr(torch, "AcceleratorError"):
        assert isinstance(info.value, torch.AcceleratorError)
    assert torch.flagos.current_device() == before


def test_negative_set_device_is_a_no_op_as_for_cuda():
    before = torch.flagos.current_device()
    torch.flagos.set_device(-1)
    torch.accelerator.set_device_index(-1)
    assert torch.flagos.current_device() == before
