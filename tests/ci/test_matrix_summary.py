"""The matrix summary: several conformance reports -> one accelerators x areas table."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from ci_helpers import REPO, run_script

OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped")


def counts(**kw: int) -> dict[str, int]:
    c = {o: kw.get(o, 0) for o in OUTCOMES}
    c["total"] = sum(c.values())
    return c


def report(spec: str, areas: dict[str, dict[str, int]], tests=(), **device) -> dict:
    """A report in the plugin's schema (pytest_flagos/report.py, pytest_flagos.report/1)."""
    summary = counts(**{o: sum(a[o] for a in areas.values()) for o in OUTCOMES})
    return {
        "schema": "pytest_flagos.report/1",
        "versions": {
            "python": "3.11.7",
            "torch": "2.13.0",
            "triton": "3.7.0",
            "pytest": "9.0",
            "hypothesis": "6.1",
            "pytest_flagos": "0.1.0",
        },
        "device": {
            "spec": spec,
            "type": spec.split(":")[0],
            "index": None,
            "available": device.get("available", True),
            "unavailable_reason": device.get("unavailable_reason"),
            "name": device.get("name", spec.upper()),
            "properties": {},
        },
        "capabilities": {"codegen": "triton", "dtypes": ["float32"]},
        "settings": {},
        "expectations": {"file": None, "entries": 0},
        "summary": summary,
        "areas": areas,
        "tests": list(tests),
        "run": {
            "started": "2026-01-01T00:00:00",
            "duration_s": 12.4,
            "xdist_workers": 0,
            "argv": [],
            "python_executable": "python",
        },
    }


CPU = report("cpu", {"runtime": counts(passed=5), "compile": counts(passed=3, xfailed=1)})
FLAGOS = report(
    "flagos",
    {
        "runtime": counts(passed=4, failed=1),
        "streams": counts(passed=2, xpassed=1),
        "compile": counts(skipped=2),
    },
    tests=[
        {
            "nodeid": "conformance/test_runtime.py::test_copies",
            "area": "runtime",
            "outcome": "failed",
            "reason": "copy lost | bytes",
            "expectation": None,
            "duration_s": 0.1,
        }
    ],
    name="flagos host accelerator",
)


def write(directory: Path, name: str, data) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def table_rows(markdown: str) -> dict[str, list[str]]:
    """First table: row label -> cells."""
    rows = {}
    for line in markdown.split("\n\n", 2)[1].splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0].strip("*")] = cells[1:]
    return rows


