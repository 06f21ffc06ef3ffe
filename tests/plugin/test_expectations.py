"""Expectations files: parsing, matching, stale entries, xpass reporting."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_flagos.expectations import Entry, Expectations

from plugin_helpers import usage_error_line

SUITE = """
def test_fails():
    assert False, "known bug"

def test_passes():
    pass

def test_param(n):
    pass

def test_param_b():
    pass
"""

CONFTEST = """
import pytest

def pytest_generate_tests(metafunc):
    if "n" in metafunc.fixturenames:
        metafunc.parametrize("n", [1, 2])
"""


def _suite(pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeconftest(CONFTEST)


def _expect(pytester, text: str) -> str:
    path = pytester.path / "expect.toml"
    path.write_text(text)
    return f"--flagos-expectations={path.name}"


def test_xfail_skip_and_prefixes(run_pytest, pytester):
    _suite(pytester)
    arg = _expect(
        pytester,
        """
        [[xfail]]
        id = "test_suite.py::test_fails"
        reason = "bug 12: wrong stride"

        [[skip]]
        id = "test_suite.py::test_param"
        reason = "no streams on this device"
    """.replace("\n        ", "\n"),
    )
    result = run_pytest("--flagos-device=cpu", "-rxXs", arg)
    # test_param matches both parametrizations, but not test_param_b
    result.assert_outcomes(passed=2, xfailed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*XFAIL test_suite.py::test_fails - bug 12: wrong stride [[]expectations: test_suite.py::test_fails]",
        ]
    )
    result.stdout.fnmatch_lines(["SKIPPED [[]2] *no streams on this device*"])


def test_xfail_that_passes_is_reported_and_fails_under_strict(run_pytest, pytester):
    _suite(pytester)
    arg = _expect(pytester, '[[xfail]]\nid = "test_suite.py::test_passes"\nreason = "was broken"\n')
    result = run_pytest("--flagos-device=cpu", arg, "-k", "test_passes")
    result.assert_outcomes(xpassed=1)
    result.stdout.fnmatch_lines(
        [
            "*flagos: expected failures that passed*",
            f"XPASS test_suite.py::test_passes -- remove its entry from {pytester.path / 'expect.toml'}",
        ]
    )
    strict = run_pytest("--flagos-device=cpu", "--flagos-strict", arg, "-k", "test_passes")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*XPASS(strict)*was broken*"])


STALE = """
[[xfail]]
id = "test_suite.py::test_removed_long_ago"
reason = "gone"

[[skip]]
id = "test_other_file_not_collected.py::test_x"
reason = "exists, just not collected in this run"

[[skip]]
id = "test_suite.py::test_param"
reason = "matches"
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_stale_entries_are_warned_once(run_pytest, pytester, xdist):
    _suite(pytester)
    pytester.makepyfile(test_other_file_not_collected="def test_x():\n    pass\n")
    arg = _expect(pytester, STALE)
    result = run_pytest("--flagos-device=cpu", arg, "test_suite.py", *xdist)
    out = result.stdout.str()
    message = (
        "flagos: expectations file {}: [[xfail]] 'test_suite.py::test_removed_long_ago' "
        "matches no collected test (stale entry?)"
    ).format(pytester.path / "expect.toml")
    assert out.count(message) == 1, out
    assert "FlagosExpectationWarning" in out
    # a file outside this run's collection is not called stale
    assert "test_other_file_not_collected" not in out


BAD_FILES = [
    ("[[xfail]]\nid = 'a.py::t'\nreason = oops\n", " does not parse: Invalid value (at line 3, column 10)"),
    ("[[xfail]]\nid = 'a.py::t'\n", ": [[xfail]] entry 1 (a.py::t) has no 'reason'"),
    ("[[skip]]\nreason = 'x'\n", ": [[skip]] entry 1 has no 'id'"),
    ("[[xfail]]\nid = 'a.py::t'\nreason = 'x'\nstrict = true\n", ": [[xfail]] entry 1 has unknown key(s) strict"),
    ("[[flaky]]\nid = 'a.py::t'\nreason = 'x'\n", ": unknown table(s) flaky (expected [[xfail]] and [[skip]])"),
    (
        "[[xfail]]\nid = 'a.py'\nreason = 'x'\n[[skip]]\nid = 'a.py'\nreason = 'y'\n",
        ": a.py is listed twice ([[xfail]] and [[skip]])",
    ),
]


def test_a_bad_expectations_file_is_a_usage_error(run_pytest, pytester):
    pytester.makepyfile("def test_x():\n    pass\n")
    text, expected = BAD_FILES[0]
    arg = _expect(pytester, text)
    line = usage_error_line(run_pytest("--flagos-device=cpu", arg))
    assert line == f"ERROR: flagos: expectations file {pytester.path / 'expect.toml'}{expected}"


@pytest.mark.parametrize("text, expected", BAD_FILES)
def test_bad_expectations_files(tmp_path, text, expected):
    """The loader's messages, in-process (the test above covers the usage-error path)."""
    from pytest_flagos.expectations import load

    path = tmp_path / "expect.toml"
    path.write_text(text)
    with pytest.raises(pytest.UsageError) as error:
        load(path)
    assert str(error.value) == f"flagos: expectations file {path}{expected}"


def test_missing_expectations_file(run_pytest, pytester):
    pytester.makepyfile("def test_x():\n    pass\n")
    line = usage_error_line(run_pytest("--flagos-device=cpu", "--flagos-expectations=nope.toml"))
    assert line == (
        f"ERROR: flagos: expectations file {pytester.path / 'nope.toml'} cannot be read: No such file or directory"
    )


def test_matching_rules():
    expectations = Expectations(
        Path("x.toml"),
        (
            Entry("skip", "conformance/", "dir"),
            Entry("xfail", "conformance/test_conv.py", "file"),
            Entry("xfail", "conformance/test_conv.py::test_conv2d", "test"),
            Entry("skip", "conformance/test_conv.py::TestGroup::", "class"),
        ),
    )
    lookup = lambda nodeid: e.reason if (e := expectations.lookup(nodeid)) else None  # noqa: E731
    assert lookup("conformance/test_conv.py::test_conv2d") == "test"
    assert lookup("conformance/test_conv.py::test_conv2d[float32]") == "test"
    assert lookup("conformance/test_conv.py::test_conv2d_transpose") == "file"  # no partial names
    assert lookup("conformance/test_conv.py::TestGroup::test_a") == "class"
    assert lookup("conformance/test_streams.py::test_wait") == "dir"
    assert lookup("conformance_extra/test_x.py::test_y") is None
    assert lookup("tests/test_conv.py::test_conv2d") is None
