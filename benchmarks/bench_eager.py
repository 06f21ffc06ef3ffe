"""Eager dispatch overhead of flagos against the same op on its compute device.

    python benchmarks/bench_eager.py [--repeat N] [--reference cpu|cuda]

Prints, per op and size, the median time per call on the reference device (by
default the accelerator's compute device: CPU for host, CUDA for cuda) and on
flagos, and their ratio. Every sample ends with a device synchronize, so small
ops measure the host cost of dispatch (what a host-bound model like eager Qwen3
at 1 x 512 tokens pays per op) and large ones the kernel. Targets: large tensors
within 1.05x (zero-copy: no extra pass over memory), small tensors within 2x.
Also the allocator's alloc/free round trip, what compiled code's wrapper calls
on every call besides its kernels (a buffer's allocation, an extern matmul, the device guard),
and a small MLP's call, eager and compiled (no autograd): the host cost of a
host-bound model call. Then
the ops a transformer's forward calls most, on an op's output (what a model's
activations are), the two devices taking turns sample by sample; the small
convnet's layers the same way (bench_models' "conv" workload, batch 8), to show
which of them make its eager call slower; and the host cost of one
Event.record(), what a timing loop adds to each sample it times.
A benchmark, not a test: nothing here asserts.
"""

import argparse
import copy
import functools
import statistics
import sys
import time
from pathlib import Path

import torch

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compile import synchronize, timing_event_makers

OPS = {
    "add": lambda a, b: a + b,
    "mul_": lambda a, b: a.mul_(1.0001),
    "relu": lambda a, b: torch.relu(a),
    "sum": lambda a, b: a.sum(),
    "exp": lambda a, b: torch.exp(a),
    "view+slice": lambda a, b: a.view(-1)[1:],
    "mm": lambda a, b: a.view(-1, 32) @ b.view(32, -1)[:, :32],
    # How compiled code calls a matmul (extern_kernels.mm into a planned buffer).
    "mm(out=)": lambda a, b: torch.mm(a.view(-1, 32), b.view(32, -1)[:, :32], out=_out_like(a, b)),
}
_OUT = {}


def _out_like(a, b):
    key = (a.device, a.numel())
    if key not in _OUT:
        _OUT[key] = torch.mm(a.view(-1, 32), b.view(32, -1)[:, :32])
    return _OUT[key]


def inductor_alloc(device):
    """The allocation call inductor's wrapper emits for the device (a C fast path for cpu/cuda)."""
    fast = getattr(torch._C._dynamo.guards, f"_empty_strided_{device}", None)
    if device == "flagos":
        fast = torch_fl._C._empty_strided  # torch_fl/compile rewrites the wrapper's allocations to it
    if fast is not None:
        return lambda: fast((64, 64), (64, 1), torch.float32)
    return lambda: torch.empty_strided((64, 64), (64, 1), device=device, dtype=torch.float32)


def wrapper_mm(device):
    """The extern matmul inductor's wrapper calls for the device (extern_kernels.mm(a, b, out=buf) is
    torch.mm; torch_fl/compile writes flagos's as torch_fl._C._compiled_mm), 32 x 32 into a buffer."""
    a, b = torch.randn(32, 32, device=device), torch.randn(32, 32, device=device)
    out = torch.empty(32, 32, device=device)
    mm = torch_fl._C._compiled_mm if device == "flagos" else torch.mm
    return lambda: mm(a, b, out=out)


def wrapper_guard(device):
    """What inductor's wrapper runs on entry to each call of compiled code on the device: its
    device guard and set_device, from the device's registered snippets (a no-op on cpu)."""
    from torch_fl.compile._inductor_adapter import device_op_overrides

    overrides = device_op_overrides(device)
    source = f"def call():\n    with {overrides.device_guard(0)}:\n        {overrides.set_device(0)}\n"
    namespace = {"torch": torch}
    exec(compile(source, f"<{device} wrapper>", "exec"), namespace)
    return namespace["call"]


SIZES = {"small (1k)": 1 << 10, "large (16M)": 1 << 24}

# On an op's output (1k elements) and a 32 x 32 weight.
FORWARD_OPS = {
    "relu": lambda a, w: torch.relu(a),
    "add": lambda a, w: a + a,
    "mul scalar": lambda a, w: a * 0.5,
    "mm 32x32": lambda a, w: a.view(32, 32) @ w,
    "to bfloat16": lambda a, w: a.to(torch.bfloat16),
    "view+slice": lambda a, w: a.view(-1)[1:],
}


