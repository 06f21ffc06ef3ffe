"""The flagos-ci hypothesis profile gives its verdict at the first failing example.

A device that fails every generated graph must not spend minutes per test shrinking (each
shrink step compiles a new graph): flagos-ci neither shrinks nor hunts for more bugs;
flagos-dev still shrinks a failure to its minimal example.
"""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

FAILS_ABOVE_TEN = """
from pathlib import Path

from hypothesis import given, strategies as st

CALLS = Path(__file__).with_name("calls.txt")


@given(st.integers(0, 10_000))
def test_small(x):
    with CALLS.open("a") as f:
        f.write(f"{x}\\n")
    assert x <= 10
"""


def _calls(pytester):
    return [int(line) for line in (pytester.path / "calls.txt").read_text().split()]


def test_ci_profile_stops_at_the_first_failing_example(run_pytest, pytester):
    pytester.makepyfile(FAILS_ABOVE_TEN)
    result = run_pytest("--flagos-device=cpu")
    result.assert_outcomes(failed=1)
    calls = _calls(pytester)
    failing = [x for x in calls if x > 10]
    # every example up to the first failing one, then that one replayed: nothing shrunk
    assert failing and calls.index(failing[0]) == len(calls) - 2 and calls[-1] == failing[0], calls
    result.stdout.fnmatch_lines([f"*x={failing[0]},*"])


def test_dev_profile_still_shrinks(run_pytest, pytester):
    pytester.makepyfile(FAILS_ABOVE_TEN)
    result = run_pytest("--flagos-device=cpu", "--hypothesis-profile=flagos-dev")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*x=11,*"])
