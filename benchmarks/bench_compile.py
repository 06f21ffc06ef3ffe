"""The project's benchmark set: compiled vs eager on flagos and on a native device.

    python benchmarks/bench_compile.py --devices flagos,cuda --json reports/bench_compile.json
    python benchmarks/bench_compile.py --devices flagos,cpu --small     # any machine, a few minutes
    python benchmarks/bench_compile.py --compile-times --workloads qwen3 --devices flagos,cuda --compile-rounds 2
    python benchmarks/bench_compile.py --devices flagos,cuda --reduce-overhead \
        --json reports/side-by-side.json --markdown reports/side-by-side.md   # the GPU's targets table

One command measures, for each workload (bench_models.py) and dtype, on each
device: eager and compiled time per call (timing events, torch.Event, after
warm-up, median of runs adaptive to --budget, sampled round-robin across
devices and modes so clock drift hits all alike), the first compiled call, and
compiled-vs-eager numerics on the same weights and inputs. Models are built on
CPU once with a fixed seed and copied to each device. Also measured: device-to-
device copy bandwidth (the elementwise chain is rated against it) and, for
qwen3, the wall time of a first compiled call with fork workers, subprocess
workers and compile_threads=1, each in a fresh process with fresh inductor and
Triton caches, the devices taking turns per worker set-up (--compile-rounds N:
each device's median of N). The first device is the one under test, the second the native
reference; the project's targets are checked against them.

Results go to --json (written after every step, so a killed run keeps what it
measured) and the Markdown tables go to stdout (and --markdown); progress goes to stderr. A
benchmark, not a test: nothing asserts, a failing step is recorded with its
error and the rest still run, and the exit status is 0 unless the script itself
crashed. --compile-times alone runs only the compile-time study.
"""

import argparse
import copy
import dataclasses
import functools
import gc
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import WORKLOADS, build_workload, transformers_version

REPO = Path(__file__).resolve().parent.parent

# Measured on one A100 when the project began, fp32, compiled over eager on flagos.
A100_SPEEDUPS = {"qwen3": 2.24, "elementwise": 9.18, "transformer": 1.41, "mlp": 1.06}
# flagos over native cuda, every workload and dtype, from one interleaved run
COMPILED_OVER_NATIVE_MAX = 1.02
EAGER_OVER_NATIVE_MAX = 1.05
REDUCE_OVERHEAD_OVER_NATIVE_MAX = 1.05  # CUDA graphs (mode="reduce-overhead"), on the launch-bound rows
REDUCE_OVERHEAD_WORKLOADS = ("small-mlp", "qwen3-short")
COMPILE_TIME_OVER_NATIVE_MAX = 1.05  # fresh-cache first compiled call, parallel and serial
COPY_BANDWIDTH_FRACTION_MIN = 0.80  # elementwise chain
PARALLEL_COMPILE_SPEEDUP_MIN = 1.3
# compiled-vs-eager agreement reported per dtype (rtol = atol); the first A100 measurements used 2e-2 for fp32.
TOLERANCES = {"float32": 2e-2, "bfloat16": 1e-1, "float16": 5e-2}
WORKER_RUNS = {  # label -> environment of the child; the rest of the environment is cleaned of these keys
    "fork": {"TORCHINDUCTOR_WORKER_START": "fork"},
    "subprocess": {"TORCHINDUCTOR_WORKER_START": "subprocess"},
    "serial (compile_threads=1)": {"TORCHINDUCTOR_COMPILE_THREADS": "1"},
}
WORKER_ENV_KEYS = ("TORCHINDUCTOR_WORKER_START", "TORCHINDUCTOR_COMPILE_THREADS", "TORCHINDUCTOR_CACHE_DIR")


@dataclasses.dataclass
class Settings:
    budget_s: float  # timed seconds per measurement, spread over adaptive iterations
    min_iters: int
    max_iters: int
    warmup: int
    fixed_iters: int | None  # --iters: a fixed count instead of the budget


class Deadline:
    def __init__(self, seconds):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def passed(self):
        return time.monotonic() > self.end

    def remaining(self):
        return max(0.0, self.end - time.monotonic())

    def reason(self):
        return f"skipped: the --time-limit of {self.seconds:.0f} s was reached"


@dataclasses.dataclass
class Session:
    """What every step of a run needs: the options, how to time, when to stop, and the report so far."""

    args: argparse.Namespace
    settings: Settings
    deadline: Deadline
    report: dict

    def save(self):
        """Write the report as it stands: a run killed later keeps what it measured."""
        self.report["elapsed_s"] = time.monotonic() - _START
        self.args.json.parent.mkdir(parents=True, exist_ok=True)
        self.args.json.write_text(json.dumps(jsonable(self.report), indent=2) + "\n")


_START = time.monotonic()


def log(message):
    print(f"[{time.monotonic() - _START:7.1f} s] {message}", file=sys.stderr, flush=True)


def describe(error):
    return f"{type(error).__name__}: {error}"[:2000]


def attempt(errors, step, fn):
    """fn(), or None after recording its error under errors[step]: one failure must not stop the rest."""
    try:
        return fn()
    except Exception as error:  # a benchmark records failures instead of stopping on them
        errors[step] = describe(error)
        errors[f"{step} traceback"] = traceback.format_exc()[-4000:]
        log(f"  {step} failed: {errors[step].splitlines()[0][:300]}")
        return None


# --- devices and timing ---


