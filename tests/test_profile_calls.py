"""benchmarks/profile_calls.py: warm calls under cProfile per device, and the report's tables."""

import cProfile
import pstats

import pytest
import torch

import torch_fl
from benchmarks import profile_calls


def _row(text, first_cell):
    line = next(line for line in text.splitlines() if line.startswith(f"| {first_cell} |"))
    return [cell.strip() for cell in line.split("|")[1:-1]]


def test_eager_calls_are_profiled_and_compared_per_call(tmp_path):
    out = tmp_path / "calls.md"
    profile_calls.main(
        ["--devices", "flagos,cpu", "--workload", "small-mlp", "--mode", "eager", "--calls", "20", "--out", str(out)]
    )
    text = out.read_text()
    for device in ("flagos", "cpu"):
        _, wall, python_calls = _row(text, device)
        assert float(wall) > 0 and float(python_calls) > 0
    # small-mlp is Linear-GELU-Linear: two Linear.forward calls per model call, on both devices.
    linear = _row(text, "`<built-in method torch._C._nn.linear>`")
    assert linear[-2:] == ["2", "2"]
    assert "## Self time per call, flagos minus cpu" in text and "_lsprof" not in text


@pytest.mark.slow
def test_a_compiled_call_shows_the_generated_wrapper_once_per_call(tmp_path):
    out = tmp_path / "calls.md"
    profile_calls.main(
        ["--devices", "flagos", "--workload", "small-mlp", "--calls", "10", "--top", "10000", "--out", str(out)]
    )
    text = out.read_text()
    assert _row(text, "`<generated>(call)`")[-1] == "1"
    assert "minus" not in text  # one device: nothing to compare


def test_a_device_string_torch_cannot_parse_stops_before_any_model_is_built(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        profile_calls.main(["--devices", "flagos,nodevice", "--out", str(tmp_path / "calls.md")])
    assert stopped.value.code == 2
    assert "nodevice" in capsys.readouterr().err
    assert not (tmp_path / "calls.md").exists()


def test_the_devices_take_turns_in_chunks_for_the_timing_and_under_the_profiler():
    order = []
    calls_by_device = {device: (lambda d=device: order.append(d)) for device in ("cpu", "flagos")}
    results = profile_calls.profile_interleaved(calls_by_device, calls=6, warmup=0, rounds=3)
    assert order == (["cpu"] * 2 + ["flagos"] * 2) * 6  # 3 timed rounds, then 3 profiled ones
    for device in ("cpu", "flagos"):
        wall, rows, _ = results[device]
        assert wall > 0
        recorder = next(name for name in rows if name.startswith("tests/test_profile_calls.py"))
        assert rows[recorder][0] == 1  # one call of the device's function per profiled call


def test_flagos_entry_points_of_compiled_code_are_compared_with_the_torch_functions_they_stand_for():
    profiler = cProfile.Profile()
    a, out = torch.ones(2, 2, device="flagos"), torch.empty(2, 2, device="flagos")
    profiler.enable()
    torch_fl._C._compiled_mm(a, a, out=out)
    torch.mm(a, a, out=out)
    profiler.disable()
    rows = profile_calls.per_call(pstats.Stats(profiler), 1)
    assert rows["<built-in method torch.mm>"][0] == 2, "both calls are one entry"
    assert not [name for name in rows if "_compiled_mm" in name]
