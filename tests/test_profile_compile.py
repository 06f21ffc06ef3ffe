"""benchmarks/profile_compile.py: a first compile under cProfile per device, and its report."""

import pytest

from benchmarks import profile_compile


@pytest.mark.slow
def test_the_report_profiles_a_real_first_compile_on_flagos(tmp_path):
    out = tmp_path / "profile.md"
    profile_compile.main(["--devices", "flagos", "--workload", "small-mlp", "--small", "--out", str(out)])
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| flagos |"))
    _, _, seconds, calls, outcome, _ = (cell.strip() for cell in row.split("|"))
    assert outcome == "ok" and float(seconds) > 0
    assert int(calls.replace(",", "")) > 100_000  # dynamo, AOT and inductor ran under the profiler
    assert "bench_compile.py" in text and "child_first_call" in text
    own = text.split("flagos's own code on flagos", 1)[1]
    assert "torch_fl" in own  # flagos's registration and compile hooks are found and listed


def test_a_device_whose_process_fails_is_reported_with_its_error(tmp_path):
    out = tmp_path / "profile.md"
    profile_compile.main(["--devices", "flagos:7", "--workload", "small-mlp", "--small", "--out", str(out)])
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| flagos:7 |"))
    assert "exit status 1" in row and "out of range" in row
    assert "## flagos:7" not in text  # no profile section for a process that failed


def test_a_device_string_torch_cannot_parse_stops_before_any_process(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        profile_compile.main(["--devices", "nodevice", "--out", str(tmp_path / "profile.md")])
    assert stopped.value.code == 2
    assert "nodevice" in capsys.readouterr().err
    assert not (tmp_path / "profile.md").exists()
