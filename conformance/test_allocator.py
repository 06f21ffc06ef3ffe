"""Allocator: statistics exist and return to baseline after frees, peak and cache behave,
out-of-memory raises torch.OutOfMemoryError where the device supports a limit, and repeated
compiles do not leak device memory.

The statistics are torch.accelerator's (torch.accelerator.memory_allocated ..., the
device's c10 DeviceAllocator) where the device is the process's accelerator and its
allocator has them, else the device module's (torch.cuda-shaped extras)."""

from __future__ import annotations

import gc

import pytest
import torch

from pytest_flagos import _torch_compat, device_api

from conformance_support import assert_close, bullet, device_index, fail, run_python, tail

pytestmark = [pytest.mark.flagos_area("allocator"), pytest.mark.requires("memory_stats")]

STATS_API = device_api.MEMORY_FUNCTIONS
STATS_KEYS = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current", "num_ooms")
MiB = 1 << 20


class _Memory:
    """The device's memory functions (device_api.memory_function), as attributes."""

    def __init__(self, device):
        self.device = device

    def __getattr__(self, name):
        return device_api.memory_function(self.device, name)

    def synchronize(self):
        device_api.synchronize(self.device)


@pytest.fixture
def memory(flagos_device):
    return _Memory(flagos_device)


def _allocated(module, index):
    gc.collect()
    module.synchronize()
    return module.memory_allocated(index)


def test_stats_api_exists(flagos_device, memory):
    missing = []
    for name in STATS_API:
        try:
            getattr(memory, name)
        except device_api.MissingAPI as exc:
            missing.append(f"{name} ({exc})")
    if missing:
        fail(
            f"the memory statistics of {flagos_device.type!r} lack {', '.join(missing)} (torch.cuda has them; "
            "inductor and users read memory through them)",
            "allocator",
        )
    stats = memory.memory_stats(device_index(flagos_device))
    absent = [key for key in STATS_KEYS if key not in stats]
    if absent:
        fail(f"memory_stats() lacks {', '.join(absent)} (keys as in torch.cuda.memory_stats)", "allocator")


def test_stats_return_to_baseline_after_frees(flagos_device, memory):
    index = device_index(flagos_device)
    base = _allocated(memory, index)
    tensors = [torch.empty(1000 + 37 * i, device=flagos_device) for i in range(12)]
    tensors.append(torch.randn(256, 1024, device=flagos_device).sort(dim=-1).values)
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    allocated = _allocated(memory, index)
    reserved = memory.memory_reserved(index)
    problems = []
    if allocated < base + nbytes:
        problems.append(
            f"memory_allocated grew by {allocated - base} bytes for {nbytes} bytes "
            "of live tensors (outputs of eager kernels must be counted too)"
        )
    if reserved < allocated:
        problems.append(f"memory_reserved {reserved} < memory_allocated {allocated}")
    del tensors
    after = _allocated(memory, index)
    if after != base:
        problems.append(f"after freeing everything memory_allocated is {after}, baseline {base}")
    if problems:
        fail("allocator statistics are wrong:\n" + bullet(problems), "allocator")


def test_peak_reset_and_empty_cache(flagos_device, memory):
    index = device_index(flagos_device)
    memory.reset_peak_memory_stats(index)
    base_peak = memory.max_memory_allocated(index)
    x = torch.empty(4 * MiB, dtype=torch.uint8, device=flagos_device)
    peak = memory.max_memory_allocated(index)
    del x
    problems = []
    if peak < base_peak + 4 * MiB:
        problems.append(f"max_memory_allocated rose by {peak - base_peak} bytes for a 4 MiB tensor")
    if memory.max_memory_allocated(index) != peak:
        problems.append("max_memory_allocated dropped after a free (it is a high-water mark)")
    gc.collect()
    cached = memory.memory_reserved(index) - memory.memory_allocated(index)
    memory.empty_cache()
    after = memory.memory_reserved(index) - memory.memory_allocated(index)
    if cached >= 4 * MiB and after >= cached:
        problems.append(f"empty_cache() kept {after} cached bytes (before: {cached})")
    memory.reset_peak_memory_stats(index)
    if memory.max_memory_allocated(index) >= peak:
        problems.append("reset_peak_memory_stats() did not lower max_memory_allocated")
    if problems:
        fail("allocator peak/cache behaviour is wrong:\n" + bullet(problems), "allocator")


OOM_SCRIPT = """
import json
device = torch.device({device!r})
module = torch.get_device_module(device.type)
{limit}
result = {{}}
big = {big}
try:
    x = torch.empty(big, dtype=torch.uint8, device=device)
    x.fill_(1)
    torch.accelerator.synchronize()
    result["oom"] = None
except torch.OutOfMemoryError as exc:
    result["oom"] = "torch.OutOfMemoryError: " + str(exc).splitlines()[0]
except Exception as exc:
    result["oom"] = "OTHER " + type(exc).__name__ + ": " + str(exc).splitlines()[0]
try:
    y = torch.ones(1 << 20, dtype=torch.uint8, device=device)
    result["recovered"] = int(y.sum().item()) == (1 << 20)
except Exception as exc:
    result["recovered"] = type(exc).__name__ + ": " + str(exc).splitlines()[0]
stats = getattr(module, "memory_stats", None) or torch.accelerator.memory_stats
result["num_ooms"] = stats(device).get("num_ooms")
print("RESULT", json.dumps(result))
"""


