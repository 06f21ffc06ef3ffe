"""The JSON + Markdown report, serial and under pytest-xdist."""

from __future__ import annotations

import pytest

from plugin_helpers import load_report

# imported here, not inside a test: pytester drops modules a test imported when it ends, and
# torch cannot be imported a second time in one process
torch = pytest.importorskip("torch")

STREAMS = """
import pytest

def test_record():
    pass

def test_wait():
    assert 1 == 2, "event never completed"

@pytest.mark.xfail(reason="no priority streams")
def test_priority():
    assert False

@pytest.mark.xfail(reason="was flaky")
def test_fixed_meanwhile():
    pass
"""

MEMORY = """
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("allocator not initialised")

def test_alloc():
    pass

def test_stats(broken):
    pass

def test_limit():
    pytest.skip("no memory limit on this device")

@pytest.mark.flagos_area("allocator")
def test_empty_cache():
    pass

def test_expected_bug():
    raise ValueError("bug 7")
"""

EXPECTATIONS = """
[[xfail]]
id = "test_memory.py::test_expected_bug"
reason = "bug 7, fixed in the next driver"
"""

EXPECTED_TESTS = {
    "test_memory.py::test_alloc": ("memory", "passed", ""),
    "test_memory.py::test_empty_cache": ("allocator", "passed", ""),
    "test_memory.py::test_expected_bug": (
        "memory",
        "xfailed",
        "bug 7, fixed in the next driver [expectations: test_memory.py::test_expected_bug]",
    ),
    "test_memory.py::test_limit": ("memory", "skipped", "no memory limit on this device"),
    "test_memory.py::test_stats": ("memory", "error", "RuntimeError: allocator not initialised"),
    "test_streams.py::test_fixed_meanwhile": ("streams", "xpassed", "was flaky"),
    "test_streams.py::test_priority": ("streams", "xfailed", "no priority streams"),
    "test_streams.py::test_record": ("streams", "passed", ""),
    "test_streams.py::test_wait": ("streams", "failed", "AssertionError: event never completed assert 1 == 2"),
}


def _run(run_pytest, pytester, name: str, *extra: str) -> dict:
    pytester.makepyfile(test_streams=STREAMS, test_memory=MEMORY)
    (pytester.path / "expect.toml").write_text(EXPECTATIONS)
    result = run_pytest(
        "--flagos-device=cpu", f"--flagos-report=out/{name}.json", "--flagos-expectations=expect.toml", *extra
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"flagos: report written to *{name}.json and *{name}.md"])
    return load_report(pytester.path / "out" / f"{name}.json")


def _comparable(report: dict) -> dict:
    report = dict(report)
    report.pop("run")
    report["tests"] = [{k: v for k, v in t.items() if k != "duration_s"} for t in report["tests"]]
    return report


def test_report_contents(run_pytest, pytester):
    report = _run(run_pytest, pytester, "serial")
    assert report["schema"] == "pytest_flagos.report/1"
    assert {"python", "torch", "triton", "pytest", "hypothesis", "pytest_flagos"} <= set(report["versions"])
    assert report["device"]["spec"] == "cpu" and report["device"]["available"] is True
    assert report["device"]["properties"]["cpu_count"] >= 1
    assert report["capabilities"]["codegen"] == "cpp"
    assert "float32" in report["capabilities"]["dtypes"]
    assert report["expectations"]["entries"] == 1
    got = {t["nodeid"]: (t["area"], t["outcome"], t["reason"]) for t in report["tests"]}
    assert got == EXPECTED_TESTS
    assert report["summary"] == {
        "passed": 3,
        "failed": 1,
        "error": 1,
        "xfailed": 2,
        "xpassed": 1,
        "skipped": 1,
        "total": 9,
    }
    assert report["areas"]["streams"] == {
        "passed": 1,
        "failed": 1,
        "error": 0,
        "xfailed": 1,
        "xpassed": 1,
        "skipped": 0,
        "total": 4,
    }
    assert report["areas"]["allocator"]["passed"] == 1
    by_id = {t["nodeid"]: t for t in report["tests"]}
    assert by_id["test_memory.py::test_expected_bug"]["expectation"] == ("xfail: bug 7, fixed in the next driver")
    assert by_id["test_memory.py::test_alloc"]["expectation"] is None

    markdown = (pytester.path / "out" / "serial.md").read_text()
    assert "# flagos conformance report: cpu" in markdown
    assert "| area | passed | failed | error | xfailed | xpassed | skipped | total |" in markdown
    assert "| streams | 1 | 1 | 0 | 1 | 1 | 0 | 4 |" in markdown
    assert "| **all** | **3** | **1** | **1** | **2** | **1** | **1** | **9** |" in markdown
    assert "## Failures by cause" in markdown
    assert "- **1x** `AssertionError: event never completed` (1 failed): `test_streams.py::test_wait`" in markdown
    assert "## Expected failures that passed" in markdown