def load_flagos_if_named(devices) -> None:
    """Loads torch_fl where ``devices`` name a flagos one, before torch.device("flagos") can parse: torch's
    entry point only arms flagos by default."""
    if any(device.startswith("flagos") for device in devices):
        import torch_fl  # noqa: F401


def device_function(device, name):
    """torch.<device type>.<name> (torch.cuda.synchronize, torch.flagos.Event ...), or None where missing."""
    try:
        module = torch.get_device_module(torch.device(device).type)
    except RuntimeError:  # a device type without a torch.<type> module (meta)
        return None
    return getattr(module, name, None)


def call_device_function(device, name):
    """torch.<device type>.<name>(device) where the device has it; None otherwise."""
    function = device_function(device, name)
    return None if function is None else function(torch.device(device))


def synchronize(device):
    call_device_function(device, "synchronize")


def release_memory(device):
    """Drop compiled graphs and cached blocks so the next workload starts from an empty device."""
    torch._dynamo.reset()
    gc.collect()
    empty_cache = device_function(device, "empty_cache")
    if empty_cache is not None:
        empty_cache()


def timing_event_makers(device):
    """(label, maker) of each kind of timing event the device can time with, best first.

    torch.Event first: recording it stays in C++ on every device, so the instrument costs
    the devices compared the same. A device module's own Event class (torch.cuda.Event)
    does Python work in record() that a host-bound call's timing would include.
    """
    makers = {
        "torch.Event": lambda: torch.Event(device=device, enable_timing=True),
        f"torch.{torch.device(device).type}.Event": lambda: device_function(device, "Event")(enable_timing=True),
    }
    for label, make in makers.items():
        try:  # torch.Event on cpu, say, cannot time; a CPU wheel's torch.cuda.Event is a dummy
            start, end = make(), make()
            start.record()
            end.record()
            end.synchronize()
            start.elapsed_time(end)
        except Exception:
            continue
        yield label, make


def timing_events(device):
    """A maker of timing events for the device (None where it cannot time: cpu)."""
    return next((make for _, make in timing_event_makers(device)), None)


