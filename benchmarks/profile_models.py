"""Where a workload's time goes, on flagos next to a native device: torch.profiler.

    python benchmarks/profile_models.py --workload qwen3 --devices flagos,cuda --out reports/profile.md

For each device and mode (eager, compiled): wall time per call, the device
kernels per call and their summed time (wall well above the kernels: the call
is host-bound), the kernels grouped by name, and the aten ops with the most
host time. A gap between the flagos and the native column is made of the rows
that differ. Kernel rows need a device the profiler sees (CUDA, through CUPTI:
the cuda accelerator's kernels are CUDA kernels); on cpu only host rows show.
"""

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compile import input_on, synchronize  # noqa: E402
from bench_models import WORKLOADS, build_workload  # noqa: E402

TOP = 12


def device_time(event):
    # self_device_time_total since torch 2.4; the CUDA spelling before
    return getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)


def profile_calls(fn, x, device, calls):
    for _ in range(3):  # warm-up (and, compiled, the compile itself)
        fn(x)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    synchronize(device)
    wall_ms = (time.perf_counter() - start) * 1e3 / calls
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn(x)
        synchronize(device)
    events = prof.key_averages()
    kernels = sorted(
        (e for e in events if e.device_type == DeviceType.CUDA and device_time(e) > 0),
        key=device_time,
        reverse=True,
    )
    ops = sorted((e for e in events if e.key.startswith("aten::")), key=lambda e: e.self_cpu_time_total, reverse=True)
    return {
        "wall_ms": wall_ms,
        "kernel_ms": sum(device_time(e) for e in kernels) / 1e3 / calls,
        "launches": sum(e.count for e in kernels) / calls,
        "kernels": [(e.key[:90], e.count / calls, device_time(e) / 1e3 / calls) for e in kernels[:TOP]],
        "host_ops": [(e.key, e.count / calls, e.self_cpu_time_total / 1e3 / calls) for e in ops[:TOP]],
    }


def report(name, dtype, results):
    lines = [f"## {name}, {dtype}", ""]
    lines += ["| device | mode | wall ms/call | kernel ms/call | launches/call |", "| --- | --- | --- | --- | --- |"]
    for (device, mode), r in results.items():
        lines.append(f"| {device} | {mode} | {r['wall_ms']:.3f} | {r['kernel_ms']:.3f} | {r['launches']:.0f} |")
    for (device, mode), r in results.items():
        lines += ["", f"### {device} {mode}: kernels (per call)", "", "| kernel | count | ms |", "| --- | --- | --- |"]
        lines += [f"| `{k}` | {c:.1f} | {t:.3f} |" for k, c, t in r["kernels"]]
        lines += ["", f"### {device} {mode}: aten ops by host time (per call)", "", "| op | count | self ms |"]
        lines += ["| --- | --- | --- |"] + [f"| `{k}` | {c:.1f} | {t:.3f} |" for k, c, t in r["host_ops"]]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="qwen3", help=f"comma list of {', '.join(WORKLOADS)}")
    parser.add_argument("--devices", default="flagos,cuda")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("reports/profile.md"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = ""
    for name in args.workloads.split(","):
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            workload = build_workload(name, small=args.small)
            results = {}
            for device in args.devices.split(","):
                model = workload.model.to(device=device, dtype=dtype)
                x = input_on(workload.example_input, device, dtype)
                for mode in args.modes.split(","):
                    torch._dynamo.reset()
                    fn = torch.compile(model) if mode == "compiled" else model
                    with torch.no_grad():
                        results[(device, mode)] = profile_calls(fn, x, device, args.calls)
                    r = results[(device, mode)]
                    print(
                        f"{name} {dtype_name} {device} {mode}: wall {r['wall_ms']:.3f} ms, kernels "
                        f"{r['kernel_ms']:.3f} ms, {r['launches']:.0f} launches",
                        file=sys.stderr,
                        flush=True,
                    )
                workload.model.to("cpu")
            text += report(name, dtype_name, results)
            args.out.write_text(text)  # after every workload: a killed run keeps what it measured
    print(text)


if __name__ == "__main__":
    main()