def conv_layers(device: str) -> dict:
    """The small convnet's layers in eval mode, each called on what the one before returns (batch 8,
    32x32): the calls of its eager forward, one at a time."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 16, 3, padding=1).to(device)
    norm = torch.nn.BatchNorm2d(16).to(device).eval()
    linear = torch.nn.Linear(16, 10).to(device)
    with torch.no_grad():
        x = torch.randn(8, 3, 32, 32).to(device)
        y = conv(x)
        z = norm(y)
        r = torch.relu(z)
        pooled = torch.nn.functional.adaptive_avg_pool2d(r, 1).flatten(1)
    return {  # (name, input shape): the call
        ("conv2d 3->16", "8x3x32x32"): functools.partial(conv, x),
        ("batch_norm", "8x16x32x32"): functools.partial(norm, y),
        ("relu", "8x16x32x32"): functools.partial(torch.relu, z),
        ("avg pool", "8x16x32x32"): functools.partial(torch.nn.functional.adaptive_avg_pool2d, r, 1),
        ("linear 16->10", "8x16"): functools.partial(linear, pooled),
    }


def median_time(fn, device: str, repeat: int, inner: int) -> float:
    fn()
    synchronize(device)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        synchronize(device)
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def interleaved_medians(fns: dict, repeat: int, inner: int) -> dict:
    """Median seconds per call of each device's fn, the devices taking turns sample by sample
    (so a slow spell of a shared host hits both)."""
    samples = {device: [] for device in fns}
    for _ in range(repeat):
        for device, fn in fns.items():
            samples[device].append(median_time(fn, device, 1, inner))
    return {device: statistics.median(times) for device, times in samples.items()}


def print_row(name, label, t_ref, t_fl):
    print(f"{name:<15}{label:<13}{t_ref * 1e6:>10.1f}us{t_fl * 1e6:>10.1f}us{t_fl / t_ref:>13.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    default_reference = "cuda" if torch.flagos.accelerator_name() == "cuda" else "cpu"
    parser.add_argument("--reference", default=default_reference, help="device to compare against")
    args = parser.parse_args()
    ref = args.reference
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, flagos accelerator "
        f"'{torch.flagos.accelerator_name()}', reference {ref}"
    )
    print(f"{'op':<15}{'size':<13}{ref:>12}{'flagos':>12}{f'flagos/{ref}':>14}")
    for size_name, n in SIZES.items():
        inner = 2000 if n < 1 << 16 else 3
        for name, op in OPS.items():
            a_ref, b_ref = torch.randn(n).to(ref), torch.randn(n).to(ref)
            a_fl, b_fl = a_ref.to("flagos"), b_ref.to("flagos")
            t_ref = median_time(lambda: op(a_ref, b_ref), ref, args.repeat, inner)
            t_fl = median_time(lambda: op(a_fl, b_fl), "flagos", args.repeat, inner)
            print_row(name, size_name, t_ref, t_fl)
    for nbytes in (4 << 10, 64 << 20):
        t_ref = median_time(lambda: torch.empty(nbytes, dtype=torch.uint8, device=ref), ref, args.repeat, 2000)
        t_fl = median_time(lambda: torch.empty(nbytes, dtype=torch.uint8, device="flagos"), "flagos", args.repeat, 2000)
        label = f"{nbytes >> 10} KiB" if nbytes < 1 << 20 else f"{nbytes >> 20} MiB"
        print_row("alloc+free", label, t_ref, t_fl)
    t_ref = median_time(inductor_alloc(ref), ref, args.repeat, 2000)
    t_fl = median_time(inductor_alloc("flagos"), "flagos", args.repeat, 2000)
    print_row("inductor alloc", "16 KiB", t_ref, t_fl)
    t_ref = median_time(wrapper_mm(ref), ref, args.repeat, 2000)
    t_fl = median_time(wrapper_mm("flagos"), "flagos", args.repeat, 2000)
    print_row("wrapper mm", "32x32", t_ref, t_fl)
    t_ref = median_time(wrapper_guard(ref), ref, args.repeat, 2000)
    t_fl = median_time(wrapper_guard("flagos"), "flagos", args.repeat, 2000)
    print_row("wrapper guard", "per call", t_ref, t_fl)
    # One compiled call of one small Triton kernel: guards, allocation, launch.
    x_ref = torch.randn(1024).to(ref)
    x_fl = x_ref.to("flagos")
    compiled = torch.compile(lambda x: torch.sin(x) * 2)
    t_ref = median_time(lambda: compiled(x_ref), ref, args.repeat, 500)
    t_fl = median_time(lambda: compiled(x_fl), "flagos", args.repeat, 500)
    print_row("compiled sin", "1k", t_ref, t_fl)
    # A host-bound model call without autograd: three Linear layers on 64 x 512, eager and compiled.
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
    )
    x = torch.randn(64, 512)
    calls = {}
    for device in (ref, "flagos"):
        model, inputs = copy.deepcopy(mlp).to(device), x.to(device)
        calls[device] = {
            "eager": functools.partial(model, inputs),
            "compiled": functools.partial(torch.compile(model), inputs),
        }
    with torch.no_grad():
        for mode in ("eager", "compiled"):
            t_ref = median_time(calls[ref][mode], ref, args.repeat, 200)
            t_fl = median_time(calls["flagos"][mode], "flagos", args.repeat, 200)
            print_row(f"{mode} MLP", "64x512", t_ref, t_fl)
    print(f"\nA forward's ops on an op's output, devices taking turns ({args.repeat} samples of 2000 calls each)")
    for name, op in FORWARD_OPS.items():
        fns = {}
        for device in (ref, "flagos"):
            a = torch.relu(torch.randn(1024, device=device))
            w = torch.randn(32, 32, device=device)
            fns[device] = functools.partial(op, a, w)
        t = interleaved_medians(fns, args.repeat, 2000)
        print_row(name, "1k", t[ref], t["flagos"])
    print(f"\nThe small convnet's layers, eval, batch 8, devices taking turns ({args.repeat} samples of 500 calls)")
    layers = {device: conv_layers(device) for device in (ref, "flagos")}
    with torch.no_grad():
        for name, shape in layers[ref]:
            t = interleaved_medians({device: layers[device][name, shape] for device in layers}, args.repeat, 500)
            print_row(name, shape, t[ref], t["flagos"])
    print("\nHost cost of one Event.record() (no stream given: the current one)")
    for device in (ref, "flagos"):
        for label, make in timing_event_makers(device):
            event = make()
            t = median_time(event.record, device, args.repeat, 2000)
            print(f"{label:<22}{device:<8}{t * 1e6:>8.2f}us")


if __name__ == "__main__":
    main()
