"""Loading the plugin, its options (command line, environment, ini) and the report header."""

from __future__ import annotations

import json

import pytest

from pytest_flagos.options import OPTIONS

from plugin_helpers import usage_error_line

SETTINGS_PROBE = """
import json
from pytest_flagos import session

def test_settings():
    s = session.current().settings
    print("SETTINGS=" + json.dumps({
        "device": s.device, "strict": s.strict, "compile_threads": s.compile_threads,
        "worker_start": s.worker_start, "sources": s.sources,
        "repro_dir": s.repro_dir and s.repro_dir.name,
        "report": s.report and s.report.name,
    }))
    from torch._inductor import config
    print("INDUCTOR=" + json.dumps([config.compile_threads, config.worker_start_method]))
"""


def _printed(result: pytest.RunResult, key: str):
    """The JSON the probe printed after KEY= (-s output may share a line with progress)."""
    line = next(line for line in result.stdout.lines if f"{key}=" in line)
    return json.loads(line.split(f"{key}=", 1)[1].rstrip(". "))


def _settings(result: pytest.RunResult) -> dict:
    return _printed(result, "SETTINGS")


def _inductor(result: pytest.RunResult) -> list:
    return _printed(result, "INDUCTOR")


def test_inert_without_a_device_does_not_import_torch(run_pytest, pytester):
    pytester.makepyfile("""
        import sys

        def test_torch_not_imported():
            assert "torch" not in sys.modules

        def test_fixture_skips_without_device(flagos_device):
            raise AssertionError("unreachable")
    """)
    result = run_pytest("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*flagos: no device selected (pass --flagos-device=DEVICE*"])
    assert "flagos: torch" not in result.stdout.str()  # no header either


def test_no_flagos_blocks_the_plugin(pytester, flagos_env):
    pytester.makepyfile("def test_uses_fixture(flagos_device):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:flagos", "-p", "no:cacheprovider", "--flagos-device=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # the option does not exist then
    assert "unrecognized arguments: --flagos-device=cpu" in result.stderr.str()


def test_help_lists_options_with_env_and_ini(run_pytest):
    result = run_pytest("--help")
    out = result.stdout.str()
    assert OPTIONS, "pytest_flagos.options.OPTIONS lists the plugin's options"
    for opt in OPTIONS:  # the one table of options: each with its metavar, environment variable and ini key
        flag = f"{opt.flag}={opt.metavar}" if opt.metavar else opt.flag
        assert flag in out, flag
        assert f"env {opt.env}, ini {opt.dest}" in " ".join(out.split()), opt.env
    assert "flagos: compile conformance for inductor devices" in out


def test_options_from_the_command_line(run_pytest, pytester):
    pytester.makepyfile(SETTINGS_PROBE)
    result = run_pytest(
        "-s",
        "--flagos-device=cpu",
        "--flagos-strict",
        "--flagos-compile-threads=3",
        "--flagos-worker-start=fork",
        "--flagos-repro-dir=repros",
        "--flagos-report=out/r.json",
    )
    result.assert_outcomes(passed=1)
    s = _settings(result)
    assert s["device"] == "cpu" and s["strict"] is True
    assert s["compile_threads"] == 3 and s["worker_start"] == "fork"
    assert s["repro_dir"] == "repros" and s["report"] == "r.json"
    assert s["sources"]["device"] == "--flagos-device"
    assert _inductor(result) == [3, "fork"]  # applied to inductor's config
    assert (pytester.path / "out" / "r.json").exists()


def test_options_from_the_environment_override_ini(run_pytest, pytester, monkeypatch):
    pytester.makeini("""
        [pytest]
        flagos_device = cuda
        flagos_compile_threads = 5
        flagos_worker_start = spawn
        flagos_strict = true
    """)
    pytester.makepyfile(SETTINGS_PROBE)
    monkeypatch.setenv("FLAGOS_DEVICE", "cpu")
    monkeypatch.setenv("FLAGOS_COMPILE_THREADS", "2")
    result = run_pytest("-s")
    result.assert_outcomes(passed=1)
    s = _settings(result)
    assert s["device"] == "cpu" and s["sources"]["device"] == "FLAGOS_DEVICE"
    assert s["compile_threads"] == 2 and s["sources"]["compile_threads"] == "FLAGOS_COMPILE_THREADS"
    assert s["worker_start"] == "spawn" and s["sources"]["worker_start"] == "ini flagos_worker_start"
    assert s["strict"] is True


def test_command_line_overrides_environment(run_pytest, pytester, monkeypatch):
    pytester.makepyfile(SETTINGS_PROBE)
    monkeypatch.setenv("FLAGOS_DEVICE", "no-such-device")
    monkeypatch.setenv("FLAGOS_WORKER_START", "spawn")
    result = run_pytest("-s", "--flagos-device=cpu", "--flagos-worker-start=subprocess")
    result.assert_outcomes(passed=1)
    assert _settings(result)["worker_start"] == "subprocess"


@pytest.mark.parametrize(
    "args, env, expected",
    [
        (["--flagos-compile-threads=many"], {}, "ERROR: flagos: --flagos-compile-threads='many' is not an integer"),
        (["--flagos-compile-threads=0"], {}, "ERROR: flagos: --flagos-compile-threads=0 must be at least 1"),
        (
            [],
            {"FLAGOS_WORKER_START": "threads"},
            "ERROR: flagos: FLAGOS_WORKER_START='threads' is not a worker start method "
            "(expected one of subprocess, fork, spawn)",
        ),
        ([], {"FLAGOS_STRICT": "maybe"}, "ERROR: flagos: FLAGOS_STRICT='maybe' is not a boolean (use 1/0, true/false)"),
    ],
)
def test_bad_option_values_are_usage_errors(run_pytest, pytester, monkeypatch, args, env, expected):
    pytester.makepyfile("def test_x():\n    pass\n")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = run_pytest("--flagos-device=cpu", *args)
    assert usage_error_line(result) == expected


def test_flagos_variables_do_not_break_runs_without_a_device(run_pytest, pytester, monkeypatch):
    pytester.makepyfile("def test_x():\n    pass\n")
    monkeypatch.setenv("FLAGOS_WORKER_START", "threads")  # invalid, but the plugin is inert
    run_pytest().assert_outcomes(passed=1)


def test_report_header(run_pytest, pytester):
    pytester.makepyfile("def test_x():\n    pass\n")
    pytester.path.joinpath("exp.toml").write_text('[[skip]]\nid = "test_report_header.py::test_x"\nreason = "demo"\n')
    result = run_pytest(
        "--flagos-device=cpu",
        "--flagos-compile-threads=2",
        "--flagos-worker-start=subprocess",
        "--flagos-expectations=exp.toml",
    )
    result.stdout.re_match_lines(
        [
            r"flagos: torch 2\.\d+\S*, triton \S+",
            r"flagos: device 'cpu' -> cpu \(.+\)",
            r"flagos: device properties: cpu_count=\d+.*",
            r"flagos: capabilities: codegen=cpp dtypes=float32,float64,float16,bfloat16 "
            r"worker_start_methods=subprocess,fork,spawn memory_limit=False",
            r"flagos: compile workers: start=subprocess threads=2",
            r"flagos: hypothesis profile: flagos-ci",
            r"flagos: expectations: .*exp\.toml \(1 entries\)",
        ]
    )
