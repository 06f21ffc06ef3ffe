"""Bad input, probed as a demanding user and a security reviewer would: each case stays fixed.

Every case is a pytest run in a subprocess (pytester). A mistake of the user is one line
`ERROR: flagos: ...` and exit status 4, decided before any test runs; nothing the plugin
writes (reports, repro scripts) may overwrite an input, run code from a test's text, or
replace the failure it describes.
"""

from __future__ import annotations

import json
import os

import pytest

from pytest_flagos.options import OPTIONS

from plugin_helpers import load_report, usage_error_line

PASSING = "def test_ok():\n    pass\n"


# -- repro scripts: text from the test run is data, never code --------------------------------

INJECTION = """
import torch

MESSAGE = {message!r}


def fn(x):
    raise ValueError(MESSAGE)


@pytest.mark.parametrize("label", [{label!r}])
def test_message(assert_compiles_like_eager, label):
    assert_compiles_like_eager(fn, torch.randn(4), backend="eager")
"""


@pytest.mark.parametrize(
    "message, label",
    [
        # closes a triple-quoted string and runs code
        ('boom """ + str(__import__("pathlib").Path({marker!r}).write_text("ran")) + """ end', 'q"""x'),
        # a Windows path: \U and \N are escapes in a normal string literal
        (r'boom in C:\Users\new\Nvidia\x.py """; __import__("pathlib").Path({marker!r}).touch()  #', "c:\\tmp"),
        # line breaks of every kind end a comment
        ("boom\rimport pathlib; pathlib.Path({marker!r}).touch()\u2028x\x0cy\x00z", "nl"),
    ],
    ids=["triple-quote", "windows-path", "line-breaks"],
)
@pytest.mark.slow
def test_repro_script_quotes_every_text_it_holds(run_pytest, run_python, pytester, message, label):
    marker = str(pytester.path / "PWNED")
    pytester.makepyfile("import pytest\n" + INJECTION.format(message=message.format(marker=marker), label=label))
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros")
    result.assert_outcomes(failed=1)
    (script,) = (pytester.path / "repros").glob("*.py")
    compile(script.read_text(), str(script), "exec")  # a SyntaxError fails here
    ran = run_python(script)
    assert not os.path.exists(marker), "executing the repro ran code from the failure message"
    assert ran.returncode != 0
    assert "ValueError: boom" in ran.stderr  # it fails the way the test did


# -- report and repro paths: checked at configure, never overwrite an input -------------------


def test_report_path_ending_in_md_is_refused(run_pytest, pytester):
    pytester.makepyfile(PASSING)
    line = usage_error_line(run_pytest("--flagos-device=cpu", "--flagos-report=r.md"))
    assert "--flagos-report=" in line and "r.md" in line and ".json" in line
    assert not (pytester.path / "r.md").exists()


def test_report_path_equal_to_the_expectations_file_is_refused(run_pytest, pytester):
    pytester.makepyfile(PASSING)
    expectations = pytester.path / "expect.json"
    text = '[[skip]]\nid = "test_nothing.py"\nreason = "none"\n'
    expectations.write_text(text)
    line = usage_error_line(
        run_pytest("--flagos-device=cpu", "--flagos-expectations=expect.json", "--flagos-report=expect.json")
    )
    assert "expectations file" in line
    assert expectations.read_text() == text


def test_report_path_equal_to_a_test_file_is_refused(run_pytest, pytester):
    test_file = pytester.makepyfile(test_suite=PASSING)
    before = test_file.read_text()
    line = usage_error_line(run_pytest("--flagos-device=cpu", "--flagos-report=test_suite.py", "test_suite.py"))
    assert "test_suite.py" in line and "test file" in line
    assert test_file.read_text() == before


def test_report_over_a_file_that_is_not_a_report_is_refused(run_pytest, pytester):
    pytester.makepyfile(PASSING)
    notes = pytester.path / "notes.md"
    notes.write_text("my notes\n")
    line = usage_error_line(run_pytest("--flagos-device=cpu", "--flagos-report=notes.json"))
    assert "notes.md" in line and "not a flagos report" in line
    assert notes.read_text() == "my notes\n"


