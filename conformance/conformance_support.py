"""Helpers shared by the conformance modules: failure messages, subprocesses, counters.

Everything here is device-agnostic: the device module is ``torch.<device type>``, inductor's
view of the device is its registered DeviceInterface. The "where to look" hints name the
generic hook a vendor implements and, after "flagos:", where this repository implements it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterable

import pytest

# Where a vendor looks when a check fails (generic hook; this repository's file after "flagos:").
# Every file named here exists in this repository (tests/test_conformance_hints.py).
WHERE = {
    "module": "the device module torch.<device> (torch._register_device_module; flagos: torch_fl/flagos/)",
    "guard": "the device's c10 DeviceGuardImpl: streams, events, synchronize, device switching "
    "(torch.Stream, torch.Event and torch.accelerator reach it; flagos: csrc/runtime/streams.cpp)",
    "copies": "the device's copy kernels (aten::_copy_from / copy_ between host and device "
    "and between devices; flagos: csrc/aten/memory_ops.cpp)",
    "allocator": "the device's caching allocator and its stats API "
    "(flagos: csrc/runtime/allocator.cpp, torch_fl/flagos/memory.py)",
    "properties": "get_device_properties of the device module and of the inductor "
    "DeviceInterface (and DeviceInterface.Worker) "
    "(flagos: csrc/accelerator/host/, torch_fl/compile/device_interface.py)",
    "interface": "the inductor DeviceInterface registered with "
    "torch._dynamo.device_interface.register_interface_for_device "
    "(flagos: torch_fl/compile/device_interface.py; docs/architecture.md, 'A compiled graph on flagos')",
    "event": "the device's Event class as the DeviceInterface exposes it (an Event deriving from the "
    "CPU wheel's dummy torch.cuda.Event cannot be built; docs/vendor-guide.md, 'Tried to instantiate "
    "dummy base class Event'; flagos: torch_fl/flagos/streams.py)",
    "benchmarker": "inductor's benchmarker for the device type (torch 2.13 "
    "torch._inductor.runtime.benchmarking.register_benchmarker; older torch: "
    "Benchmarker.benchmark falls back to 'cuda' events) "
    "(flagos: torch_fl/compile/_inductor_adapter.py)",
    "codegen": "the device's inductor registration in this process: register_backend_for_device "
    "(scheduling + wrapper codegen), register_device_op_overrides, GPU_TYPES "
    "(flagos: torch_fl/compile/__init__.py, scheduling.py, op_overrides.py)",
    "raw_stream": "DeviceInterface.get_raw_stream and the DeviceOpOverrides' "
    "import_get_raw_stream_as: compiled code must launch on the *current* "
    "stream (flagos: torch_fl/compile/device_interface.py, op_overrides.py)",
    "backend": "the device's torch.compile backend (dynamo's backend registry: register_backend or "
    "a torch_dynamo_backends entry point named after the device): it must return compiled code, "
    "not the FX graph (gm.forward) or a wrapper that runs it "
    "(flagos: torch_fl/compile/backend.py)",
    "workers": "inductor's compile workers (torch._inductor.async_compile, "
    "compile_worker/): a bare `python -m torch._inductor.compile_worker` must see "
    "the device through the torch.backends / triton.backends entry points "
    "(flagos: torch_fl/compile/workers.py, flagos_autoload/, pyproject.toml; docs/vendor-guide.md, "
    "'Could not find an active GPU backend')",
    "triton": "the device's Triton back end (driver active, compiler, launcher) (flagos: flagos_triton/)",
    "fake": "the op's fake/meta kernel vs the device's real kernel: inductor plans buffers "
    "with the fake tensor's strides, so the real kernel must produce exactly those "
    "(flagos: csrc/aten/fallback.cpp; torch: torch/_meta_registrations.py, "
    "torch/_subclasses/fake_impls.py)",
    "cache": "inductor's FX graph cache (TORCHINDUCTOR_CACHE_DIR): everything the compiled "
    "graph needs must pickle and reload in a fresh process (the device's kernels, "
    "DeviceProperties, its Triton back end's binaries)",
    "dynamic": "dynamo's dynamic shapes (mark_dynamic, automatic_dynamic_shapes) and the "
    "device's codegen for symbolic sizes",
    "compiled": "the compiled code: the generated kernels (TORCH_LOGS=output_code prints them; "
    "--flagos-repro-dir=DIR writes a standalone repro), the device's inductor codegen and op "
    "overrides, its Triton back end (flagos: torch_fl/compile/, flagos_triton/)",
    "eager": "the device's eager kernels (flagos: the boxed alias fallback in csrc/aten/fallback.cpp)",
}


# The device properties inductor reads, and what "sane" means for each.
PROPERTY_RULES = {
    # name: (check, what sane means)
    "multi_processor_count": (
        lambda v: isinstance(v, int) and 1 <= v <= 100_000,
        "an int >= 1 (inductor sizes persistent reductions and grids by it)",
    ),
    "warp_size": (
        lambda v: isinstance(v, int) and v >= 1 and (v & (v - 1)) == 0 and v <= 1024,
        "a power of two (inductor's reductions and Triton's num_warps use it)",
    ),
    "L2_cache_size": (
        lambda v: isinstance(v, int) and 1024 <= v <= (1 << 34),
        "bytes, >= 1 KiB (the benchmarker zeroes an L2-sized buffer before every timing)",
    ),
    "max_threads_per_block": (
        lambda v: isinstance(v, int) and 32 <= v <= 1 << 16,
        "an int >= 32 (inductor caps block sizes by it)",
    ),
}


def hint(*topics: str) -> str:
    return "\n".join(f"  where to look: {WHERE[t]}" for t in topics)


def fail(problem: str, *topics: str) -> None:
    """Fail with the problem, then where to look; no Python traceback (the message says it)."""
    pytest.fail(problem.rstrip() + ("\n" + hint(*topics) if topics else ""), pytrace=False)


def device_index(device: Any) -> int:
    return device.index if device.index is not None else 0


def device_module(device: Any) -> Any:
    """torch.<device type> (torch.get_device_module), or None: only the device module's
    extras are read from it; the runtime API is found by pytest_flagos.device_api."""
    from pytest_flagos import device_api

    return device_api.device_module(device.type)


_COMPILE_FRAMES = ("/torch/_dynamo/", "/torch/_inductor/", "/torch/_functorch/")


def blame(exc: BaseException) -> tuple[str, ...]:
    """The "where to look" topics for an exception of a compiled-vs-eager check, from
    evidence: the oracle's own verdict (CompiledMismatch says whether eager matches the
    reference; NotCompiledError that dynamo fell back), else where it was raised (in a
    compile worker, while compiling in this process, or by the eager kernels)."""
    import traceback

    name = type(exc).__name__
    text = str(exc)
    if name == "CompiledMismatch":
        return ("compiled",) if "eager itself is within tolerance" in text else ("compiled", "eager")
    if name == "NotCompiledError":
        return ("backend", "codegen")
    if "raised in a compile worker" in text or "SubprocException" in text:
        return ("workers", "triton")
    frames = traceback.extract_tb(exc.__traceback__)
    if any(marker in frame.filename for frame in frames for marker in _COMPILE_FRAMES) or name in (
        "InductorError",
        "BackendCompilerFailed",
    ):
        return ("codegen", "compiled")
    return ("eager",)


def generated_sources(inductor_dir: Path) -> list[tuple[Path, str]]:
    """(path, text) of every Python module inductor wrote under its cache directory."""
    return [(p, p.read_text(errors="replace")) for p in sorted(Path(inductor_dir).rglob("*.py"))]


def inductor_counters() -> Any:
    from pytest_flagos._torch_compat import dynamo_counters

    return dynamo_counters()


def benchmark_calls() -> int:
    """How often inductor's benchmarker timed something on a GPU-like device
    (counters["inductor"]["benchmarking.<Benchmarker>.benchmark_gpu"])."""
    return sum(int(v) for k, v in inductor_counters()["inductor"].items() if k.endswith(".benchmark_gpu"))


def session_device_module_name() -> str | None:
    """--flagos-device-module of this run (a vendor package to import first), if any."""
    from pytest_flagos import session

    current = session.current()
    return current.settings.device_module if current is not None else None


def run_python(
    code: str, *, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter after `import torch` (which autoloads device
    packages through the torch.backends entry point) and the run's --flagos-device-module."""
    module = session_device_module_name()
    prefix = "import torch\n" + (f"import {module}\n" if module else "")
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", prefix + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
    )


def how_it_ended(returncode: int) -> str:
    """How a child process ended, for a failure message: the signal that killed it, or its status."""
    return f"killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exit status {returncode}"


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def bullet(items: Iterable[str]) -> str:
    return "\n".join(f"  - {item}" for item in items)


def assert_close(actual: Any, expected: Any, what: str, *topics: str, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    """torch.testing.assert_close on CPU copies; a mismatch fails with `what` and the hints."""
    import torch

    try:
        torch.testing.assert_close(actual.detach().cpu(), expected.detach().cpu(), rtol=rtol, atol=atol)
    except AssertionError as exc:
        message = str(exc)
    else:
        return
    fail(f"{what}:\n{message}", *(topics or ("compiled",)))
