"""flagos through torch's generic accelerator API (torch.accelerator), as device-agnostic code
uses it."""

import pytest
import torch


@pytest.fixture
def capability():
    get = getattr(torch.accelerator, "get_device_capability", None)
    if get is None:
        pytest.skip(f"torch {torch.__version__} has no torch.accelerator.get_device_capability")
    return get


def test_generic_api_sees_flagos():
    assert torch.accelerator.current_accelerator() == torch.device("flagos")
    assert torch.accelerator.device_count() == torch.flagos.device_count()


def test_device_capability_lists_the_dtypes_flagos_holds(capability):
    supported = capability()["supported_dtypes"]
    common = {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int8}
    common |= {torch.uint8, torch.bool, torch.complex64}
    assert common <= set(supported)
    assert capability("flagos:0")["supported_dtypes"] == supported
    # What the capability promises: tensors of each dtype are allocated on flagos and copied both ways.
    for dtype in supported:
        host = torch.zeros(4, dtype=dtype)
        back = host.to("flagos").cpu()
        assert back.dtype == dtype and back.view(torch.uint8).eq(0).all(), dtype


def test_device_capability_leaves_out_what_flagos_cannot_hold(capability):
    supported = set(capability()["supported_dtypes"])
    quantized = {torch.qint8, torch.quint8, torch.qint32}
    assert not (quantized & supported), "flagos tensors are strided: no quantized dtypes"
    for dtype in [getattr(torch, f"uint{bits}", None) for bits in range(1, 8)]:
        if dtype is not None:
            assert dtype not in supported, f"{dtype} cannot be copied to or from flagos"


def test_device_capability_of_a_missing_device_raises(capability):
    with pytest.raises((IndexError, RuntimeError), match="out of range"):
        capability(torch.flagos.device_count() + 3)
