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
import json
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compile import WORKER_RUNS, child_command, child_environment, parse_args

TOP = 25
OWN_CODE = ("torch_fl", "flagos_triton")


def profiled_child(device, options, profile_path, cache):
    """bench_compile.py's compile-time child for one device, under cProfile, started."""
    argv = ["--devices", device, "--workloads", options.workload, "--dtypes", options.dtype]
    args = parse_args(argv + (["--small"] if options.small else []))
    command = child_command(args, options.workload, device)
    command[1:1] = ["-m", "cProfile", "-o", str(profile_path)]  # python -m cProfile -o P script ...
    env = child_environment(WORKER_RUNS["serial (compile_threads=1)"], cache)
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def collect(child, profile_path, timeout):
    """The child's first-call seconds and its loaded profile, or what went wrong."""
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return {"outcome": f"timed out after {timeout:.0f} s"}
    if child.returncode != 0 or not profile_path.exists():
        last = stderr.strip().splitlines()[-1:] or ["no output"]
        return {"outcome": f"exit status {child.returncode}: {last[0]}"}
    result = json.loads(stdout.strip().splitlines()[-1])
    stats = pstats.Stats(str(profile_path), stream=io.StringIO())
    return {"outcome": "ok", "first_call_s": round(result["first_call_s"], 1), "stats": stats}


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
    results = {}
    with tempfile.TemporaryDirectory(prefix="profile-compile-") as work:
        started = {}
        for device in devices:
            profile_path = Path(work) / f"{device}.prof"
            child = profiled_child(device, options, profile_path, os.path.join(work, f"cache-{device}"))
            if options.one_at_a_time:
                results[device] = collect(child, profile_path, options.timeout)
            else:
                started[device] = (child, profile_path)
        for device, (child, profile_path) in started.items():
            results[device] = collect(child, profile_path, options.timeout)
    text = report(results, options.workload, options.dtype)
    Path(options.out).parent.mkdir(parents=True, exist_ok=True)
    Path(options.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