def test_report_over_an_earlier_report_is_allowed(run_pytest, pytester):
    pytester.makepyfile(PASSING)
    for _ in range(2):
        result = run_pytest("--flagos-device=cpu", "--flagos-report=out/r.json")
        result.assert_outcomes(passed=1)
    assert load_report(pytester.path / "out" / "r.json")["summary"]["passed"] == 1
    assert sorted(p.name for p in (pytester.path / "out").iterdir()) == ["r.json", "r.md"]  # no temporaries


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_report_path_that_cannot_be_a_file_is_refused_before_the_run(run_pytest, pytester, where):
    pytester.makepyfile("def test_ok():\n    print('RAN')\n")
    (pytester.path / "somedir").mkdir()
    (pytester.path / "afile").write_text("x")
    path = "somedir" if where == "a directory" else "afile/r.json"
    result = run_pytest("-s", "--flagos-device=cpu", f"--flagos-report={path}")
    line = usage_error_line(result)
    assert path in line
    assert "RAN" not in result.stdout.str()


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_repro_dir_that_cannot_be_a_directory_is_refused_before_the_run(run_pytest, pytester, where):
    pytester.makepyfile(PASSING)
    (pytester.path / "afile").write_text("x")
    path = "afile" if where == "a file" else "afile/repros"
    line = usage_error_line(run_pytest("--flagos-device=cpu", f"--flagos-repro-dir={path}"))
    assert "--flagos-repro-dir" in line and path in line


def test_a_repro_write_error_is_a_note_on_the_real_failure(run_pytest, pytester):
    pytester.makepyfile("""
        import pathlib
        import shutil
        import torch

        def fn(x):
            y = x + 1
            return y + 0.5 if torch.compiler.is_compiling() else y

        def test_wrong(assert_compiles_like_eager):
            # the repro directory turns into a file during the run
            shutil.rmtree("repros")
            pathlib.Path("repros").write_text("in the way")
            assert_compiles_like_eager(fn, torch.randn(4), backend="eager")
    """)
    (pytester.path / "repros").mkdir()
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "CompiledMismatch" in out
    result.stdout.fnmatch_lines(["*flagos repro: not written (*repros*)*"])


# -- simple mistakes are usage errors, not INTERNALERROR --------------------------------------


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_device_is_a_usage_error(run_pytest, pytester, value):
    pytester.makepyfile(PASSING)
    line = usage_error_line(run_pytest(f"--flagos-device={value}"))
    assert "--flagos-device" in line and "empty" in line


@pytest.mark.parametrize("option", [opt.flag for opt in OPTIONS if opt.kind == "path"])
def test_empty_path_is_a_usage_error(run_pytest, pytester, option):
    pytester.makepyfile(PASSING)
    line = usage_error_line(run_pytest("--flagos-device=cpu", f"{option}="))
    assert option in line and "empty" in line


def test_expectations_file_that_is_not_utf8_is_a_usage_error(run_pytest, pytester):
    pytester.makepyfile(PASSING)
    (pytester.path / "expect.toml").write_bytes(b'[[skip]]\nid = "caf\xe9"\nreason = "x"\n')
    line = usage_error_line(run_pytest("--flagos-device=cpu", "--flagos-expectations=expect.toml"))
    assert "expect.toml" in line and "UTF-8" in line


def test_a_5000_character_expectations_id_is_a_stale_entry(run_pytest, pytester):
    pytester.makepyfile(PASSING)
    long_id = "x" * 5000 + ".py::test_x"
    (pytester.path / "expect.toml").write_text(f'[[xfail]]\nid = "{long_id}"\nreason = "long"\n')
    result = run_pytest("--flagos-device=cpu", "--flagos-expectations=expect.toml")
    result.assert_outcomes(passed=1, warnings=1)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*matches no collected test (stale entry?)*"])


def test_a_5000_character_test_id_gets_a_short_repro_name(run_pytest, pytester):
    pytester.makepyfile("""
        import pytest
        import torch

        def fn(x):
            y = x * 2
            return y + 1 if torch.compiler.is_compiling() else y

        @pytest.mark.parametrize("n", [4], ids=["n" * 5000])
        def test_long(assert_compiles_like_eager, n):
            assert_compiles_like_eager(fn, torch.randn(n), backend="eager")
    """)
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros", "--flagos-report=r.json")
    result.assert_outcomes(failed=1)
    (script,) = (pytester.path / "repros").glob("*.py")
    assert len(script.name) <= 120
    assert load_report(pytester.path / "r.json")["summary"]["failed"] == 1


