"""The compile-time study of benchmarks/bench_compile.py: which processes it starts, in what order,
and which figure it reports (the child processes are replaced by a recorder)."""

import argparse
import itertools

import pytest

from benchmarks import bench_compile


@pytest.fixture
def study(monkeypatch, tmp_path):
    """Runs compile_times with fake children; returns (report, the (device, label) order of starts)."""
    started = []
    times = itertools.count(10.0)

    def fake_child(command, env, timeout_s):
        device = command[command.index("--devices") + 1]
        label = next(name for name, extra in bench_compile.WORKER_RUNS.items() if extra.items() <= env.items())
        started.append((device, label))
        if (device, label, len(started)) == ("cuda", "subprocess", 4):
            return {"error": "exit status 1"}
        return {"first_call_s": next(times), "process_s": 1.0}

    monkeypatch.setattr(bench_compile, "timed_child", fake_child)

    def run(rounds):
        args = argparse.Namespace(
            compile_rounds=rounds, child_timeout=60, dtypes=["float32"], backend="inductor",
            qwen3_impl="auto", small=True, train=False, json=tmp_path / "report.json",
        )  # fmt: skip
        report = {"compile_times": []}
        session = bench_compile.Session(args, None, bench_compile.Deadline(600), report)
        bench_compile.compile_times(session, ["small-mlp"], ["flagos", "cuda"])
        return report, started

    return run


def test_devices_take_turns_per_worker_set_up_in_alternating_order(study):
    _, started = study(rounds=2)
    labels = list(bench_compile.WORKER_RUNS)
    first_round = [(device, label) for label in labels for device in ("flagos", "cuda")]
    second_round = [(device, label) for label in labels for device in ("cuda", "flagos")]
    assert started == first_round + second_round


def test_each_device_reports_its_median_with_every_sample(study):
    report, _ = study(rounds=3)
    by_device = {s["device"]: s for s in report["compile_times"]}
    assert set(by_device) == {"flagos", "cuda"}
    fork = by_device["flagos"]["runs"]["fork"]
    # Times count up from 10 s over the timed processes (the 4th process fails): flagos's fork
    # runs are the 1st, 8th and 13th processes, timed 10, 16 and 21 s.
    assert fork["first_call_samples_s"] == [10.0, 16.0, 21.0]
    assert fork["first_call_s"] == 16.0
    failed = by_device["cuda"]["runs"]["subprocess"]
    assert failed["failed_samples"] == 1 and len(failed["first_call_samples_s"]) == 2
    assert by_device["flagos"]["rounds"] == 3


def test_a_set_up_without_a_timed_run_reports_its_failure():
    assert bench_compile.median_sample([{"error": "timed out after 5 s"}]) == {"error": "timed out after 5 s"}


def test_samples_skipped_by_the_time_limit_are_not_counted_as_failures():
    samples = [{"first_call_s": 12.0}, {"error": "exit status 1"}, {"skipped": "time limit of 60 s reached"}]
    median = bench_compile.median_sample(samples)
    assert median["failed_samples"] == 1
    assert median["skipped_samples"] == 1
