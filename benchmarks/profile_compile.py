"""Where a first compile's host time goes, on flagos next to a native device: cProfile.

    python benchmarks/profile_compile.py --devices flagos,cuda --workload qwen3-short --out reports/compile-profile.md

For each device, one fresh process on fresh inductor and Triton caches runs the first
compiled call of the workload (bench_compile.py's compile-time child) under cProfile,
serially (compile_threads=1: with workers, the parent's profile would not see the
compiles). The devices' processes run at the same time (--one-at-a-time to run them in
turn), so the figures are a profile, not a timing: compare the work, and time with
``bench_compile.py --compile-times``.

The Markdown report gives, per device: the first call's seconds, the number of Python
function calls, the largest cumulative entries, and every entry of flagos's own code
(torch_fl, flagos_triton). The same work on both devices shows as the same call count.
"""

import argparse
import io
import os
import pstats
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compile import WORKER_RUNS, child_command, child_environment, parse_args, timed_child

TOP = 25
OWN_CODE = ("torch_fl", "flagos_triton")


def profiled_command(device, options, profile_path):
    """bench_compile.py's compile-time child for one device, under cProfile."""
    argv = ["--devices", device, "--workloads", options.workload, "--dtypes", options.dtype]
    args = parse_args(argv + (["--small"] if options.small else []))
    command = child_command(args, options.workload, device)
    command[1:1] = ["-m", "cProfile", "-o", str(profile_path)]  # python -m cProfile -o P script ...
    return command


def profile(command, profile_path, cache, timeout):
    """Runs one profiled child on fresh caches: its first-call seconds and loaded profile, or its error."""
    sample = timed_child(command, child_environment(WORKER_RUNS["serial (compile_threads=1)"], cache), timeout)
    if "error" in sample:
        last = (sample.get("stderr") or "").strip().splitlines()[-1:]
        return {"outcome": ": ".join([sample["error"], *last])}
    stats = pstats.Stats(str(profile_path), stream=io.StringIO())
    return {"outcome": "ok", "first_call_s": round(sample["first_call_s"], 1), "stats": stats}


def entries(stats, limit, keep=lambda filename: True):
    """The `limit` largest cumulative entries whose file passes `keep`: (cumulative s, calls, name)."""
    rows = []
    for (filename, line, function), (_, calls, _, cumulative, _) in stats.stats.items():
        if keep(filename):
            rows.append((cumulative, calls, f"{'/'.join(Path(filename).parts[-2:])}:{line}({function})"))
    return sorted(rows, reverse=True)[:limit]


def report(results, workload, dtype):
    lines = [f"# First compile of {workload} ({dtype}), serial, under cProfile", ""]
    lines += ["| device | first call (s) | Python function calls | outcome |", "| --- | ---: | ---: | --- |"]
    for device, result in results.items():
        stats = result.get("stats")
        calls = f"{stats.total_calls:,}" if stats else "-"
        lines.append(f"| {device} | {result.get('first_call_s', '-')} | {calls} | {result['outcome']} |")
    for device, result in results.items():
        stats = result.get("stats")
        if stats is None:
            continue
        lines += ["", f"## {device}: largest cumulative entries", "", "| cumulative s | calls | function |"]
        lines += ["| ---: | ---: | --- |"]
        lines += [f"| {cum:.2f} | {calls} | `{name}` |" for cum, calls, name in entries(stats, TOP)]
        own = entries(stats, TOP, keep=lambda filename: any(part in filename for part in OWN_CODE))
        lines += ["", f"flagos's own code on {device}, largest cumulative entries:", ""]
        lines += [f"- {cum:.3f} s, {calls} calls: `{name}`" for cum, calls, name in own] or ["- none"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="flagos,cuda")
    parser.add_argument("--workload", default="qwen3-short")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--small", action="store_true", help="the workload's small size (any machine)")
    parser.add_argument("--one-at-a-time", action="store_true", help="run the devices' processes in turn")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per process")
    parser.add_argument("--out", default="reports/compile-profile.md")
    options = parser.parse_args(argv)
    devices = [d.strip() for d in options.devices.split(",") if d.strip()]
    with tempfile.TemporaryDirectory(prefix="profile-compile-") as work:
        paths = {device: Path(work) / f"{device}.prof" for device in devices}
        # Every command first: a device string torch cannot parse stops the run before any process.
        commands = {device: profiled_command(device, options, paths[device]) for device in devices}

        def run(device):
            cache = os.path.join(work, f"cache-{device}")
            return profile(commands[device], paths[device], cache, options.timeout)

        with ThreadPoolExecutor(1 if options.one_at_a_time else len(devices)) as pool:
            results = dict(zip(devices, pool.map(run, devices), strict=True))
    text = report(results, options.workload, options.dtype)
    Path(options.out).parent.mkdir(parents=True, exist_ok=True)
    Path(options.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