def sample_times_ms(fn, device, iters):
    """Milliseconds of each of iters calls: device events where the device has them, else the wall clock."""
    make_event = timing_events(device)
    if make_event is None:
        samples = []
        for _ in range(iters):
            synchronize(device)
            start = time.perf_counter()
            fn()
            synchronize(device)
            samples.append((time.perf_counter() - start) * 1000)
        return samples
    # No synchronisation between calls: the device's queue stays as full as in real use.
    pairs = [(make_event(), make_event()) for _ in range(iters)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    synchronize(device)
    return [start.elapsed_time(end) for start, end in pairs]


def iterations_for(probe_ms, settings):
    if settings.fixed_iters:
        return settings.fixed_iters
    wanted = int(settings.budget_s * 1000 / max(probe_ms, 1e-3))
    return max(settings.min_iters, min(settings.max_iters, wanted))


def warm_up_and_probe(fn, device, settings):
    """fn()'s median milliseconds over 3 calls, after the warm-up calls."""
    for _ in range(settings.warmup):
        fn()
    return statistics.median(sample_times_ms(fn, device, 3))


def summarize(samples):
    return {
        "median_ms": statistics.median(samples),
        "min_ms": min(samples),
        "max_ms": max(samples),
        "iters": len(samples),
    }


def measure_ms(fn, device, settings):
    """Median (and spread) of fn()'s time after warm-up, with as many runs as the budget allows."""
    iters = iterations_for(warm_up_and_probe(fn, device, settings), settings)
    return summarize(sample_times_ms(fn, device, iters))


def peak_memory_gib(device):
    peak = call_device_function(device, "max_memory_allocated")
    return None if peak is None else peak / 2**30


# --- copy bandwidth ---


def copy_bandwidth(device, nbytes, settings):
    """Device-to-device copy_ of nbytes: GB/s counting the bytes read and the bytes written."""
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    timing = measure_ms(lambda: dst.copy_(src), device, settings)
    return {"bytes_per_tensor": nbytes, "gbps": 2 * nbytes / (timing["median_ms"] * 1e-3) / 1e9, **timing}


def measure_copy_bandwidths(session):
    """Per device: a large copy (the reference for the targets) and one of the elementwise chain's size."""
    sizes = {"large": (64 if session.args.small else 1024) << 20}
    if "elementwise" in session.args.workloads:
        side = build_workload("elementwise", session.args.small).example_input.shape[0]
        sizes["elementwise size"] = side * side * 4
    results = {}
    for device in session.args.devices:
        results[device] = {}
        for label, nbytes in sizes.items():
            if session.deadline.passed():
                results[device][label] = {"skipped": session.deadline.reason()}
                continue
            errors = {}
            measured = attempt(errors, "copy", lambda: copy_bandwidth(device, nbytes, session.settings))
            release_memory(device)
            results[device][label] = measured or errors
            if measured:
                log(f"copy bandwidth on {device} ({label}, {nbytes >> 20} MiB): {measured['gbps']:.1f} GB/s")
    return results


# --- compiled vs eager ---


def input_on(example_input, device, dtype):
    x = example_input.to(device)
    return x.to(dtype) if x.is_floating_point() else x


def inductor_metrics():
    from torch._inductor import metrics

    return {"kernels_generated": getattr(metrics, "generated_kernel_count", None)}


def first_compiled_call(compiled, x, device):
    """(output, seconds, inductor metrics) of the call that compiles."""
    from torch._inductor import metrics

    metrics.reset()
    start = time.perf_counter()
    out = compiled(x)
    synchronize(device)
    return out, time.perf_counter() - start, inductor_metrics()


def compare_outputs(compiled_out, eager_out, dtype_name):
    """Compiled vs eager: max abs error, and max rel error as max abs error over the largest |eager|."""
    compiled_out, eager_out = compiled_out.float(), eager_out.float()
    max_abs = (compiled_out - eager_out).abs().max().item()
    scale = eager_out.abs().max().item()
    tolerance = TOLERANCES.get(dtype_name, 2e-2)
    return {
        "max_abs_error": max_abs,
        "max_rel_error": max_abs / scale if scale else None,
        "tolerance": tolerance,
        "matches_eager": bool(torch.allclose(compiled_out, eager_out, rtol=tolerance, atol=tolerance)),
    }


def set_up_on_device(session, workload, dtype_name, device):
    """(record, eager output on CPU, {kind: fn}) of one workload on one device: first call and numerics.

    The timed functions come back untimed: bench_workload samples every device's in turn.
    """
    errors = {}
    record = {"errors": errors}
    dtype = getattr(torch, dtype_name)
    model = copy.deepcopy(workload.model).to(device=device, dtype=dtype)
    x = input_on(workload.example_input, device, dtype)
    compiled = torch.compile(model, backend=session.args.backend)
    timed = {}
    if session.args.reduce_overhead:
        with torch.no_grad():
            reduce_overhead_first_call(session, model, x, device, record, errors, timed)
    with torch.no_grad():
        eager_out = attempt(errors, "eager", lambda: model(x))
        if eager_out is not None:
            timed["eager"] = lambda: model(x)
        first = attempt(errors, "compile", lambda: first_compiled_call(compiled, x, device))
        if first is not None:
            compiled_out, record["first_call_s"], metrics = first
            record.update(metrics)
            timed["compiled"] = lambda: compiled(x)
        if eager_out is not None and first is not None:
            numerics = attempt(errors, "numerics", lambda: compare_outputs(compiled_out, eager_out, dtype_name))
            record["numerics"] = numerics
    eager_on_cpu = None if eager_out is None else attempt(errors, "eager output", lambda: eager_out.float().cpu())
    return record, eager_on_cpu, timed


def reduce_overhead_first_call(session, model, x, device, record, errors, timed):
    """mode="reduce-overhead" (CUDA graphs): first calls, and whether inductor skipped the graphs.

    inductor falls back to plain compiled code, with a warning and a counter, where it cannot
    record a CUDA graph; the counter tells a real CUDA-graph row from a plain compiled one."""
    from torch._dynamo.utils import counters

    compiled = torch.compile(model, backend=session.args.backend, mode="reduce-overhead")
    skips_before = counters["inductor"]["cudagraph_skips"]
    # cudagraph trees record on the second and third calls: the first three calls are warm-up
    first = attempt(errors, "reduce-overhead compile", lambda: [compiled(x) for _ in range(3)])
    if first is None:
        return
    synchronize(device)
    record["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"] - skips_before
    timed["reduce-overhead"] = lambda: compiled(x)


# Rounds of interleaved sampling: every (device, kind) is sampled in each round, so a drift of
# the host's or the GPU's clocks during the run lands on all of them alike. Host-bound workloads
# (Qwen3 at 1 x 512 in bf16, the small MLP) showed ratios that contradicted each other when each
# device was timed in one block after the other (docs/results/h200-log.md, third session). Twenty
# short rounds rather than five long ones: the H200 host's slow spells last seconds and, with five,
# still fell on one device's samples more than on the other's (fifth session).
ROUNDS = 20


def measure_interleaved(timed, errors, settings):
    """{(device, kind): timing} of every timed function, sampled round-robin after a warm-up."""
    iters = {}
    for (device, kind), fn in timed.items():
        probe = attempt(errors[device], f"{kind} timing", lambda: warm_up_and_probe(fn, device, settings))
        if probe is not None:
            iters[(device, kind)] = max(1, -(-iterations_for(probe, settings) // ROUNDS))
    samples = {key: [] for key in iters}
    for _ in range(ROUNDS):
        for key in list(samples):
            device, kind = key
            got = attempt(errors[device], f"{kind} timing", lambda: sample_times_ms(timed[key], device, iters[key]))
            if got is None:
                del samples[key]
            else:
                samples[key] += got
    return {key: {**summarize(values), "rounds": ROUNDS} for key, values in samples.items()}


KINDS = ("eager", "compiled", "reduce-overhead")


def median_ms(record, kind):
    return (record.get(kind) or {}).get("median_ms")


def min_ms(record, kind):
    return (record.get(kind) or {}).get("min_ms")


def ratio(numerator, denominator):
    return None if numerator is None or not denominator else numerator / denominator


def workload_ratios(per_device, devices):
    """Compiled-over-eager speed-up per device, and the device under test over the native reference."""
    ratios = {
        f"speedup {device}": ratio(median_ms(rec, "eager"), median_ms(rec, "compiled"))
        for device, rec in per_device.items()
    }
    if len(devices) > 1:
        test, native = per_device.get(devices[0], {}), per_device.get(devices[1], {})
        for kind in KINDS:
            ratios[f"{kind} test/native"] = ratio(median_ms(test, kind), median_ms(native, kind))
        # Best calls: on a host-bound workload, the cost of the work itself, without the machine's noise.
        ratios["compiled test/native, best"] = ratio(min_ms(test, "compiled"), min_ms(native, "compiled"))
        ratios["eager test/native, best"] = ratio(min_ms(test, "eager"), min_ms(native, "eager"))
    return ratios


def chain_bandwidth(workload, dtype_name, per_device, copy_bandwidths):
    """The compiled chain's achieved GB/s (one read and one write of the matrix) and its fraction of copy GB/s."""
    bytes_per_call = workload.elements_moved * getattr(torch, dtype_name).itemsize
    results = {}
    for device, record in per_device.items():
        compiled_ms = median_ms(record, "compiled")
        copy_gbps = ((copy_bandwidths.get(device) or {}).get("large") or {}).get("gbps")
        gbps = None if compiled_ms is None else bytes_per_call / (compiled_ms * 1e-3) / 1e9
        results[device] = {
            "bytes_per_call": bytes_per_call,
            "gbps": gbps,
            "fraction_of_copy": ratio(gbps, copy_gbps),
            "kernels_generated": record.get("kernels_generated"),
        }
    return results


def bench_workload(session, workload, dtype_name):
    """All devices for one workload and dtype, then the ratios between them."""
    result = {
        "workload": workload.name,
        "dtype": dtype_name,
        "description": workload.description,
        "implementation": workload.implementation,
        "devices": {},
    }
    devices, eager_outputs, timed = session.args.devices, {}, {}
    for device in devices:
        if session.deadline.passed():
            result["devices"][device] = {"skipped": session.deadline.reason()}
            continue
        log(f"{workload.name} {dtype_name} on {device}")
        errors = {}
        call_device_function(device, "reset_peak_memory_stats")
        set_up = attempt(errors, "setup", lambda: set_up_on_device(session, workload, dtype_name, device))
        record, eager_outputs[device], functions = set_up or ({"errors": errors}, None, {})
        result["devices"][device] = record
        timed.update({(device, kind): fn for kind, fn in functions.items()})
    errors = {device: result["devices"][device]["errors"] for device, _ in timed}
    with torch.no_grad():
        timings = measure_interleaved(timed, errors, session.settings)
    for device, record in result["devices"].items():
        if "skipped" in record:
            continue
        for kind in KINDS:
            if (device, kind) in timings:
                record[kind] = timings[(device, kind)]
        record["peak_memory_gib"] = peak_memory_gib(device)
        log(f"  {device}: eager {fmt(median_ms(record, 'eager'))} ms, compiled {fmt(median_ms(record, 'compiled'))} ms")
    del timed, timings
    for device in devices:  # the models, compiled graphs and outputs are garbage now
        release_memory(device)
    result["devices"] = {
        device: {key: value for key, value in record.items() if value is not None}
        for device, record in result["devices"].items()
    }
    result["ratios"] = workload_ratios(result["devices"], devices)
    if len(devices) > 1 and all(eager_outputs.get(device) is not None for device in devices[:2]):
        # Same weights and inputs on both devices: their eager outputs should agree too.
        difference = (eager_outputs[devices[0]] - eager_outputs[devices[1]]).abs().max().item()
        result["eager test vs native max_abs_error"] = difference
    if workload.elements_moved:
        result["bandwidth"] = chain_bandwidth(workload, dtype_name, result["devices"], session.report["copy_bandwidth"])
    return result


def bench_dtypes(session, name):
    """One workload, built once on CPU, in every dtype; its CPU master copy is freed on return."""
    errors = {}
    build = functools.partial(build_workload, name, session.args.small, qwen3_impl=session.args.qwen3_impl)
    workload = attempt(errors, "build", build)
    for dtype_name in session.args.dtypes:
        result = {"workload": name, "dtype": dtype_name}
        if workload is None:
            result["errors"] = dict(errors)
        elif session.deadline.passed():
            result["skipped"] = session.deadline.reason()
        else:
            # Wrapped as a whole too, so a bug in the bookkeeping costs one row, not the run.
            measured = attempt(errors, "benchmark", lambda: bench_workload(session, workload, dtype_name))
            result = measured or {**result, "errors": dict(errors)}
        session.report["workloads"].append(result)
        session.save()


def run_workloads(session):
    for name in session.args.workloads:
        bench_dtypes(session, name)
        gc.collect()  # the master copy of the last workload (2.4 GB for qwen3)


# --- compile wall time by worker start method ---


def child_command(args, workload, device):
    command = [sys.executable, __file__, "--child-first-call", "--workloads", workload, "--devices", device]
    command += ["--dtypes", args.dtypes[0], "--backend", args.backend, "--qwen3-impl", args.qwen3_impl]
    return command + (["--small"] if args.small else []) + (["--train"] if args.train else [])


def child_environment(extra, cache):
    env = {key: value for key, value in os.environ.items() if key not in WORKER_ENV_KEYS}
    return {**env, "TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": os.path.join(cache, "triton"), **extra}


def timed_child(command, env, timeout_s):
    """One fresh process: its JSON result plus the process wall time, or the error."""
    start = time.perf_counter()
    # A session of its own, so a timeout ends its compile workers too (fork workers would outlive it).
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"error": f"timed out after {timeout_s:.0f} s"}
    wall = time.perf_counter() - start
    if child.returncode != 0:
        return {"error": f"exit status {child.returncode}", "stderr": stderr[-4000:], "process_s": wall}
    try:
        return {**json.loads(stdout.strip().splitlines()[-1]), "process_s": wall}
    except (ValueError, IndexError):
        return {"error": "no JSON result", "stdout": stdout[-2000:], "stderr": stderr[-2000:]}


def compile_time_sample(session, workload, device, label):
    """One first compiled call in a fresh process on fresh caches, with the worker set-up ``label``."""
    args, deadline = session.args, session.deadline
    if deadline.passed():
        return {"skipped": deadline.reason()}
    with tempfile.TemporaryDirectory(prefix="bench-compile-cache-") as cache:
        env = child_environment(WORKER_RUNS[label], cache)
        timeout = min(args.child_timeout, deadline.remaining())
        sample = timed_child(child_command(args, workload, device), env, timeout)
    outcome = fmt(sample["first_call_s"]) + " s" if "first_call_s" in sample else sample["error"]
    log(f"compile time of {workload} on {device}, {label}: {outcome}")
    return sample


def median_sample(samples):
    """The run with the median first-call time (the lower middle one of an even count), with every
    sample's time beside it and how many failed or were skipped by the time limit; without a timed
    run, the first failure."""
    timed = sorted((s for s in samples if "first_call_s" in s), key=lambda s: s["first_call_s"])
    if not timed:
        return samples[0] if samples else {"skipped": "not run"}
    middle = timed[(len(timed) - 1) // 2]
    return {
        **middle,
        "first_call_samples_s": [s["first_call_s"] for s in timed],
        "failed_samples": sum("error" in s for s in samples),
        "skipped_samples": sum("skipped" in s for s in samples),
    }


def compile_time_study(session, workload, device, samples):
    runs = {label: median_sample(samples[label]) for label in WORKER_RUNS}
    serial = runs["serial (compile_threads=1)"].get("first_call_s")
    speedups = {f"serial/{label}": ratio(serial, runs[label].get("first_call_s")) for label in ("fork", "subprocess")}
    return {
        "workload": workload,
        "device": device,
        "dtype": session.args.dtypes[0],
        "train": session.args.train,
        "rounds": session.args.compile_rounds,
        "runs": runs,
        **speedups,
    }


def compile_times(session, workloads, devices):
    """Fresh-cache compile times, interleaved: for each worker set-up the devices take turns (in
    reverse order every other round), so a slow spell of a shared machine falls on all of them
    alike; each device's figure is its median over ``--compile-rounds`` rounds."""
    for workload in workloads:
        samples = {device: {label: [] for label in WORKER_RUNS} for device in devices}
        for round_index in range(session.args.compile_rounds):
            order = devices if round_index % 2 == 0 else devices[::-1]
            for label in WORKER_RUNS:
                for device in order:
                    samples[device][label].append(compile_time_sample(session, workload, device, label))
                studies = [compile_time_study(session, workload, device, samples[device]) for device in devices]
                session.report["compile_times"] = [
                    s for s in session.report["compile_times"] if s["workload"] != workload
                ] + studies
                session.save()


def child_first_call(args):
    """In a fresh process: build, compile and time the first call; print one JSON line."""
    from torch._inductor import config

    device, dtype_name = args.devices[0], args.dtypes[0]
    workload = build_workload(args.workloads[0], args.small, qwen3_impl=args.qwen3_impl)
    model = workload.model.to(device=device, dtype=getattr(torch, dtype_name))
    x = input_on(workload.example_input, device, getattr(torch, dtype_name))
    compiled = torch.compile(model, backend=args.backend)
    if args.train:
        model.train()
        start = time.perf_counter()
        compiled(x).float().sum().backward()
    else:
        start = time.perf_counter()
        with torch.no_grad():
            compiled(x)
    synchronize(device)
    first_call_s = time.perf_counter() - start
    # torch_fl may switch subprocess workers to fork where a bare worker cannot see flagos: say which ran.
    workers = getattr(config, "worker_start_method", None) if config.compile_threads > 1 else "in-process"
    result = {
        "first_call_s": first_call_s,
        "worker_start_method": workers,
        "compile_threads": config.compile_threads,
        **inductor_metrics(),
    }
    print(json.dumps(result))


# --- targets ---


def target(name, value, threshold, higher_is_better, unit="x"):
    """A target with its outcome; margin_pct > 0 is the room to spare, < 0 how far it was missed."""
    outcome = {"target": name, "value": value, "threshold": threshold, "higher_is_better": higher_is_better}
    if value is None:
        return {**outcome, "met": None, "margin_pct": None, "unit": unit}
    margin = (value - threshold) if higher_is_better else (threshold - value)
    return {**outcome, "met": margin >= 0, "margin_pct": 100 * margin / threshold, "unit": unit}


def workload_targets(result, test, native):
    name, dtype, ratios = result["workload"], result["dtype"], result.get("ratios", {})
    label = f"{name} {dtype}"
    targets = []
    if native:
        value = ratios.get("compiled test/native")
        targets.append(target(f"{label}: compiled {test} / compiled {native}", value, COMPILED_OVER_NATIVE_MAX, False))
        value = ratios.get("eager test/native")
        targets.append(target(f"{label}: eager {test} / eager {native}", value, EAGER_OVER_NATIVE_MAX, False))
        if name in REDUCE_OVERHEAD_WORKLOADS and "reduce-overhead test/native" in ratios:
            value = ratios["reduce-overhead test/native"]
            what = f"{label}: reduce-overhead {test} / reduce-overhead {native}"
            targets.append(target(what, value, REDUCE_OVERHEAD_OVER_NATIVE_MAX, False))
            record = result.get("devices", {}).get(test, {})
            speedup = ratio(median_ms(record, "eager"), median_ms(record, "reduce-overhead"))
            targets.append(target(f"{label}: eager / reduce-overhead on {test}", speedup, 1.0, True))
    if name in A100_SPEEDUPS and dtype == "float32":
        value = ratios.get(f"speedup {test}")
        targets.append(
            target(f"{label}: compiled/eager speed-up on {test} vs the A100 figure", value, A100_SPEEDUPS[name], True)
        )
    if "bandwidth" in result:
        value = (result["bandwidth"].get(test) or {}).get("fraction_of_copy")
        targets.append(target(f"{label}: {test} share of D2D copy GB/s", value, COPY_BANDWIDTH_FRACTION_MIN, True, "%"))
    return targets


def evaluate_targets(report, devices):
    test, native = devices[0], (devices[1] if len(devices) > 1 else None)
    targets = []
    for result in report["workloads"]:
        targets += workload_targets(result, test, native)
    for study in report["compile_times"]:
        for label in ("fork", "subprocess"):
            name = f"{study['workload']} compile on {study['device']}: serial / {label} workers"
            targets.append(target(name, study.get(f"serial/{label}"), PARALLEL_COMPILE_SPEEDUP_MIN, True))
    targets += compile_time_targets(report["compile_times"], test, native)
    return targets


def compile_time_targets(studies, test, native):
    """The device under test's fresh-cache compile time over the native device's, per worker set-up."""
    by_device = {(s["workload"], s["device"]): s for s in studies}
    targets = []
    for (workload, device), study in by_device.items():
        reference = by_device.get((workload, native))
        if device != test or reference is None:
            continue
        for label, run in study["runs"].items():
            value = ratio(run.get("first_call_s"), reference["runs"].get(label, {}).get("first_call_s"))
            name = f"{workload} compile, {label}: {test} / {native}"
            targets.append(target(name, value, COMPILE_TIME_OVER_NATIVE_MAX, False))
    return targets


# --- report ---


def jsonable(value):
    """JSON without NaN/Infinity (not JSON): non-finite floats become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return value


def git_commit():
    """HEAD, with "-dirty" when the tracked files differ from it (a copied tree under an old .git)."""
    try:
        command = ["git", "describe", "--always", "--dirty", "--abbrev=40"]
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def device_name(device):
    if torch.device(device).type == "cpu":
        return platform.processor() or platform.machine()
    name = call_device_function(device, "get_device_name")
    accelerator = device_function(device, "accelerator_name")  # torch.flagos: which accelerator backs it
    return f"{name} (accelerator {accelerator()})" if accelerator else name


def environment(args):
    from torch._inductor import config

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "transformers": transformers_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "git_commit": git_commit(),
        "devices": {device: attempt({}, "device name", lambda: device_name(device)) for device in args.devices},
        "inductor_compile_threads": config.compile_threads,
        "inductor_worker_start_method": getattr(config, "worker_start_method", None),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def fmt(value, unit=""):
    if value is None:
        return "–"
    if unit == "%":
        return f"{100 * value:.0f} %"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def table(headers, rows):
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def time_cell(record, kind):
    if "skipped" in record:
        return "skipped"
    value = median_ms(record, kind)
    if value is not None:
        return f"{value:.3g}"
    return "error" if record.get("errors") else "–"


def timing_section(report, devices):
    kinds = [k for k in KINDS if k != "reduce-overhead" or report["settings"].get("reduce_overhead")]
    headers = ["workload", "dtype"]
    for device in devices:
        headers += [f"{device} {kind}" for kind in kinds] + [f"{device} speed-up"]
    if len(devices) > 1:
        pair = f"{devices[0]}/{devices[1]}"
        headers += [f"{kind} {pair}" for kind in kinds]
        headers += [f"compiled {pair}, best", f"eager {pair}, best"]
    rows = []
    for result in report["workloads"]:
        row, ratios = [result["workload"], result["dtype"]], result.get("ratios", {})
        for device in devices:
            # A workload that failed to build or was skipped carries its errors or reason itself.
            record = result.get("devices", {}).get(device, result)
            speedup = fmt(ratios.get(f"speedup {device}"), "x")
            row += [time_cell(record, kind) for kind in kinds] + [speedup]
        if len(devices) > 1:
            row += [fmt(ratios.get(f"{kind} test/native"), "x") for kind in kinds]
            row += [fmt(ratios.get(f"{kind} test/native, best"), "x") for kind in ("compiled", "eager")]
        rows.append(row)
    note = "ms, median; speed-up = eager / compiled; best = ratio of the fastest calls"
    skipped_graphs = [
        f"- {result['workload']} {result['dtype']} on {device}: inductor skipped CUDA graphs "
        f"{record['cudagraph_skips']} time(s): its reduce-overhead row is plain compiled code"
        for result in report["workloads"]
        for device, record in result.get("devices", {}).items()
        if record.get("cudagraph_skips")
    ]
    return [f"## Time per call ({note})", ""] + table(headers, rows) + (["", *skipped_graphs] if skipped_graphs else [])


def ratio_table_section(report, devices):
    """The side-by-side table: test/native per workload, dtype and mode, one row per workload."""
    if len(devices) < 2 or not report["workloads"]:
        return []
    dtypes = list(dict.fromkeys(r["dtype"] for r in report["workloads"]))
    kinds = [k for k in KINDS if k != "reduce-overhead" or report["settings"].get("reduce_overhead")]
    by_row = {(r["workload"], r["dtype"]): r.get("ratios", {}) for r in report["workloads"]}
    headers = ["workload"] + [f"{dtype} {kind}" for dtype in dtypes for kind in kinds]
    rows = []
    for workload in dict.fromkeys(r["workload"] for r in report["workloads"]):
        cells = [fmt(by_row.get((workload, d), {}).get(f"{k} test/native"), "x") for d in dtypes for k in kinds]
        rows.append([workload, *cells])
    title = f"## {devices[0]} / {devices[1]} (time per call, medians of one interleaved run)"
    return [title, "", *table(headers, rows)]


def numerics_section(report, devices):
    headers = ["workload", "dtype", "device", "first call (s)", "kernels", "max abs err", "max rel err", "allclose"]
    rows = []
    for result in report["workloads"]:
        for device, record in result.get("devices", {}).items():
            numerics = record.get("numerics") or {}
            matches = numerics.get("matches_eager")
            agreement = "–" if matches is None else f"{'yes' if matches else 'NO'} ({numerics['tolerance']:g})"
            row = [result["workload"], result["dtype"], device, fmt(record.get("first_call_s"))]
            row += [fmt(record.get("kernels_generated")), fmt(numerics.get("max_abs_error"))]
            rows.append([*row, fmt(numerics.get("max_rel_error")), agreement])
    agreement = [
        f"- {result['workload']} {result['dtype']}: eager {devices[0]} vs eager {devices[1]} max abs "
        f"{fmt(result['eager test vs native max_abs_error'])}"
        for result in report["workloads"]
        if "eager test vs native max_abs_error" in result
    ]
    title = "## Compiled vs eager numerics (same device, weights and inputs; max rel = max abs / max |eager|)"
    return [title, ""] + table(headers, rows) + (["", *agreement] if agreement else [])


def bandwidth_section(report):
    headers = ["device", "D2D copy GB/s (large)", "copy GB/s (chain size)", "chain dtype", "chain GB/s", "of copy"]
    rows = []
    for device, copies in report["copy_bandwidth"].items():
        large, same_size = copies.get("large") or {}, copies.get("elementwise size") or {}
        for result in (r for r in report["workloads"] if "bandwidth" in r):
            chain = result["bandwidth"].get(device) or {}
            row = [device, fmt(large.get("gbps")), fmt(same_size.get("gbps")), result["dtype"]]
            rows.append([*row, fmt(chain.get("gbps")), fmt(chain.get("fraction_of_copy"), "%")])
        if not any("bandwidth" in r for r in report["workloads"]):
            rows.append([device, fmt(large.get("gbps")), fmt(same_size.get("gbps")), "–", "–", "–"])
    title = "## Bandwidth (copy: read + write bytes; chain: one read + one write of the matrix)"
    return [title, "", *table(headers, rows)]


def compile_times_section(report):
    headers = ["workload", "device", "workers", "first compiled call (s)", "process (s)", "start method", "threads"]
    rows, speedups = [], []
    for study in report["compile_times"]:
        for label, run in study["runs"].items():
            first = fmt(run.get("first_call_s")) if "first_call_s" in run else run.get("error", run.get("skipped"))
            if len(run.get("first_call_samples_s", ())) > 1:
                first += f" (median of {', '.join(fmt(t) for t in run['first_call_samples_s'])})"
            row = [study["workload"], study["device"], label, first, fmt(run.get("process_s"))]
            rows.append([*row, run.get("worker_start_method", "–"), run.get("compile_threads", "–")])
        speedups.append(
            f"- {study['workload']} on {study['device']}: serial/fork {fmt(study['serial/fork'], 'x')}, "
            f"serial/subprocess {fmt(study['serial/subprocess'], 'x')}"
        )
    title = "## Compile wall time (fresh process, fresh inductor + Triton caches)"
    return [title, "", *table(headers, rows), "", *speedups]


def target_cell(item):
    if item["met"] is None:
        return "not measured"
    verdict = "met" if item["met"] else "MISSED"
    side = "room" if item["met"] else "short"
    return f"{verdict} ({abs(item['margin_pct']):.1f} % {side})"


def targets_section(report):
    rows = []
    for item in report["targets"]:
        comparison = ">=" if item["higher_is_better"] else "<="
        threshold = fmt(item["threshold"], item["unit"])
        rows.append([item["target"], fmt(item["value"], item["unit"]), f"{comparison} {threshold}", target_cell(item)])
    return ["## Targets", "", *table(["target", "value", "threshold", "result"], rows)]


def errors_section(report):
    lines = []
    for result in report["workloads"]:
        for device, record in result.get("devices", {}).items():
            for step, message in record.get("errors", {}).items():
                if not step.endswith("traceback"):
                    lines.append(f"- {result['workload']} {result['dtype']} on {device}, {step}: {message[:400]}")
        for step, message in result.get("errors", {}).items():
            if not step.endswith("traceback"):
                lines.append(f"- {result['workload']} {result['dtype']}, {step}: {message[:400]}")
    return ["## Errors (full tracebacks in the JSON)", "", *lines] if lines else []


def markdown(report, devices):
    env = report["environment"]
    names = ", ".join(f"{device}: {name}" for device, name in env["devices"].items())
    qwen3 = {
        r["implementation"] for r in report["workloads"] if r["workload"].startswith("qwen3") and "implementation" in r
    }
    lines = [
        f"# bench_compile ({'--small' if report['settings']['small'] else 'full sizes'})",
        "",
        f"torch {env['torch']}, triton {env['triton']}, Python {env['python']}; {names}; {report['elapsed_s']:.0f} s",
    ]
    if qwen3:
        lines.append(f"qwen3 ran as: {', '.join(sorted(qwen3))}")
    per_workload = [ratio_table_section, timing_section, numerics_section] if report["workloads"] else []
    sections = [functools.partial(section, devices=devices) for section in per_workload]
    if report["copy_bandwidth"]:
        sections.append(bandwidth_section)
    if report["compile_times"]:
        sections.append(compile_times_section)
    sections += [targets_section, errors_section]
    for section in sections:
        body = section(report)
        lines += ["", *body] if body else []
    return "\n".join(lines)


# --- command line ---


def comma_list(text):
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--devices",
        "--device",
        type=comma_list,
        default=["flagos"],
        help="under test first, then the native reference: flagos,cuda",
    )
    parser.add_argument(
        "--workloads",
        "--model",
        type=comma_list,
        help=f"subset of {','.join(WORKLOADS)} (default: all; qwen3 for --compile-times)",
    )
    parser.add_argument("--dtypes", "--dtype", type=comma_list, default=["float32", "bfloat16"])
    parser.add_argument("--small", action="store_true", help="tiny sizes, short budgets: the host accelerator, cpu")
    parser.add_argument("--json", type=Path, default=REPO / "reports" / "bench_compile.json")
    parser.add_argument("--budget", type=float, help="timed seconds per measurement (default 0.5, --small 0.2)")
    parser.add_argument("--min-iters", type=int, help="default 10, --small 3")
    parser.add_argument("--max-iters", type=int, default=1000)
    parser.add_argument("--iters", type=int, help="a fixed number of timed runs instead of --budget")
    parser.add_argument("--warmup", type=int, help="calls before timing (default 3, --small 1)")
    parser.add_argument("--time-limit", type=float, default=480, help="seconds; later steps are recorded as skipped")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--qwen3-impl", choices=["auto", "transformers", "self-contained"], default="auto")
    parser.add_argument("--fresh-cache", action="store_true", help="compile into a new inductor/Triton cache")
    parser.add_argument("--compile-times", action="store_true", help="only the compile-time study (every --devices)")
    parser.add_argument(
        "--reduce-overhead", action="store_true", help='also time mode="reduce-overhead" (CUDA graphs) per device'
    )
    parser.add_argument("--markdown", type=Path, help="also write the Markdown tables to this file")
    parser.add_argument("--no-compile-times", action="store_true", help="skip the compile-time study of a full run")
    parser.add_argument("--train", action="store_true", help="compile times of forward+backward")
    parser.add_argument("--child-timeout", type=float, default=300, help="seconds per compile-time process")
    parser.add_argument(
        "--compile-rounds", type=int, default=1, help="rounds of the compile-time study (each device's median)"
    )
    parser.add_argument("--child-first-call", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compile_rounds < 1:
        parser.error(f"--compile-rounds must be at least 1, got {args.compile_rounds}")
    unknown = [name for name in args.workloads or [] if name not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    load_flagos_if_named(args.devices)
    for device in args.devices:
        try:
            torch.device(device)
        except RuntimeError as error:
            parser.error(f"--devices {device}: {error}")
    if args.workloads is None:
        args.workloads = ["qwen3"] if args.compile_times else list(WORKLOADS)
    return args


def settings_from(args):
    return Settings(
        budget_s=args.budget if args.budget is not None else (0.2 if args.small else 0.5),
        min_iters=args.min_iters if args.min_iters is not None else (3 if args.small else 10),
        max_iters=args.max_iters,
        warmup=args.warmup if args.warmup is not None else (1 if args.small else 3),
        fixed_iters=args.iters,
    )


def run(args):
    settings = settings_from(args)
    report = {
        "environment": environment(args),
        "settings": {
            **vars(args),
            "json": str(args.json),
            "markdown": str(args.markdown) if args.markdown else None,
            "measurement": dataclasses.asdict(settings),
        },
        # Ratios named "test/native" are the first of --devices over the second.
        "test_device": args.devices[0],
        "native_device": args.devices[1] if len(args.devices) > 1 else None,
        "copy_bandwidth": {},
        "workloads": [],
        "compile_times": [],
        "targets": [],
    }
    session = Session(args, settings, Deadline(args.time_limit), report)
    session.save()
    if args.compile_times:
        compile_times(session, args.workloads, args.devices)
    else:
        # Compile times first: their fresh processes must not queue behind a slow workload and hit the limit.
        if "qwen3" in args.workloads and not args.no_compile_times:
            compile_times(session, ["qwen3"], args.devices)
        report["copy_bandwidth"] = measure_copy_bandwidths(session)
        session.save()
        run_workloads(session)
    report["targets"] = evaluate_targets(report, args.devices)
    session.save()
    text = markdown(report, args.devices)
    print(text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text + "\n")
    log(f"full results: {args.json}")


def main():
    args = parse_args()
    if args.fresh_cache and not args.child_first_call:
        cache = tempfile.mkdtemp(prefix="bench-compile-cache-")
        os.environ.update(TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton"))
    if args.child_first_call:
        child_first_call(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
