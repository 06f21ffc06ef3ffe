"""The flagos device: registration, autoload, selection, properties, errors."""

import pytest
import torch

import torch_fl
from tests.requirements import host_only, two_devices


def test_torch_flagos_is_the_package_module():
    assert torch.flagos is torch_fl.flagos
    assert torch._C._get_privateuse1_backend_name() == "flagos"


@host_only
def test_default_host_accelerator_has_two_devices():
    assert torch.flagos.is_available()
    assert torch.flagos.accelerator_name() == "host"
    assert torch.flagos.device_count() == 2


@two_devices
def test_tensor_creation_and_round_trip():
    x = torch.arange(6.0).reshape(2, 3)
    y = x.to("flagos")
    assert y.device == torch.device("flagos", 0)
    assert y.is_flagos
    torch.testing.assert_close(y.cpu(), x)
    z = y.to("flagos:1")
    assert z.device == torch.device("flagos", 1)
    torch.testing.assert_close(z.cpu(), x)
    assert torch.randn(4, device="flagos").device.type == "flagos"


@two_devices
def test_module_to_flagos():
    m = torch.nn.Linear(3, 2).to("flagos")
    assert all(p.device.type == "flagos" for p in m.parameters())
    m.flagos(1)
    assert all(p.device == torch.device("flagos", 1) for p in m.parameters())


@two_devices
def test_set_device_and_device_context():
    assert torch.flagos.current_device() == 0
    with torch.flagos.device(1):
        assert torch.flagos.current_device() == 1
        assert torch.empty(1, device="flagos").device.index == 1
    assert torch.flagos.current_device() == 0
    torch.flagos.set_device("flagos:1")
    try:
        assert torch.flagos.current_device() == 1
    finally:
        torch.flagos.set_device(0)


def test_compiled_codes_device_guard_switches_and_restores_the_device():
    assert torch.flagos.current_device() == 0
    with torch.flagos._DeviceGuard(torch.flagos.device_count() - 1):
        assert torch.flagos.current_device() == torch.flagos.device_count() - 1
    assert torch.flagos.current_device() == 0
    with torch.flagos._DeviceGuard(-1):  # as torch.cuda._DeviceGuard: a negative index changes nothing
        assert torch.flagos.current_device() == 0
    with pytest.raises(IndexError, match="flagos"):
        torch.flagos._DeviceGuard(torch.flagos.device_count()).__enter__()
    assert torch.flagos.current_device() == 0


@two_devices
def test_compiled_code_on_the_second_device_runs_there_and_leaves_the_current_device():
    def f(x, w):
        return torch.relu(x @ w) + 1

    from torch._inductor.utils import run_and_get_code

    x, w = torch.randn(8, 16), torch.randn(16, 4)
    got, code = run_and_get_code(torch.compile(f), x.to("flagos:1"), w.to("flagos:1"))
    assert "torch.flagos._DeviceGuard(1)" in code[0]
    assert got.device == torch.device("flagos", 1)
    assert torch.flagos.current_device() == 0
    torch.testing.assert_close(got.cpu(), f(x, w))


@host_only
def test_properties_tell_inductor_what_it_needs():
    p = torch.flagos.get_device_properties(0)
    assert p.multi_processor_count >= 1
    assert p.warp_size == 32
    assert p.max_threads_per_block >= 128
    assert p.L2_cache_size >= 64 * 1024
    assert p.total_memory > 0
    assert torch.flagos.get_device_capability(0) == (p.major, p.minor)
    assert "host" in torch.flagos.get_device_name(0)


@host_only
def test_device_index_out_of_range_is_a_clear_error():
    with pytest.raises(IndexError, match=r"flagos:5 is out of range: this machine has 2 flagos device\(s\)"):
        torch.empty(2, device="flagos:5")
    with pytest.raises(IndexError, match="flagos:7 is out of range"):
        torch.flagos.set_device(7)
    with pytest.raises(IndexError, match="out of range"):
        torch.flagos.get_device_properties(3)


def test_an_index_beyond_the_device_index_type_is_refused_as_given():
    # c10::DeviceIndex is 8 bits: 256 must not wrap around to flagos:0, nor 300 to 44
    calls = {
        "set_device": torch.flagos.set_device,
        "compiled code's guard": lambda index: torch.flagos._DeviceGuard(index).__enter__(),
        "_current_raw_stream": torch_fl._C._current_raw_stream,
        "_check_index": torch_fl._C._check_index,
    }
    for index in (256, 300):
        for call in calls.values():
            with pytest.raises(IndexError, match=f"flagos:{index} (is out of range|does not exist)"):
                call(index)
    assert torch.flagos.current_device() == 0


def test_device_functions_of_compiled_code_reject_what_is_not_an_index():
    for function in (torch_fl._C._set_device, torch_fl._C._exchange_device, torch_fl._C._current_raw_stream):
        with pytest.raises(TypeError, match="expects a device index"):
            function("flagos:0")


@two_devices
def test_synchronize():
    torch.flagos.synchronize()
    torch.flagos.synchronize(1)
    torch.flagos.synchronize("flagos:0")


@host_only
def test_plain_import_torch_autoloads_flagos(python_subprocess):
    r = python_subprocess(
        """
        import torch
        x = torch.ones(3, device="flagos") * 2
        print(x.device, x.sum().item(), torch.flagos.device_count())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["flagos:0", "6.0", "2"]


@pytest.mark.parametrize("variable", ["TORCH_DEVICE_BACKEND_AUTOLOAD", "FLAGOS_AUTOLOAD"])
def test_autoload_can_be_disabled(python_subprocess, variable):
    r = python_subprocess(
        """
        import sys, torch
        print(hasattr(torch, "flagos"), "torch_fl" in sys.modules, torch._C._get_privateuse1_backend_name())
        import torch_fl
        print(torch.zeros(1, device="flagos").device)
        """,
        env={variable: "0"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "privateuseone", "flagos:0"]


def test_import_torch_fl_first_works(python_subprocess):
    r = python_subprocess("import torch_fl, torch; print(torch.zeros(2, device='flagos').device)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "flagos:0"


@host_only
def test_host_device_count_is_configurable(python_subprocess):
    r = python_subprocess("import torch; print(torch.flagos.device_count())", env={"FLAGOS_HOST_DEVICE_COUNT": "3"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "3"


def test_no_registration_warning_when_torch_dynamo_is_imported_during_shutdown(python_subprocess):
    # A thread still running after the main thread ended imports torch._dynamo: the interpreter is
    # shutting down (torch itself can no longer compile there), so flagos must not warn that its
    # registration failed; the vendor would read it as a flagos bug.
    r = python_subprocess(
        """
        import threading, time, torch, torch_fl

        def late():
            while threading.main_thread().is_alive():
                time.sleep(0.01)
            try:
                torch.compile(lambda x: x + 1)(torch.ones(2))
            except RuntimeError as error:  # torch's own: "can't register atexit after shutdown"
                print(error)

        threading.Thread(target=late).start()
        """
    )
    assert r.returncode == 0, r.stderr
    assert "after shutdown" in r.stdout, r.stdout  # the situation arose
    assert "flagos" not in r.stderr, r.stderr
