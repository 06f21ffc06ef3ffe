"""torch.save / torch.load of flagos tensors behave as they do for cuda: storages are tagged with
their device, map_location moves them, and a checkpoint naming a device this machine lacks
fails with torch's "use map_location" message."""

import io
import textwrap

import pytest
import torch

from tests.helpers import run_python
from tests.requirements import cuda_accelerator, two_devices


def _round_trip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


@two_devices
def test_storages_are_tagged_with_their_flagos_device():
    t = torch.arange(6.0, device="flagos:1")
    assert torch.serialization.location_tag(t.untyped_storage()) == "flagos:1"
    loaded = _round_trip({"t": t, "row": t[2:4]})
    assert loaded["t"].device == torch.device("flagos", 1)
    # Views keep sharing one storage, as for cuda.
    assert loaded["row"].untyped_storage().data_ptr() == loaded["t"].untyped_storage().data_ptr()
    torch.testing.assert_close(loaded["t"].cpu(), t.cpu())


@two_devices
@pytest.mark.parametrize(
    "map_location",
    ["flagos:0", torch.device("flagos", 0), {"flagos:1": "flagos:0"}, lambda storage, location: storage.flagos(0)],
    ids=["str", "device", "dict", "function"],
)
def test_map_location_moves_flagos_storages(map_location):
    t = torch.arange(6.0, device="flagos:1").reshape(2, 3)
    loaded = _round_trip(t, map_location=map_location)
    assert loaded.device == torch.device("flagos", 0)
    torch.testing.assert_close(loaded.cpu(), t.cpu())


def test_map_location_between_flagos_and_cpu():
    t = torch.randn(3, 4, device="flagos")
    assert _round_trip(t, map_location="cpu").device == torch.device("cpu")
    torch.testing.assert_close(_round_trip(t.cpu(), map_location="flagos").cpu(), t.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.bool, torch.complex64, torch.int8])
def test_dtypes_views_and_parameters_round_trip(dtype):
    t = torch.ones(3, 4, dtype=dtype, device="flagos").t()
    loaded = _round_trip(t)
    assert (loaded.dtype, loaded.device, loaded.stride()) == (dtype, t.device, t.stride())
    assert torch.equal(loaded.cpu(), t.cpu())
    param = _round_trip(torch.nn.Parameter(torch.ones(2, device="flagos")))
    assert isinstance(param, torch.nn.Parameter) and param.requires_grad and param.device.type == "flagos"


def test_module_state_dict_round_trip(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("flagos")
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("flagos")
    fresh.load_state_dict(torch.load(path))
    x = torch.randn(5, 4, device="flagos")
    torch.testing.assert_close(fresh(x).cpu(), model(x).cpu())
    mapped = torch.load(path, mmap=True)
    assert all(v.device.type == "flagos" for v in mapped.values())


@two_devices
def test_checkpoint_of_a_device_this_machine_lacks(tmp_path):
    path = tmp_path / "on_flagos1.pt"
    torch.save({"t": torch.arange(4.0, device="flagos:1")}, path)
    code = f"""
        import torch
        path = {str(path)!r}
        assert torch.flagos.device_count() == 1
        try:
            torch.load(path)
        except RuntimeError as e:
            print("RAISED", e)
        print("MAPPED", torch.load(path, map_location="flagos:0")["t"].device)
        print("CPU", torch.load(path, map_location="cpu")["t"].tolist())
    """
    result = run_python(textwrap.dedent(code), env={"FLAGOS_HOST_DEVICE_COUNT": "1", "FLAGOS_ACCELERATOR": "host"})
    assert result.returncode == 0, result.stderr
    assert "RAISED Attempting to deserialize object on FLAGOS device 1" in result.stdout
    assert "use torch.load with map_location" in result.stdout
    assert "MAPPED flagos:0" in result.stdout
    assert "CPU [0.0, 1.0, 2.0, 3.0]" in result.stdout


@cuda_accelerator
def test_cuda_and_flagos_checkpoints_map_onto_each_other():
    # Needs the cuda accelerator (native cuda tensors next to flagos ones).
    native = torch.arange(4.0, device="cuda")
    assert _round_trip(native, map_location="flagos:0").device == torch.device("flagos", 0)
    on_flagos = torch.arange(4.0, device="flagos")
    assert torch.equal(_round_trip(on_flagos, map_location="cuda:0"), native)


@cuda_accelerator
def test_flagos_checkpoint_from_the_gpu_loads_on_the_host_accelerator(tmp_path):
    # Needs the cuda accelerator: a flagos checkpoint names flagos devices, not the accelerator behind them.
    path = tmp_path / "gpu.pt"
    torch.save({"t": torch.arange(4.0, device="flagos:0")}, path)
    code = f"import torch; t = torch.load({str(path)!r})['t']; print(torch.flagos.accelerator_name(), t.device, t.tolist())"
    result = run_python(code, env={"FLAGOS_ACCELERATOR": "host"})
    assert result.returncode == 0, result.stderr
    assert "host flagos:0 [0.0, 1.0, 2.0, 3.0]" in result.stdout
