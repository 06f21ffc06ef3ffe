"""@pytest.mark.requires: a capability the device lacks is a skip that names it, before any
fixture runs; fixtures that need one skip the same way; unknown names are usage errors."""

from __future__ import annotations

import pytest

from plugin_helpers import load_report, usage_error_line

torch = pytest.importorskip("torch")

# a vendor device without an inductor back end or a compile backend of its own
VENDOR = """
import types
import torch

torch.utils.rename_privateuse1_backend("acme")
module = types.ModuleType("torch.acme")
module.is_available = lambda: True
module.device_count = lambda: 1
module.current_device = lambda: 0
module.flagos_capabilities = {"codegen": "none"}
torch._register_device_module("acme", module)
"""

TESTS = """
import pytest


@pytest.mark.requires("inductor")
def test_declared(flagos_device):
    raise AssertionError("must not run")


def test_fixture_needs_it(compile_workers):
    raise AssertionError("must not run")


@pytest.mark.requires("compile_backend", "inductor")
def test_first_missing_named(flagos_device):
    raise AssertionError("must not run")


def test_needs_nothing(flagos_device):
    assert flagos_device.type == "acme"
"""


def test_missing_capabilities_are_named_skips(run_pytest, pytester, tmp_path):
    pytester.makepyfile(acme_vendor=VENDOR)
    pytester.makepyfile(TESTS)
    report = tmp_path / "r.json"
    result = run_pytest("--flagos-device=acme", "--flagos-device-module=acme_vendor", f"--flagos-report={report}")
    result.assert_outcomes(passed=1, skipped=3)
    reasons = {t["nodeid"].split("::")[-1]: t["reason"] for t in load_report(report)["tests"]}
    inductor = (
        "flagos: requires inductor (an inductor code generator for the device): inductor has no code generator "
        "for 'acme' (capability manifest: codegen='none'). To provide it: register an inductor back end"
    )
    assert reasons["test_declared"].startswith(inductor)
    assert reasons["test_fixture_needs_it"].startswith(inductor)
    assert reasons["test_first_missing_named"].startswith(
        "flagos: requires compile_backend (a torch.compile backend of the device's own): no torch.compile "
        "backend is named after 'acme'"
    )


def test_unknown_capability_is_a_usage_error(run_pytest, pytester):
    pytester.makepyfile("import pytest\n\n@pytest.mark.requires('warp_drive')\ndef test_x():\n    pass\n")
    line = usage_error_line(run_pytest("--flagos-device=cpu"))
    assert line.startswith(
        "ERROR: flagos: test_unknown_capability_is_a_usage_error.py::test_x: @pytest.mark.requires('warp_drive'): "
        "unknown capability (known: autocast, c10d_backend, compile_backend, device_interface, events, inductor,"
    )


def test_present_capabilities_run(run_pytest, pytester):
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.requires('inductor')\ndef test_x(flagos_device):\n    assert True\n"
    )
    run_pytest("--flagos-device=cpu").assert_outcomes(passed=1)