@pytest.mark.parametrize("value", ["100000", "0", "-3", "many"])
def test_compile_threads_out_of_range_is_a_usage_error(run_pytest, pytester, value):
    pytester.makepyfile(PASSING)
    line = usage_error_line(run_pytest("--flagos-device=cpu", f"--flagos-compile-threads={value}"))
    assert "--flagos-compile-threads" in line
    if value == "100000":
        assert "at most" in line


def test_compile_threads_within_the_cap_is_accepted(run_pytest, pytester):
    pytester.makepyfile(PASSING)
    run_pytest("--flagos-device=cpu", "--flagos-compile-threads=32").assert_outcomes(passed=1)


# -- an interrupted run's report says so --------------------------------------------------------

SEVEN_TESTS = """
import pytest

@pytest.mark.parametrize("n", range(3))
def test_before(n):
    pass

def test_stop():
    {stop}

@pytest.mark.parametrize("n", range(3))
def test_after(n):
    pass
"""


@pytest.mark.parametrize(
    "stop, args, status, no_result",
    [
        # the interrupted test itself has no result either
        ("raise KeyboardInterrupt", (), pytest.ExitCode.INTERRUPTED, ["test_run.py::test_stop"]),
        ("assert False, 'stop here'", ("-x",), pytest.ExitCode.TESTS_FAILED, []),
        ("assert False, 'stop here'", ("--maxfail=1",), pytest.ExitCode.TESTS_FAILED, []),
    ],
    ids=["keyboard-interrupt", "x", "maxfail"],
)
def test_an_interrupted_run_report_is_marked_incomplete(run_pytest, pytester, stop, args, status, no_result):
    pytester.makepyfile(test_run=SEVEN_TESTS.format(stop=stop))
    result = run_pytest("--flagos-device=cpu", "--flagos-report=r.json", *args)
    assert result.ret == status
    report = load_report(pytester.path / "r.json")
    run = report["run"]
    assert run["exit_status"] == int(status)
    assert run["interrupted"] is True
    assert run["selected"] == 7
    never_run = no_result + [f"test_run.py::test_after[{n}]" for n in range(3)]
    assert run["not_run"] == {"count": len(never_run), "ids": never_run}
    assert report["summary"]["total"] == 7 - len(never_run)
    markdown = (pytester.path / "r.md").read_text()
    assert "**Incomplete run**" in markdown
    assert f"{len(never_run)} of 7 selected tests never ran" in markdown
    assert f"`{never_run[-1]}`" in markdown


def test_a_complete_run_report_is_not_marked_incomplete(run_pytest, pytester):
    pytester.makepyfile(test_run=SEVEN_TESTS.format(stop="pass"))
    run_pytest("--flagos-device=cpu", "--flagos-report=r.json").assert_outcomes(passed=7)
    report = load_report(pytester.path / "r.json")
    assert report["run"]["interrupted"] is False
    assert report["run"]["exit_status"] == 0
    assert report["run"]["not_run"] == {"count": 0, "ids": []}
    assert "Incomplete" not in (pytester.path / "r.md").read_text()


def test_report_json_is_valid_even_for_odd_text(run_pytest, pytester):
    # a lone surrogate and control characters in a failure message: both files are written
    pytester.makepyfile("def test_odd():\n    raise ValueError('odd \\udc80 \\x00 text')\n")
    # (--tb=no -rN: pytest would print the surrogate itself, which pytester cannot decode)
    result = run_pytest("--tb=no", "-rN", "--flagos-device=cpu", "--flagos-report=r.json")
    result.assert_outcomes(failed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["summary"]["failed"] == 1
    assert "odd" in (pytester.path / "r.md").read_text(errors="replace")


def test_a_report_that_cannot_be_written_at_the_end_says_so_in_one_line(run_pytest, pytester):
    # the output directory turns into a file during the run
    pytester.makepyfile("""
        import pathlib
        import shutil

        def test_ok():
            shutil.rmtree("out")
            pathlib.Path("out").write_text("in the way")
    """)
    (pytester.path / "out").mkdir()
    result = run_pytest("--flagos-device=cpu", "--flagos-report=out/r.json")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(["flagos: report NOT written: *out*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert (pytester.path / "out").read_text() == "in the way"
