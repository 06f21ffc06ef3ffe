"""--flagos-device: names, indices, device modules, unavailable devices, capabilities."""

from __future__ import annotations

import pytest

from plugin_helpers import usage_error_line

# imported here, not inside a test: pytester drops modules a test imported when it ends, and
# torch cannot be imported a second time in one process
torch = pytest.importorskip("torch")

DEVICE_PROBE = """
from pytest_flagos import session

def test_device(flagos_device, flagos_capabilities):
    print("DEVICE", flagos_device, flagos_capabilities.codegen,
          ",".join(flagos_capabilities.dtypes), flagos_capabilities.extra)
"""

# a vendor package that registers a PrivateUse1 device; the plugin keeps torch_fl's
# autoload off for it, since flagos would otherwise hold the PrivateUse1 slot
VENDOR_MODULE = """
import types
import torch

torch.utils.rename_privateuse1_backend("acme")
module = types.ModuleType("torch.acme")
module.is_available = lambda: {available}
module.device_count = lambda: 1
module.current_device = lambda: 0
module.flagos_capabilities = lambda: {{"dtypes": ["float32", "bfloat16"], "codegen": "triton",
                                       "extra": {{"streams": 1}}}}
torch._register_device_module("acme", module)
"""


def test_cpu_resolves(run_pytest, pytester):
    pytester.makepyfile(DEVICE_PROBE)
    result = run_pytest("-s", "--flagos-device=cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*DEVICE cpu cpp float32,float64,float16,bfloat16 {}*"])


@pytest.mark.parametrize(
    "spec, expected",
    [
        (
            "tpu9",
            "ERROR: flagos: unknown device 'tpu9' (expected cpu, cuda[:i], xpu[:i], mps, "
            "flagos[:i] or a registered PrivateUse1 name; registered PrivateUse1 device: ",
        ),
        ("cpu:1", "ERROR: flagos: --flagos-device='cpu:1': device index 1 out of range (cpu has 1)"),
        ("cuda:x", "ERROR: flagos: --flagos-device='cuda:x': device index 'x' is not an integer"),
    ],
)
def test_bad_device_names_are_usage_errors(run_pytest, pytester, spec, expected):
    pytester.makepyfile("def test_x():\n    pass\n")
    line = usage_error_line(run_pytest(f"--flagos-device={spec}"))
    assert line.startswith(expected), line


def test_device_module_that_does_not_import(run_pytest, pytester):
    pytester.makepyfile("def test_x():\n    pass\n")
    line = usage_error_line(run_pytest("--flagos-device=cpu", "--flagos-device-module=no_such_vendor_pkg"))
    assert line == (
        "ERROR: flagos: --flagos-device-module=no_such_vendor_pkg does not import: "
        "ModuleNotFoundError: No module named 'no_such_vendor_pkg'"
    )


def test_device_module_raising_on_import(run_pytest, pytester):
    pytester.makepyfile(broken_vendor="raise RuntimeError('driver 42 not found')")
    pytester.makepyfile("def test_x():\n    pass\n")
    line = usage_error_line(run_pytest("--flagos-device=cpu", "--flagos-device-module=broken_vendor"))
    assert line == (
        "ERROR: flagos: --flagos-device-module=broken_vendor does not import: RuntimeError: driver 42 not found"
    )


def _absent_device() -> str:
    """A built-in device type torch knows but this machine lacks."""
    for name in ("cuda", "xpu", "mps"):
        module = getattr(torch, name, None)
        if module is not None and not module.is_available():
            return name
    pytest.skip("cuda, xpu and mps are all available here")


def test_unavailable_device_skips_everything(run_pytest, pytester):
    absent = _absent_device()
    pytester.makepyfile("""
        def test_a():
            pass

        def test_b(flagos_device):
            pass
    """)
    result = run_pytest("-rs", f"--flagos-device={absent}")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            f"*flagos: device '{absent}': device '{absent}' is not available on this machine*every test is skipped",
            f"SKIPPED [[]2] *flagos: device '{absent}' is not available on this machine "
            f"(torch.{absent}.is_available() is False)",
        ]
    )


def test_unavailable_device_is_an_error_under_strict(run_pytest, pytester):
    absent = _absent_device()
    pytester.makepyfile("def test_x():\n    pass\n")
    line = usage_error_line(run_pytest(f"--flagos-device={absent}", "--flagos-strict"))
    assert line == (
        f"ERROR: flagos: device '{absent}' is not available on this machine "
        f"(torch.{absent}.is_available() is False) (--flagos-strict)"
    )


