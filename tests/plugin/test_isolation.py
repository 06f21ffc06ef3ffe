"""A run on a device other than flagos keeps torch_fl (and its PrivateUse1 registration) out;
a run on flagos loads it; without a device, torch's entry point only arms flagos."""

from __future__ import annotations

import pytest

from plugin_helpers import usage_error_line

pytest.importorskip("torch")

PROBE = """
import os, sys
import torch

def test_probe():
    print("PROBE torch_fl", "torch_fl" in sys.modules, "autoload", os.environ.get("FLAGOS_AUTOLOAD"),
          "privateuse1", torch._C._get_privateuse1_backend_name(),
          "torch.flagos", type(getattr(torch, "flagos", None)).__name__)
"""


def test_run_on_cpu_does_not_load_torch_fl(run_pytest, pytester):
    pytester.makepyfile(PROBE)
    result = run_pytest("-s", "--flagos-device=cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROBE torch_fl False autoload 0 privateuse1 privateuseone torch.flagos NoneType*"])


def test_device_from_the_environment_counts_too(run_pytest, pytester, monkeypatch):
    pytester.makepyfile(PROBE)
    monkeypatch.setenv("FLAGOS_DEVICE", "cpu")
    result = run_pytest("-s")
    result.stdout.fnmatch_lines(["*PROBE torch_fl False autoload 0 privateuse1 privateuseone*"])


def test_device_from_the_ini_file_counts_too(run_pytest, pytester):
    pytester.makepyfile(PROBE)
    pytester.makeini("[pytest]\nflagos_device = cpu\n")
    result = run_pytest("-s")
    result.stdout.fnmatch_lines(["*PROBE torch_fl False autoload 0 privateuse1 privateuseone*"])


def test_run_on_flagos_loads_it(run_pytest, pytester):
    # loaded, flagos tells the processes it starts (compile workers) to load it too
    pytester.makepyfile(PROBE)
    result = run_pytest("-s", "--flagos-device=flagos")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROBE torch_fl True autoload 1 privateuse1 flagos torch.flagos module*"])


def test_no_device_only_arms_flagos(run_pytest, pytester):
    # PrivateUse1 stays free for whatever backend the tests import; torch.flagos loads on use
    pytester.makepyfile(PROBE)
    result = run_pytest("-s")
    result.stdout.fnmatch_lines(
        ["*PROBE torch_fl False autoload None privateuse1 privateuseone torch.flagos _ArmedFlagos*"]
    )


def test_torch_imported_before_the_plugin_acts_is_disarmed(run_pytest, pytester, monkeypatch):
    # a plugin that imports torch (which arms flagos) before the flagos plugin can act
    pytester.makepyfile(early_torch="import torch\n")
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{__import__('os').environ['PYTHONPATH']}")
    pytester.makepyfile(PROBE)
    result = run_pytest("-s", "-p", "early_torch", "--flagos-device=cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROBE torch_fl False autoload 0 privateuse1 privateuseone torch.flagos NoneType*"])


def test_torch_fl_loaded_before_an_accelerator_run_is_a_usage_error(run_pytest, pytester, monkeypatch):
    # a plugin that loads torch_fl before the flagos plugin can act
    pytester.makepyfile(early_torch_fl="import torch_fl\n")
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{__import__('os').environ['PYTHONPATH']}")
    pytester.makepyfile("def test_x():\n    pass\n")
    line = usage_error_line(run_pytest("-p", "early_torch_fl", "--flagos-device=cuda"))
    assert line == (
        "ERROR: flagos: torch_fl was already loaded when the run on 'cuda' started, and with it loaded PyTorch "
        "treats flagos as this process's accelerator (CUDA backward fails, another PrivateUse1 device cannot "
        "register). Run with FLAGOS_AUTOLOAD=0 and without importing torch_fl."
    )