@pytest.mark.slow
def test_report_under_xdist_equals_the_serial_report(run_pytest, pytester):
    serial = _run(run_pytest, pytester, "serial")
    parallel = _run(run_pytest, pytester, "parallel", "-n", "2")
    assert parallel["run"]["xdist_workers"] == 2
    assert _comparable(parallel) == _comparable(serial)


def test_no_report_without_the_option(run_pytest, pytester):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = run_pytest("--flagos-device=cpu")
    result.assert_outcomes(passed=1)
    assert "report written" not in result.stdout.str()


def test_area_marker_needs_a_name(run_pytest, pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.flagos_area()
        def test_x():
            pass
    """)
    result = run_pytest("--flagos-device=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "@pytest.mark.flagos_area needs a name" in result.stderr.str()


CAUSES = """
import pytest

@pytest.mark.parametrize("n", [4, 6, 9])
def test_shape(n):
    raise AssertionError(f"output: compiled ({n}, 8) torch.float32, eager [{n}, 9]\\nIR dump {n} " + "x" * 400)

@pytest.mark.parametrize("n", range(2))
def test_object(n):
    raise RuntimeError(f"stream {object()!r} was not recorded")

def test_long():
    raise ValueError("inductor " + "lowering " * 60 + "failed")

@pytest.fixture
def broken():
    raise KeyError("acme")

def test_setup(broken):
    pass
"""


def test_failures_are_grouped_by_cause(run_pytest, pytester):
    pytester.makepyfile(test_causes=CAUSES)
    result = run_pytest("--flagos-device=cpu", "--flagos-report=r.json")
    result.assert_outcomes(failed=6, errors=1)
    causes = load_report(pytester.path / "r.json")["causes"]
    shape, obj = causes[0], causes[1]  # most frequent first
    assert shape == {
        "cause": "AssertionError: output: compiled (N, N) torch.float32, eager [N, N]",
        "count": 3,
        "outcomes": {"failed": 3},
        "tests": [f"test_causes.py::test_shape[{n}]" for n in (4, 6, 9)],
    }
    assert obj["cause"] == "RuntimeError: stream <object object at 0x...> was not recorded"
    assert obj["count"] == 2
    long_text = next(c["cause"] for c in causes if c["cause"].startswith("ValueError"))
    assert len(long_text) <= 200 and long_text.endswith("lowering...")  # cut at a word boundary
    assert {
        "cause": "KeyError: 'acme'",
        "count": 1,
        "outcomes": {"error": 1},
        "tests": ["test_causes.py::test_setup"],
    } in causes
    assert len(causes) == 4

    markdown = (pytester.path / "r.md").read_text()
    assert (
        "- **3x** `AssertionError: output: compiled (N, N) torch.float32, eager [N, N]` (3 failed): "
        "`test_causes.py::test_shape[4]`, `test_causes.py::test_shape[6]`, `test_causes.py::test_shape[9]`"
    ) in markdown
    assert "IR dump" not in markdown


WARNINGS = """
import warnings
import pytest

@pytest.mark.parametrize("n", range(12))
def test_seed(n):
    warnings.warn(f"manual_seed is ignored on this device (generator at {hex(id(object()))})")

@pytest.mark.parametrize("n", range(3))
def test_rare(n):
    warnings.warn("rarely seen", DeprecationWarning)
"""


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_warnings_that_repeat_are_flagged(run_pytest, pytester, extra):
    pytester.makepyfile(test_warns=WARNINGS)
    result = run_pytest("--flagos-device=cpu", "--flagos-report=r.json", *extra)
    result.assert_outcomes(passed=15, warnings=15)
    warnings = load_report(pytester.path / "r.json")["warnings"]
    assert warnings["total"] == 15 and warnings["distinct"] == 2
    assert warnings["repeated"] == [
        {
            "category": "UserWarning",
            "message": "manual_seed is ignored on this device (generator at 0x...)",
            "count": 12,
            "tests": 12,
        }
    ]
    markdown = (pytester.path / "r.md").read_text()
    assert "## Warnings repeated 10 times or more" in markdown
    assert (
        "- **12x** in 12 test(s): UserWarning: `manual_seed is ignored on this device (generator at 0x...)`" in markdown
    )
    assert "rarely seen" not in markdown


NO_DEVICE_PROPERTIES = """
import torch
del torch.flagos.get_device_properties  # a device module without it, like many vendors' at first
"""


def test_device_properties_come_from_generic_apis_when_the_module_lacks_them(run_pytest, pytester):
    if not hasattr(torch, "flagos"):
        pytest.skip("torch_fl is not loaded in this environment")
    pytester.makepyfile(bare_device=NO_DEVICE_PROPERTIES)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = run_pytest("--flagos-device=flagos", "--flagos-device-module=bare_device", "--flagos-report=r.json")
    result.assert_outcomes(passed=1)
    props = load_report(pytester.path / "r.json")["device"]["properties"]
    assert props["device_count"] == torch.flagos.device_count()
    assert props["name"] == torch.flagos.get_device_name(0)
    assert props["total_memory"] > 0 and "memory_free" in props
    assert "device properties: " in (pytester.path / "r.md").read_text()
