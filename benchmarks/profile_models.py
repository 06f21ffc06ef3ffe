"""Where a workload's time goes, on flagos next to a native device: torch.profiler.

    python benchmarks/profile_models.py --workload qwen3 --devices flagos,cuda --out reports/profile.md

For each device and mode (eager, compiled, reduce-overhead): wall time per call, the device
kernels per call and their summed time (wall well above the kernels: the call
is host-bound), the kernels grouped by name, and the aten ops with the most
host time. A gap between the flagos and the native column is made of the rows
that differ. Kernel rows need a device the profiler sees (CUDA, through CUPTI:
the cuda accelerator's kernels are CUDA kernels); on cpu only host rows show.
"""

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compile import KINDS as MODES
from bench_compile import input_on, load_flagos_if_named, synchronize
from bench_models import WORKLOADS, build_workload

TOP = 12
COMPILE_MODES = {"compiled": "default", "reduce-overhead": "reduce-overhead"}  # torch.compile's mode=


def device_kernels(prof):
    """{kernel name: (count, ns)}, largest first, from the trace's device events.

    Read from the raw kineto events rather than key_averages(): the averages
    report device time only for the profiler's "use_device", which follows
    the process's accelerator (flagos, a PrivateUse1 device, once torch_fl is
    loaded), so CUDA kernels showed 0 ms there.
    """
    kernels = {}
    for e in prof.profiler.kineto_results.events():
        if e.device_type() not in (DeviceType.CUDA, DeviceType.PrivateUse1) or e.duration_ns() <= 0:
            continue
        count, ns = kernels.get(e.name(), (0, 0))
        kernels[e.name()] = (count + 1, ns + e.duration_ns())
    return dict(sorted(kernels.items(), key=lambda kv: kv[1][1], reverse=True))


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
    # Every host-side row (aten ops, CUDA runtime calls such as cudaLaunchKernel
    # and cudaStreamSynchronize, Triton launches): what a gap between devices is made of.
    host = {
        e.key: (e.count / calls, e.self_cpu_time_total / 1e3 / calls)
        for e in prof.key_averages()
        if e.self_cpu_time_total > 0
    }
    kernels = {k: (c / calls, ns / 1e6 / calls) for k, (c, ns) in device_kernels(prof).items()}
    return {"wall_ms": wall_ms, "host": host, "kernels": kernels}


def kernel_totals(r):
    """(kernel ms, launches) per call."""
    return sum(t for _, t in r["kernels"].values()), sum(c for c, _ in r["kernels"].values())


def report(name, dtype, results):
    lines = [f"## {name}, {dtype}", ""]
    lines += ["| device | mode | wall ms/call | kernel ms/call | launches/call |", "| --- | --- | --- | --- | --- |"]
    for (device, mode), r in results.items():
        kernel_ms, launches = kernel_totals(r)
        lines.append(f"| {device} | {mode} | {r['wall_ms']:.3f} | {kernel_ms:.3f} | {launches:.0f} |")
    for (device, mode), r in results.items():
        top_kernels = list(r["kernels"].items())[:TOP]  # largest first
        ops = sorted((k for k in r["host"] if k.startswith("aten::")), key=lambda k: r["host"][k][1], reverse=True)
        lines += ["", f"### {device} {mode}: kernels (per call)", "", "| kernel | count | ms |", "| --- | --- | --- |"]
        lines += [f"| `{k[:90]}` | {c:.1f} | {t:.3f} |" for k, (c, t) in top_kernels]
        lines += ["", f"### {device} {mode}: aten ops by host time (per call)", "", "| op | count | self ms |"]
        lines += ["| --- | --- | --- |"] + [
            f"| `{k}` | {r['host'][k][0]:.1f} | {r['host'][k][1]:.3f} |" for k in ops[:TOP]
        ]
    for (device, mode), r in results.items():
        native = next((n for (d, m), n in results.items() if m == mode and d != "flagos"), None)
        if device == "flagos" and native is not None:
            lines += host_difference(mode, r["host"], native["host"])
    return "\n".join(lines) + "\n"


def by_role(rows):
    """Rows keyed without the graph's cache key, which differs between devices for the same role."""
    merged = {}
    for key, (count, ms) in rows.items():
        key = re.sub(r"CompiledFxGraph \w+", "CompiledFxGraph", key)
        c, t = merged.get(key, (0, 0))
        merged[key] = (c + count, t + ms)
    return merged


def host_difference(mode, flagos, native):
    """The host rows (self time, per call) where flagos spends more than the native device."""
    flagos, native = by_role(flagos), by_role(native)
    keys = set(flagos) | set(native)
    diff = sorted(keys, key=lambda k: flagos.get(k, (0, 0))[1] - native.get(k, (0, 0))[1], reverse=True)
    total = sum(t for _, t in flagos.values()) - sum(t for _, t in native.values())
    lines = ["", f"### flagos {mode} against native: host self time by row (total {total:+.3f} ms per call)", ""]
    lines += ["| row | flagos count | native count | flagos ms | native ms | difference ms |"]
    lines += ["| --- | --- | --- | --- | --- | --- |"]
    for k in diff[:TOP]:
        (fc, ft), (nc, nt) = flagos.get(k, (0, 0)), native.get(k, (0, 0))
        lines.append(f"| `{k[:80]}` | {fc:.1f} | {nc:.1f} | {ft:.3f} | {nt:.3f} | {ft - nt:+.3f} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="qwen3", help=f"comma list of {', '.join(WORKLOADS)}")
    parser.add_argument("--devices", default="flagos,cuda")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--modes", default="eager,compiled", help=f"comma list of {', '.join(MODES)}")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("reports/profile.md"))
    args = parser.parse_args()
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))}; choose from {', '.join(MODES)}")
    load_flagos_if_named(args.devices.split(","))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text, rows = "", {}
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
                    fn = model if mode == "eager" else torch.compile(model, mode=COMPILE_MODES[mode])
                    with torch.no_grad():
                        results[(device, mode)] = profile_calls(fn, x, device, args.calls)
                    kernel_ms, launches = kernel_totals(results[(device, mode)])
                    print(
                        f"{name} {dtype_name} {device} {mode}: wall {results[(device, mode)]['wall_ms']:.3f} ms, "
                        f"kernels {kernel_ms:.3f} ms, {launches:.0f} launches",
                        file=sys.stderr,
                        flush=True,
                    )
                workload.model.to("cpu")
            text += report(name, dtype_name, results)
            args.out.write_text(text)  # after every workload: a killed run keeps what it measured
            rows[f"{name} {dtype_name}"] = {
                f"{device} {mode}": {"host": r["host"], "kernels": r["kernels"]}
                for (device, mode), r in results.items()
            }
            args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(text)


if __name__ == "__main__":
    main()