@pytest.mark.requires("memory_limit")
def test_out_of_memory_raises_torch_oom_under_a_limit(flagos_device, flagos_capabilities, device_module):
    """In a subprocess: set the device's memory limit (the manifest's extra
    'memory_limit_env' variable, else set_per_process_memory_fraction), allocate past it."""
    env_var = flagos_capabilities.extra.get("memory_limit_env")
    index = device_index(flagos_device)
    env = {}
    if env_var:
        env[env_var] = "64M"
        limit, big, how = "", 256 * MiB, f"{env_var}=64M"
    elif hasattr(device_module, "set_per_process_memory_fraction"):
        total = device_module.get_device_properties(index).total_memory
        fraction = max(min(64 * MiB / total, 1.0), 1e-6)
        limit = f"module.set_per_process_memory_fraction({fraction!r}, device)"
        big, how = 256 * MiB, f"set_per_process_memory_fraction({fraction:.2e})"
    else:
        fail(
            "the capability manifest says memory_limit, but neither extra['memory_limit_env'] "
            f"nor torch.{flagos_device.type}.set_per_process_memory_fraction exists",
            "allocator",
        )
    code = OOM_SCRIPT.format(device=str(flagos_device), limit=limit, big=big)
    proc = run_python(code, env=env, timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        fail(
            f"the out-of-memory script ({how}) exited with {proc.returncode}:\n{tail(proc.stderr + proc.stdout)}",
            "allocator",
        )
    import json

    result = json.loads(lines[-1][len("RESULT ") :])
    problems = []
    if result["oom"] is None:
        problems.append(f"allocating {big // MiB} MiB under a 64 MiB limit ({how}) succeeded")
    elif not result["oom"].startswith("torch.OutOfMemoryError"):
        problems.append(f"allocating past the limit raised {result['oom']}, not torch.OutOfMemoryError")
    if result["recovered"] is not True:
        problems.append(f"a 1 MiB allocation after the OOM failed: {result['recovered']}")
    if isinstance(result["num_ooms"], int) and result["num_ooms"] < 1:
        problems.append("memory_stats()['num_ooms'] did not count the OOM")
    if problems:
        fail("out-of-memory handling is wrong:\n" + bullet(problems), "allocator")


@pytest.mark.requires("inductor")
def test_no_growth_across_repeated_compiles(flagos_device, memory, fresh_inductor_cache):
    """Compile, run and drop the same graph several times (dynamo reset in between): device
    memory must return to the same level each time."""
    index = device_index(flagos_device)

    def f(x, w):
        return torch.softmax(torch.relu(x @ w) * 2.0, dim=-1).sum(0)

    x = torch.randn(64, 32, device=flagos_device)
    w = torch.randn(32, 128, device=flagos_device)
    levels = []
    for _ in range(4):
        _torch_compat.reset_dynamo(clear_counters=False)
        out = torch.compile(f, backend="inductor", fullgraph=True)(x, w)
        assert_close(out, f(x.cpu(), w.cpu()), "compiled result differs from eager on the host")
        del out
        _torch_compat.reset_dynamo(clear_counters=False)
        levels.append(_allocated(memory, index))
    if len(set(levels[1:])) != 1 or levels[-1] > levels[0]:
        fail(
            f"device memory after each compile-run-drop cycle: {levels} bytes; it grows: "
            "compiled code, its constants or the autotuner's buffers keep device memory "
            "alive after the compiled function is gone",
            "allocator",
            "benchmarker",
        )


@pytest.mark.requires("inductor")
def test_no_growth_across_repeated_calls(flagos_device, memory, fresh_inductor_cache):
    """One compiled function called again and again (a training loop): once compiled and
    autotuned, each call must leave device memory where the previous one left it."""
    index = device_index(flagos_device)

    def f(x, w):
        return torch.relu(x @ w).sum(-1) * 2.0

    x = torch.randn(64, 32, device=flagos_device)
    w = torch.randn(32, 128, device=flagos_device)
    compiled = torch.compile(f, backend="inductor", fullgraph=True)
    assert_close(compiled(x, w), f(x.cpu(), w.cpu()), "compiled result differs from eager on the host")
    levels = []
    for _ in range(6):
        compiled(x, w)  # the result is dropped at once
        levels.append(_allocated(memory, index))
    if len(set(levels)) != 1:
        per_call = (levels[-1] - levels[0]) / (len(levels) - 1)
        fail(
            f"device memory after each of {len(levels)} calls of one compiled function: {levels} bytes "
            f"({per_call:+.0f} bytes per call): compiled code leaks device memory on every call "
            "(a launcher or wrapper keeping per-launch buffers alive)",
            "allocator",
            "triton",
        )
