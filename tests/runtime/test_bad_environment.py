"""Bad values of flagos's environment variables: a warning that names the variable and the
value, no flagos devices, and every other program in the environment unharmed.

torch loads flagos at `import torch` in every process of an environment where it is
installed, so a bad variable must never make that import fail; nor may a malformed limit
silently mean "unlimited".
"""

import pytest

from tests.requirements import host_only

# Prints the device count, availability, and that torch itself still works.
PROBE = "import torch; print(torch.flagos.device_count(), torch.flagos.is_available(), int(torch.ones(2).sum()))"


def _no_devices_and_says_why(result, variable, value):
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "False", "2"]
    assert f"{variable}='{value}'" in result.stderr, result.stderr


@host_only
@pytest.mark.parametrize("value", ["0", "0.5", "inf", "nan", "-1", "1e30", "lots", "12X", " "])
def test_malformed_host_memory_limit_offers_no_devices(python_subprocess, value):
    r = python_subprocess(PROBE, env={"FLAGOS_HOST_MEMORY_LIMIT": value})
    _no_devices_and_says_why(r, "FLAGOS_HOST_MEMORY_LIMIT", value)
    assert "e.g. 512M, 2G" in r.stderr


@host_only
@pytest.mark.parametrize("value", ["1.5G", "1T", "4096"])
def test_well_formed_host_memory_limit_is_the_capacity(python_subprocess, value):
    r = python_subprocess(
        "import torch; print(torch.flagos.get_device_properties(0).total_memory)",
        env={"FLAGOS_HOST_MEMORY_LIMIT": value},
    )
    assert r.returncode == 0, r.stderr
    expected = {"1.5G": 3 << 29, "1T": 1 << 40, "4096": 4096}[value]
    assert int(r.stdout) == expected


@host_only
@pytest.mark.parametrize("value", ["many", "0", "65", "-2", "2.5"])
def test_malformed_host_device_count_offers_no_devices(python_subprocess, value):
    r = python_subprocess(PROBE, env={"FLAGOS_HOST_DEVICE_COUNT": value})
    _no_devices_and_says_why(r, "FLAGOS_HOST_DEVICE_COUNT", value)
    assert "from 1 to 64" in r.stderr


def test_unknown_accelerator_offers_no_devices_and_lists_the_choices(python_subprocess):
    import torch_fl

    r = python_subprocess(PROBE, env={"FLAGOS_ACCELERATOR": "bogus"})
    _no_devices_and_says_why(r, "FLAGOS_ACCELERATOR", "bogus")
    assert f"choose one of: {torch_fl._C._available_accelerators()}." in r.stderr


def test_a_device_when_there_are_none_says_why(python_subprocess):
    r = python_subprocess(
        "import torch\ntry:\n    torch.ones(1, device='flagos')\nexcept IndexError as e:\n    print(e)",
        env={"FLAGOS_ACCELERATOR": "bogus"},
    )
    assert r.returncode == 0, r.stderr
    assert "flagos:0 does not exist: there are no flagos devices (FLAGOS_ACCELERATOR='bogus'" in r.stdout
    assert "flagos:-1" not in r.stdout
