"""Where a model call's host time goes, on flagos next to a native device: cProfile of warm calls.

    python benchmarks/profile_calls.py --devices flagos,cuda --workload small-mlp --mode compiled --out reports/call-profile.md

In one process: the workload (bench_models.py) on each device, compiled (or eager, --mode
eager) and warmed up; then --calls calls per device timed by the wall clock and as many again
under cProfile, the devices taking turns in --rounds chunks (a synchronize after each), so that
a host whose speed drifts during the run slows both alike (run 38 on an H100 put whichever
device went second 30 % slower in every entry when each device ran all its calls at once). On a host-bound call, what one device
does and the other does not shows as Python entries of its own or as more self time in the same
entries (a builtin such as ``torch.mm`` holds the time of the C++ below it).

The Markdown report gives, per device, the time per call and the Python function calls per
call; then the entries whose self time per call differs most between the first device and
the second; then each device's largest entries. Names of inductor's generated modules (random
file names) are given as ``<generated>(function)``, so both devices' wrappers compare. The
profile slows every call down: compare the entries, and take times from bench_compile.py.
A benchmark, not a test: nothing here asserts.
"""

import argparse
import copy
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

import torch_fl  # noqa: F401  # the flagos device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compile import input_on, synchronize
from bench_models import WORKLOADS, build_workload

# Compiled code on flagos calls torch_fl._C's functions where cuda's calls torch's (torch_fl/compile):
# listed under torch's names, so that the table compares the same step of both wrappers.
SAME_STEP = {
    "<torch_fl._C._compiled_mm>": "<built-in method torch.mm>",
    "<torch_fl._C._compiled_addmm>": "<built-in method torch.addmm>",
    "<torch_fl._C._compiled_bmm>": "<built-in method torch.bmm>",
    "<torch_fl._C._empty_strided>": "<built-in method torch._C._dynamo.guards._empty_strided_cuda>",
    "<torch_fl._C._current_raw_stream>": "<built-in method torch._C._cuda_getCurrentRawStream>",
}


def entry_name(filename, line, function):
    """A profile entry's name, the same for both devices' generated code."""
    if filename == "~":
        return SAME_STEP.get(function, function)  # a builtin: "<built-in method torch.mm>"
    path = Path(filename)
    if "torchinductor" in filename or filename.startswith("<"):
        return f"<generated>({function})"
    return f"{'/'.join(path.parts[-2:])}:{line}({function})"


def per_call(stats, calls):
    """{entry: (calls per model call, self seconds per model call)}, generated entries merged."""
    rows = {}
    for (filename, line, function), (_, ncalls, tottime, _, _) in stats.stats.items():
        if "_lsprof" in function:
            continue  # the profiler's own disable()
        name = entry_name(filename, line, function)
        n, t = rows.get(name, (0.0, 0.0))
        rows[name] = (n + ncalls / calls, t + tottime / calls)
    return rows


def call_of(workload, device, dtype, mode):
    model = copy.deepcopy(workload.model).to(device=device, dtype=dtype)
    x = input_on(workload.example_input, device, dtype)
    fn = torch.compile(model) if mode == "compiled" else model
    return lambda: fn(x)


def profile_interleaved(calls_by_device, calls, warmup, rounds):
    """{device: (median wall seconds per call, per-call profile rows, Python function calls per call)}.

    The devices take turns, a chunk of calls each, both for the timing and under the profiler
    (one profiler per device, enabled for its own chunks): a host that slows down or speeds up
    during the run then slows both devices alike."""
    chunk = max(1, calls // rounds)
    for device, call in calls_by_device.items():
        for _ in range(warmup):
            call()
        synchronize(device)
    walls = {device: [] for device in calls_by_device}
    for _ in range(rounds):
        for device, call in calls_by_device.items():
            start = time.perf_counter()
            for _ in range(chunk):
                call()
            synchronize(device)
            walls[device].append((time.perf_counter() - start) / chunk)
    profilers = {device: cProfile.Profile() for device in calls_by_device}
    for _ in range(rounds):
        for device, call in calls_by_device.items():
            profilers[device].enable()
            for _ in range(chunk):
                call()
            profilers[device].disable()
            synchronize(device)
    results = {}
    for device, profiler in profilers.items():
        stats = pstats.Stats(profiler)
        profiled = chunk * rounds
        results[device] = (statistics.median(walls[device]), per_call(stats, profiled), stats.total_calls / profiled)
    return results


def report(results, workload, dtype_name, mode, calls, top=25):
    lines = [f"# {mode.capitalize()} calls of {workload} ({dtype_name}): {calls} calls under cProfile", ""]
    lines += ["| device | wall per call (us) | Python function calls per call |", "| --- | ---: | ---: |"]
    for device, (wall, _, python_calls) in results.items():
        lines.append(f"| {device} | {wall * 1e6:.1f} | {python_calls:.0f} |")
    devices = list(results)
    if len(devices) >= 2:
        test, native = devices[0], devices[1]
        a, b = results[test][1], results[native][1]
        delta = {name: a.get(name, (0, 0))[1] - b.get(name, (0, 0))[1] for name in a.keys() | b.keys()}
        largest = sorted(delta, key=lambda name: -abs(delta[name]))[:top]
        lines += ["", f"## Self time per call, {test} minus {native}", ""]
        lines += [
            "torch_fl._C's entry points for compiled code are listed under the torch functions they stand for.",
            "",
        ]
        lines += [f"| entry | {test} us | {native} us | difference us | {test} calls | {native} calls |"]
        lines += ["| --- | ---: | ---: | ---: | ---: | ---: |"]
        for name in largest:
            (na, ta), (nb, tb) = a.get(name, (0, 0)), b.get(name, (0, 0))
            lines.append(f"| `{name}` | {ta * 1e6:.2f} | {tb * 1e6:.2f} | {delta[name] * 1e6:+.2f} | {na:g} | {nb:g} |")
    for device, (_, rows, _) in results.items():
        lines += [
            "",
            f"## {device}: largest self time per call",
            "",
            "| entry | self us | calls |",
            "| --- | ---: | ---: |",
        ]
        for name, (n, t) in sorted(rows.items(), key=lambda item: -item[1][1])[:top]:
            lines.append(f"| `{name}` | {t * 1e6:.2f} | {n:g} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="flagos,cuda", help="under test first, then the native reference")
    parser.add_argument("--workload", default="small-mlp", choices=WORKLOADS)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--mode", default="compiled", choices=("compiled", "eager"))
    parser.add_argument("--small", action="store_true", help="the workload's small size (any machine)")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10, help="turns each device takes (calls split among them)")
    parser.add_argument("--top", type=int, default=25, help="entries per table")
    parser.add_argument("--out", default="reports/call-profile.md")
    options = parser.parse_args(argv)
    devices = [d.strip() for d in options.devices.split(",") if d.strip()]
    for device in devices:
        try:
            torch.device(device)
        except RuntimeError as error:
            parser.error(f"--devices: {error}")
    workload = build_workload(options.workload, small=options.small)
    dtype = getattr(torch, options.dtype)
    with torch.no_grad():
        calls_by_device = {device: call_of(workload, device, dtype, options.mode) for device in devices}
        results = profile_interleaved(calls_by_device, options.calls, options.warmup, options.rounds)
    text = report(results, options.workload, options.dtype, options.mode, options.calls, options.top)
    Path(options.out).parent.mkdir(parents=True, exist_ok=True)
    Path(options.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