def test_merges_two_reports_into_one_table(tmp_path):
    cpu = write(tmp_path / "reports", "cpu.json", CPU)
    flagos = write(tmp_path / "reports", "flagos-host.json", FLAGOS)
    out = tmp_path / "matrix.md"
    result = run_script("matrix_summary", str(cpu), str(flagos), "-o", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert text.splitlines()[0] == "# flagos conformance matrix"
    header = text.split("\n\n")[1].splitlines()[0]
    assert header == "| accelerator | device | all | compile | runtime | streams |"
    rows = table_rows(text)
    assert rows["cpu"] == ["`cpu`", "✅ 8/9 (1 xfail)", "✅ 3/4 (1 xfail)", "✅ 5/5", "·"]
    assert rows["flagos-host"] == [
        "`flagos`",
        "❌ 6/10 (1 fail, 1 xpass, 2 skip)",
        "⚠️ 0/2 (2 skip)",
        "❌ 4/5 (1 fail)",
        "⚠️ 2/3 (1 xpass)",
    ]
    assert "| flagos-host | flagos host accelerator | 2.13.0 | 3.7.0 | 3.11.7 | 12 s |" in text
    assert "- `conformance/test_runtime.py::test_copies` (failed): copy lost \\| bytes" in text


def test_directory_argument_and_stdout(tmp_path):
    write(tmp_path / "reports", "cpu.json", CPU)
    write(tmp_path / "reports", "flagos-host.json", FLAGOS)
    result = run_script("matrix_summary", str(tmp_path / "reports"))
    assert result.returncode == 0, result.stderr
    assert list(table_rows(result.stdout)) == ["cpu", "flagos-host"]


def test_unavailable_device_is_said(tmp_path):
    data = report(
        "cuda",
        {"runtime": counts(skipped=3)},
        available=False,
        unavailable_reason="torch.cuda.is_available() is False",
    )
    path = write(tmp_path, "cuda.json", data)
    result = run_script("matrix_summary", str(path))
    assert table_rows(result.stdout)["cuda"][1] == "⚠️ 0/3 (3 skip)"
    assert "(unavailable: torch.cuda.is_available() is False)" in result.stdout


def test_areas_are_rebuilt_from_tests_when_missing(tmp_path):
    data = copy.deepcopy(CPU)
    data["areas"] = {}
    data["tests"] = [
        {"nodeid": f"t{i}", "area": "graphs", "outcome": o} for i, o in enumerate(["passed", "passed", "error"])
    ]
    path = write(tmp_path, "cpu.json", data)
    result = run_script("matrix_summary", str(path))
    assert result.returncode == 0
    assert table_rows(result.stdout)["cpu"][1:] == ["❌ 2/3 (1 error)", "❌ 2/3 (1 error)"]
    assert "no per-area counts; rebuilt from the test list" in result.stderr


def test_another_schema_version_is_read_with_a_warning(tmp_path):
    data = copy.deepcopy(CPU)
    data["schema"] = "pytest_flagos.report/2"
    path = write(tmp_path, "cpu.json", data)
    result = run_script("matrix_summary", str(path))
    assert result.returncode == 0
    assert f"{path}: warning: schema pytest_flagos.report/2" in result.stderr
    assert "cpu" in table_rows(result.stdout)


def test_unreadable_inputs_are_named_and_the_rest_is_written(tmp_path):
    good = write(tmp_path, "cpu.json", CPU)
    junk = write(tmp_path, "junk.json", "{not json")
    other = write(tmp_path, "other.json", {"schema": "something/1"})
    missing = tmp_path / "missing.json"
    result = run_script("matrix_summary", str(good), str(junk), str(other), str(missing))
    assert result.returncode == 1
    err = result.stderr.splitlines()
    assert err[0].startswith(f"{junk}: not JSON: ")
    assert err[1] == (
        f"{other}: not a flagos conformance report (schema 'something/1', expected pytest_flagos.report/1)"
    )
    assert err[2] == f"{missing}: cannot read: No such file or directory"
    assert list(table_rows(result.stdout)) == ["cpu"]


def test_nothing_readable_is_exit_2(tmp_path):
    result = run_script("matrix_summary", str(write(tmp_path, "x.json", "[]")))
    assert result.returncode == 2
    assert "no conformance report could be read" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_script("matrix_summary", str(empty))
    assert result.returncode == 2 and f"{empty}: no *.json report" in result.stderr


def test_same_file_names_stay_apart(tmp_path):
    a = write(tmp_path / "a", "cpu.json", CPU)
    b = write(tmp_path / "b", "cpu.json", CPU)
    result = run_script("matrix_summary", str(a), str(b))
    assert result.returncode == 0
    assert list(table_rows(result.stdout)) == ["cpu", str(b.with_suffix(""))]


# -- with reports the real plugin wrote --------------------------------------------------

SUITE_A = """
import pytest

pytestmark = pytest.mark.flagos_area("runtime")

def test_ok():
    pass

def test_broken():
    assert False, "copy lost bytes"
"""

SUITE_B = """
import pytest

@pytest.mark.flagos_area("streams")
def test_stream():
    pass

@pytest.mark.xfail(reason="no events yet")
@pytest.mark.flagos_area("streams")
def test_event():
    assert False

def test_skipped():
    pytest.skip("not on this device")
"""


@pytest.mark.slow
def test_reports_written_by_the_plugin(pytester, monkeypatch, tmp_path):
    """Two pytest runs with the real plugin (two devices), merged."""
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
    )
    for name in ("FLAGOS_DEVICE", "FLAGOS_REPORT", "FLAGOS_EXPECTATIONS", "FLAGOS_STRICT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_alpha=SUITE_A, test_beta=SUITE_B)
    reports = tmp_path / "reports"
    for label, device in (("cpu", "cpu"), ("flagos-host", "flagos")):
        result = pytester.runpytest_subprocess(
            "-p",
            "flagos",
            "-p",
            "no:cacheprovider",
            f"--flagos-device={device}",
            f"--flagos-report={reports / (label + '.json')}",
            timeout=300,
        )
        assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
        data = json.loads((reports / f"{label}.json").read_text())
        assert data["schema"] == "pytest_flagos.report/1"
    result = run_script("matrix_summary", str(reports), "-o", str(tmp_path / "m.md"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "m.md").read_text()
    assert text.split("\n\n")[1].splitlines()[0] == "| accelerator | device | all | beta | runtime | streams |"
    rows = table_rows(text)
    for label, device in (("cpu", "cpu"), ("flagos-host", "flagos")):
        assert rows[label] == [
            f"`{device}`",
            "❌ 2/5 (1 fail, 1 xfail, 1 skip)",
            "⚠️ 0/1 (1 skip)",
            "❌ 1/2 (1 fail)",
            "✅ 1/2 (1 xfail)",
        ]
    assert "- `test_alpha.py::test_broken` (failed): AssertionError: copy lost bytes" in text


# -- shards: one accelerator's suite split over machines (pytest-split) ------------------


def shard_report(outcomes: dict[str, str], duration: float, spec: str = "cuda") -> dict:
    tests = [
        {"nodeid": nodeid, "area": nodeid.split("::")[0], "outcome": o, "reason": "", "expectation": None}
        for nodeid, o in outcomes.items()
    ]
    areas: dict[str, dict[str, int]] = {}
    for t in tests:
        areas.setdefault(t["area"], {o: 0 for o in OUTCOMES})[t["outcome"]] += 1
    data = report(spec, {a: counts(**c) for a, c in areas.items()}, tests=tests)
    data["run"]["duration_s"] = duration
    return data


ALL_TESTS = {
    "ops::a": "passed",
    "ops::b": "failed",
    "ops::c": "passed",
    "runtime::d": "passed",
    "runtime::e": "skipped",
    "ops::f": "xfailed",
}


def test_shards_of_one_accelerator_merge_into_the_row_of_one_run(tmp_path):
    names = list(ALL_TESTS)
    shards = [names[0:2], names[2:4], names[4:6]]
    for k, part in enumerate(shards, 1):
        data = shard_report({n: ALL_TESTS[n] for n in part}, duration=10.0 * k)
        write(tmp_path / "sharded", f"cuda.shard-{k}-of-3.json", data)
    write(tmp_path / "whole", "cuda.json", shard_report(ALL_TESTS, duration=55.0))
    sharded = run_script("matrix_summary", str(tmp_path / "sharded"))
    whole = run_script("matrix_summary", str(tmp_path / "whole"))
    assert sharded.returncode == 0 and whole.returncode == 0, sharded.stderr + whole.stderr
    assert sharded.stderr == ""
    rows = table_rows(sharded.stdout)
    assert list(rows) == ["cuda"]
    assert rows == table_rows(whole.stdout)
    assert rows["cuda"][1] == "❌ 3/6 (1 fail, 1 xfail, 1 skip)"
    # the shards ran side by side: the longest is the row's duration, the files are named
    assert "| 30 s | `" in sharded.stdout and "3 shards" in sharded.stdout


def test_a_missing_or_overlapping_shard_is_said(tmp_path):
    names = list(ALL_TESTS)
    write(tmp_path, "cuda.shard-1-of-3.json", shard_report({n: ALL_TESTS[n] for n in names[0:3]}, 5.0))
    write(tmp_path, "cuda.shard-3-of-3.json", shard_report({n: ALL_TESTS[n] for n in names[2:6]}, 5.0))
    result = run_script("matrix_summary", str(tmp_path))
    assert result.returncode == 1
    assert "cuda: shard 2 of 3 is missing: the row counts only the shards read" in result.stderr
    assert "cuda: 1 test(s) in more than one shard (e.g. ops::c): counted once" in result.stderr
    assert table_rows(result.stdout)["cuda"][1] == "❌ 3/6 (1 fail, 1 xfail, 1 skip)"


def test_shards_of_different_totals_or_devices_do_not_merge_silently(tmp_path):
    write(tmp_path, "cuda.shard-1-of-2.json", shard_report({"ops::a": "passed"}, 1.0))
    write(tmp_path, "cuda.shard-2-of-3.json", shard_report({"ops::b": "passed"}, 1.0))
    write(tmp_path, "x.shard-1-of-2.json", shard_report({"ops::a": "passed"}, 1.0, spec="cpu"))
    write(tmp_path, "x.shard-2-of-2.json", shard_report({"ops::b": "passed"}, 1.0, spec="cuda"))
    result = run_script("matrix_summary", str(tmp_path))
    assert result.returncode == 1
    assert "cuda: shards of 2 and of 3 runs" in result.stderr
    assert "x: shards of different devices (cpu, cuda)" in result.stderr
