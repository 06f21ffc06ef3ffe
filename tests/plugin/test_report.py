"""The JSON + Markdown report, serial and under pytest-xdist."""

from __future__ import annotations

import pytest

from plugin_helpers import load_report

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
    assert "- `test_streams.py::test_wait` (streams, failed): AssertionError: event never completed" in markdown
    assert "## Expected failures that passed" in markdown


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
