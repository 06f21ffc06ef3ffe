"""Installing flagos next to another PrivateUse1 backend (fdev) breaks neither.

torch calls flagos's ``torch.backends`` entry point at every ``import torch``; it only arms
flagos (flagos_autoload), so a process that imports another backend -- explicitly, or
through that backend's own entry point -- gets it. A process that asks for both gets one
line that says what to do, never an abort in c10.
"""

from __future__ import annotations

import signal

import pytest

from tests.foreign_device.conftest import run

# Each test starts fresh interpreters: the long tier, `make test-slow`.
pytestmark = pytest.mark.slow

FDEV_WORKS = """
import sys
import torch
import fdev

x = torch.arange(6.0, device="fdev").reshape(2, 3)
print("RESULT", torch._C._get_privateuse1_backend_name(), (x * 2 + 1).sum().item(), "torch_fl" in sys.modules)
"""

ONE_LINE = (
    "torch_fl._registration.PrivateUse1Taken: flagos: PrivateUse1 is already the 'fdev' device in this process "
    "(one PrivateUse1 backend per process): run flagos in a process of its own, and start this one with "
    "FLAGOS_AUTOLOAD=0 so that nothing in it loads flagos"
)


def _result(proc):
    assert proc.returncode == 0, proc.stderr
    lines = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout
    return lines[-1]


def _assert_one_line_error(proc):
    assert proc.returncode == 1, f"exit {proc.returncode} (an abort is {-signal.SIGABRT}):\n{proc.stderr}"
    assert proc.stderr.strip().splitlines()[-1] == ONE_LINE, proc.stderr


def test_flagos_entry_point_is_installed():
    from importlib.metadata import entry_points

    assert "flagos_autoload:load" in [ep.value for ep in entry_points(group="torch.backends")]


def test_import_fdev_explicitly_with_the_kit_installed(fdev_env):
    assert _result(run(FDEV_WORKS, fdev_env())) == ["fdev", "36.0", "False"]


def test_import_fdev_through_its_own_entry_point(fdev_env, fdev_site):
    code = """
    import sys
    import torch

    print("RESULT", torch._C._get_privateuse1_backend_name(), "fdev" in sys.modules, "torch_fl" in sys.modules)
    """
    assert _result(run(code, fdev_env(fdev_site))) == ["fdev", "True", "False"]
    assert _result(run(FDEV_WORKS, fdev_env(fdev_site))) == ["fdev", "36.0", "False"]


@pytest.mark.parametrize("flagos_autoload", ["", "1"])
def test_fdev_entry_point_wins_whatever_flagos_autoload_says(fdev_env, fdev_site, flagos_autoload):
    """FLAGOS_AUTOLOAD=1 (what a flagos process passes to its children) loads flagos at
    `import torch` only where no other backend has an entry point: torch runs them in no
    set order, and fdev's extension would abort the process if it loaded after flagos."""
    env = fdev_env(fdev_site, FLAGOS_AUTOLOAD=flagos_autoload)
    assert _result(run(FDEV_WORKS, env)) == ["fdev", "36.0", "False"]


@pytest.mark.parametrize(
    "ask_for_flagos",
    [
        "torch.flagos.device_count()",
        "import torch_fl",
        "torch.compile(lambda x: x + 1, backend='flagos')(torch.ones(2))",
    ],
)
def test_a_process_that_asks_for_both_gets_one_line(fdev_env, ask_for_flagos):
    _assert_one_line_error(run(f"import torch\nimport fdev\n{ask_for_flagos}\n", fdev_env()))


def test_asking_for_both_through_fdevs_entry_point_gets_one_line(fdev_env, fdev_site):
    _assert_one_line_error(run("import torch\ntorch.flagos.device_count()\n", fdev_env(fdev_site)))


def test_flagos_in_a_process_of_its_own(fdev_env):
    """Plain `import torch` leaves PrivateUse1 free; the first use of torch.flagos loads
    flagos, and from then on the process's children see it after a bare `import torch`
    (inductor's subprocess compile workers)."""
    code = """
    import subprocess, sys
    import torch

    before = (torch._C._get_privateuse1_backend_name(), "torch_fl" in sys.modules)
    count = torch.flagos.device_count()
    x = torch.ones(3, device="flagos:0") * 2
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.ones(1, device='flagos:1').device)"],
        capture_output=True, text=True,
    )
    print("RESULT", *before, count > 0, x.device, x.sum().item(), child.stdout.strip() or child.stderr)
    """
    assert _result(run(code, fdev_env())) == ["privateuseone", "False", "True", "flagos:0", "6.0", "flagos:1"]


def test_flagos_autoload_1_loads_flagos_at_import_torch(fdev_env):
    code = """
    import sys
    import torch

    print("RESULT", "torch_fl" in sys.modules, torch.zeros(2, device="flagos").device)
    """
    assert _result(run(code, fdev_env(FLAGOS_AUTOLOAD="1"))) == ["True", "flagos:0"]


def test_backend_flagos_loads_flagos(fdev_env):
    code = """
    import torch

    out = torch.compile(lambda x: x * 2, backend="flagos")(torch.ones(4))
    print("RESULT", torch._C._get_privateuse1_backend_name(), out.sum().item())
    """
    assert _result(run(code, fdev_env(TORCHINDUCTOR_COMPILE_THREADS="1"))) == ["flagos", "8.0"]


def test_deleting_or_setting_an_attribute_of_armed_flagos_loads_it(fdev_env):
    """torch.flagos before the load stands for the module in every way, deleting included
    (a test that removes an API to play a vendor's device module without it)."""
    code = """
    import sys
    import torch

    del torch.flagos.get_device_properties
    deleted = "torch_fl" in sys.modules, hasattr(torch.flagos, "get_device_properties")
    torch.flagos.marker = 1
    print("RESULT", *deleted, torch.flagos.marker)
    """
    assert _result(run(code, fdev_env())) == ["True", "False", "1"]