def _vendor(pytester, monkeypatch, available: bool) -> None:
    # The plugin keeps torch_fl out of a run on another device (its Triton back end is a
    # separate package that never imports it), so the PrivateUse1 slot is free for the vendor.
    pytester.makepyfile(acme_vendor=VENDOR_MODULE.format(available=available))
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{__import__('os').environ['PYTHONPATH']}")


def test_vendor_privateuse1_device_with_capability_overrides(run_pytest, pytester, monkeypatch):
    _vendor(pytester, monkeypatch, available=True)
    pytester.makepyfile(DEVICE_PROBE)
    result = run_pytest("-s", "--flagos-device=acme", "--flagos-device-module=acme_vendor")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*DEVICE acme:0 triton float32,bfloat16 {'streams': 1}*"])


def test_vendor_device_index_out_of_range(run_pytest, pytester, monkeypatch):
    _vendor(pytester, monkeypatch, available=True)
    pytester.makepyfile("def test_x():\n    pass\n")
    line = usage_error_line(run_pytest("--flagos-device=acme:3", "--flagos-device-module=acme_vendor"))
    assert line == (
        "ERROR: flagos: --flagos-device='acme:3': device index 3 out of range (torch.acme.device_count() is 1)"
    )


def test_vendor_device_unavailable_skips(run_pytest, pytester, monkeypatch):
    _vendor(pytester, monkeypatch, available=False)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = run_pytest("-rs", "--flagos-device=acme", "--flagos-device-module=acme_vendor")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED *device 'acme' is not available on this machine*"])


def test_vendor_capabilities_with_unknown_field(run_pytest, pytester, monkeypatch):
    _vendor(pytester, monkeypatch, available=True)
    source = (
        (pytester.path / "acme_vendor.py")
        .read_text()
        .replace('"codegen": "triton"', '"codegen": "triton", "tensor_cores": True')
    )
    (pytester.path / "acme_vendor.py").write_text(source)
    pytester.makepyfile(DEVICE_PROBE)
    line = usage_error_line(run_pytest("--flagos-device=acme", "--flagos-device-module=acme_vendor"))
    assert line.startswith(
        "ERROR: flagos: torch.acme.flagos_capabilities has unknown field(s) "
        "tensor_cores (known: codegen, dtypes, extra, memory_limit, "
        "worker_start_methods; put vendor-specific keys under 'extra')"
    )


def _flagos_missing() -> str | None:
    """torch_fl autoloads with torch once installed; from a checkout it may still import.
    Checked at import time, for the same reason as torch above."""
    if hasattr(torch, "flagos"):
        return None
    try:
        import torch_fl  # noqa: F401
    except Exception as exc:
        return f"no flagos device here: import torch_fl failed: {exc}"
    return None


FLAGOS_MISSING = _flagos_missing()


def _needs_flagos() -> None:
    if FLAGOS_MISSING:
        pytest.skip(FLAGOS_MISSING)


def test_flagos_device_resolves_when_torch_fl_is_installed(run_pytest, pytester):
    _needs_flagos()
    pytester.makepyfile(DEVICE_PROBE)
    result = run_pytest("-s", "--flagos-device=flagos")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*DEVICE flagos:0 *"])


FLAGOS_OVERRIDE = """
import torch
torch.flagos.flagos_capabilities = {fields}
"""


def test_capability_overrides_from_the_device_module(run_pytest, pytester):
    _needs_flagos()
    pytester.makepyfile(
        flagos_override=FLAGOS_OVERRIDE.format(
            fields='{"dtypes": ["float32"], "memory_limit": True, "extra": {"accelerator": "host"}}'
        )
    )
    pytester.makepyfile(DEVICE_PROBE)
    result = run_pytest("-s", "--flagos-device=flagos", "--flagos-device-module=flagos_override")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*DEVICE flagos:0 * float32 {'accelerator': 'host'}*"])


def test_capability_override_with_an_unknown_field(run_pytest, pytester):
    _needs_flagos()
    pytester.makepyfile(flagos_override=FLAGOS_OVERRIDE.format(fields='{"tensor_cores": True}'))
    pytester.makepyfile("def test_x():\n    pass\n")
    line = usage_error_line(run_pytest("--flagos-device=flagos", "--flagos-device-module=flagos_override"))
    assert line == (
        "ERROR: flagos: torch.flagos.flagos_capabilities has unknown field(s) "
        "tensor_cores (known: codegen, dtypes, extra, memory_limit, "
        "worker_start_methods; put vendor-specific keys under 'extra')"
    )
