"""Quick checks of flagos on the cuda accelerator, one line each (run on a GPU machine).

    python scripts/cuda_smoke.py

Each check prints PASS/FAIL with a detail; the exit status is the number of
failures. For the first minutes on a new GPU build, before the test suites.
"""

import sys
import traceback

import torch

failures = 0


def check(name):
    def run(fn):
        global failures
        try:
            detail = fn()
            print(f"PASS {name}: {detail if detail is not None else ''}", flush=True)
        except Exception as e:  # a smoke script reports and goes on
            failures += 1
            print(f"FAIL {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
            traceback.print_exc(limit=6)
        return fn

    return run


@check("accelerator")
def _():
    assert torch.flagos.accelerator_name() == "cuda", torch.flagos.accelerator_name()
    p = torch.flagos.get_device_properties(0)
    return f"{torch.flagos.device_count()} device(s), {p.name}, cc {p.major}.{p.minor}, {p.multi_processor_count} SMs, L2 {p.L2_cache_size}"


@check("eager ops match cuda (zero-copy alias)")
def _():
    a = torch.randn(257, 129)
    x = a.to("flagos")
    y = (x.sin() @ x.T).softmax(-1).sum(0)
    ref = (a.cuda().sin() @ a.cuda().T).softmax(-1).sum(0)
    torch.testing.assert_close(y.cpu(), ref.cpu())
    v = x.view(-1)[:10]
    v.add_(1)
    assert v.data_ptr() == x.data_ptr(), "a view must share memory"
    return f"memory_allocated={torch.flagos.memory_allocated()}"


@check("random ops use the flagos generator")
def _():
    torch.flagos.manual_seed(7)
    a = torch.randn(1000, device="flagos")
    torch.flagos.manual_seed(7)
    b = torch.randn(1000, device="flagos")
    torch.testing.assert_close(a, b)
    return float(a.std())


@check("boxed kernels run on the current flagos stream")
def _():
    s = torch.flagos.Stream()
    x = torch.randn(4096, 4096, device="flagos")
    s.wait_stream(torch.flagos.current_stream())
    with torch.flagos.stream(s):
        for _ in range(30):
            x = x @ x / 4096
        done = torch.flagos.Event()
        done.record()
    pending = not done.query()
    s.synchronize()
    assert pending, "work queued in `with stream(s)` did not run on s"
    return f"event type {type(done).__mro__[1].__module__}.{type(done).__mro__[1].__name__}"


@check("raw stream follows the current stream")
def _():
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device("flagos")
    s = torch.flagos.Stream()
    outside = iface.get_raw_stream(0)
    with torch.flagos.stream(s):
        inside = iface.get_raw_stream(0)
    assert outside != inside and inside == s.flagos_stream and outside != 0
    return f"default {outside:#x}, s {inside:#x}"


@check("torch.compile on flagos (Triton NVIDIA back end, subprocess workers)")
def _():
    def f(x, y):
        return torch.nn.functional.gelu(x @ y) * 2 + x.sum(-1, keepdim=True)

    a, b = torch.randn(512, 512), torch.randn(512, 512)
    out = torch.compile(f)(a.to("flagos"), b.to("flagos"))
    torch.testing.assert_close(out.cpu(), f(a, b), atol=2e-2, rtol=2e-2)
    from torch._dynamo.utils import counters

    return dict(counters["inductor"])


@check("compiled code inside `with stream(s)` runs on s")
def _():
    fn = torch.compile(lambda x: (x * 2).sin() + 1)
    x = torch.randn(1 << 24, device="flagos")
    fn(x)
    s = torch.flagos.Stream()
    s.wait_stream(torch.flagos.current_stream())
    big = torch.randn(4096, 4096, device="flagos")
    with torch.flagos.stream(s):
        for _ in range(20):
            big = big @ big / 4096
        y = fn(x)
        e = torch.flagos.Event()
        e.record()
    pending = not e.query()
    s.synchronize()
    torch.testing.assert_close(y, (x * 2).sin() + 1)
    assert pending, "the compiled kernels did not wait behind the work queued on s"
    return "ok"


@check("max-autotune times configs with flagos events")
def _():
    from torch._dynamo.utils import counters

    counters.clear()
    fn = torch.compile(lambda x: torch.relu(x).sum(-1), mode="max-autotune-no-cudagraphs")
    x = torch.randn(4096, 1000, device="flagos")
    torch.testing.assert_close(fn(x), torch.relu(x).sum(-1))
    return dict(counters["inductor"])


@check("memory stats return to baseline; OOM is torch.OutOfMemoryError")
def _():
    import gc

    base = torch.flagos.memory_allocated()
    t = torch.empty(1 << 28, device="flagos")
    grown = torch.flagos.memory_allocated() - base
    del t
    gc.collect()
    assert torch.flagos.memory_allocated() == base
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="flagos")
    except torch.OutOfMemoryError as e:
        return f"grew {grown}; OOM says: {str(e).splitlines()[0][:120]}"
    raise AssertionError("no OutOfMemoryError")


sys.exit(failures)
