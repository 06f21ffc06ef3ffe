"""A run on a device other than flagos keeps torch_fl (and its PrivateUse1 registration) out."""

from __future__ import annotations

import pytest

from plugin_helpers import usage_error_line

pytest.importorskip("torch")

PROBE = """
import os, sys
import torch

def test_probe():
    print("PROBE torch_fl", "torch_fl" in sys.modules, "autoload", os.environ.get("FLAGOS_AUTOLOAD"),
          "privateuse1", torch._C._get_privateuse1_backend_name())
"""


def test_run_on_cpu_does_not_load_torch_fl(run_pytest, pytester):
    pytester.makepyfile(PROBE)
    result = run_pytest("-s", "--flagos-device=cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROBE torch_fl False autoload 0 privateuse1 privateuseone*"])


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
    pytester.makepyfile(PROBE)
    result = run_pytest("-s", "--flagos-device=flagos")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PROBE torch_fl True autoload None privateuse1 flagos*"])


def test_no_device_changes_nothing(run_pytest, pytester):
    pytester.makepyfile(PROBE)
    result = run_pytest("-s")
    result.stdout.fnmatch_lines(["*PROBE torch_fl True autoload None privateuse1 flagos*"])


def test_torch_fl_loaded_before_an_accelerator_run_is_a_usage_error(run_pytest, pytester, monkeypatch):
    # a plugin that imports torch (and so torch_fl) before the flagos plugin can act
    pytester.makepyfile(early_torch="import torch\n")
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{__import__('os').environ['PYTHONPATH']}")
    pytester.makepyfile("def test_x():\n    pass\n")
    line = usage_error_line(run_pytest("-p", "early_torch", "--flagos-device=cuda"))
    assert line == (
        "ERROR: flagos: torch_fl was already loaded when the run on 'cuda' started, and with it loaded PyTorch "
        "treats flagos as this process's accelerator (CUDA backward fails, another PrivateUse1 device cannot "
        "register). Run with FLAGOS_AUTOLOAD=0."
    )
