"""Inductor's compile worker pool: start it now, wait for it, prove it serves compiles.

Inductor creates its pool lazily and, until the pool has answered a first job, compiles
in-process -- which hides every bug of a worker that cannot see the device (the subprocess
start method runs a bare ``python -m torch._inductor.compile_worker``). The
``compile_workers`` fixture therefore forces the pool up with the configured start method
and thread count, waits until it is ready, and proves it:

- a job runs in a worker process (its pid differs from this process's);
- a proof compile on the device, with the pool ready: for devices whose inductor code
  generator is Triton, at least one kernel must come back from a worker
  (``_worker_compile_triton`` jobs submitted to the pool and completed), not built
  in-process. Inductor's C++ back end (``cpu``) never uses the pool -- it compiles C++ on
  a thread pool inside this process (``AsyncCompile.pool``) -- so for ``cpp`` the proof
  records that no pool jobs were submitted and relies on the worker-pid job.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import time
from pathlib import Path
from typing import Any, Callable

from . import _torch_compat as compat

POOL_READY_TIMEOUT_S = 120.0  # what inductor's own AsyncCompile.wait_pool_ready allows
CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
_TRITON_JOB = "_worker_compile_triton"


class WorkerPoolError(Exception):
    """The compile worker pool could not start or did not serve compiles."""


@dataclasses.dataclass(frozen=True)
class ServedCompile:
    """What the proof compile showed."""

    codegen: str
    pool_jobs: tuple[str, ...]  # names of the jobs submitted to the pool while compiling
    kernels_from_pool: int  # Triton kernels compiled by a worker and sent back
    kernels_in_process: int  # Triton kernels compiled in this process instead
    note: str


@dataclasses.dataclass(frozen=True)
class CompileWorkers:
    """The running pool, as the `compile_workers` fixture hands it to a test."""

    start_method: str
    threads: int
    pool: Any
    sidecar_pid: int | None  # the subprocess start method's `compile_worker` process
    worker_pid: int  # pid of a worker that answered a job during this test's setup
    started_env: dict[str, str]  # cache variables in force when the pool started
    proof: ServedCompile
    log_path: Path | None  # the sidecar's stdout/stderr

    def run_in_worker(self, fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
        """Run a picklable function in a worker and return its result."""
        return self.pool.submit(fn, *args).result(timeout=timeout)


@dataclasses.dataclass
class _PoolRecord:
    pool: Any
    start_method: str
    threads: int
    started_env: dict[str, str]
    proof: ServedCompile
    log_path: Path | None


_record: _PoolRecord | None = None
_generation = itertools.count()


def cache_env() -> dict[str, str]:
    return {name: os.environ[name] for name in CACHE_ENV if name in os.environ}


def _discard_pools() -> None:
    global _record
    compat.shutdown_pools()
    _record = None


def retire_pools_with_stale_cache_env() -> None:
    """Shut down pools that would compile into another test's cache directory.

    Not needed (and not done) where torch passes the cache variables with every job."""
    pools = compat.live_pools()
    if not pools or compat.pool_receives_cache_env_per_task():
        return
    if _record is not None and _record.pool in pools and _record.started_env == cache_env():
        return
    _discard_pools()


def _read_log(log_path: Path | None) -> str:
    if log_path is None or not log_path.exists():
        return ""
    text = log_path.read_text(errors="replace").strip()
    return text[-4000:]


# "RuntimeError: ...", "torch._inductor.exc.InductorError: ...": a traceback's last line
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): \S")


def _quoted_cause(text: str) -> str | None:
    """The exception line that ends the last traceback quoted in `text`: a worker's own
    error, which inductor wraps in SubprocException/InductorError after the worker's
    traceback. None when `text` quotes no traceback."""
    marker = "Traceback (most recent call last)"
    if marker not in text:
        return None
    lines = [line.strip() for line in text.rsplit(marker, 1)[1].splitlines()]
    causes = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return causes[-1] if causes else None


def _failure(what: str, exc: BaseException | None, log_path: Path | None, compiling: bool = False) -> WorkerPoolError:
    """The error, its first line saying where it was raised: in a compile worker (a quoted
    worker traceback) or, for a compile (`compiling`), in this process."""
    parts = [what]
    if exc is not None:
        text = f"{type(exc).__name__}: {exc}".strip()
        cause = _quoted_cause(text)
        # first, so one-line summaries (the report) name the problem and where it was raised
        if cause is not None:
            parts[0] = f"{what} {cause} (raised in a compile worker; its traceback follows)"
        elif compiling:
            first = text.splitlines()[0] if text else type(exc).__name__
            parts[0] = f"{what} {first} (raised in this process, not in a compile worker)"
        parts.append(text)
    log = _read_log(log_path)
    if log:
        parts.append(f"worker output ({log_path}):\n{log}")
    return WorkerPoolError("\n".join(parts))


def _start(start_method: str, threads: int, log_dir: Path) -> tuple[Any, Path | None]:
    config = compat.inductor_config()
    log_path = None
    patch: dict[str, Any] = {}
    option = compat.worker_logpath_option()
    if option is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"compile-workers-{os.getpid()}-{next(_generation)}.log"
        patch[option] = str(log_path)
        if hasattr(config, "worker_suppress_logging"):
            patch["worker_suppress_logging"] = False  # inductor sends it to /dev/null otherwise
    what = f"flagos: inductor's compile worker pool ({start_method}, {threads} workers) did not start:"
    try:
        with config.patch(patch):
            pool = compat.start_pool()
        _wait_ready(pool)
    except Exception as exc:
        compat.shutdown_pools()
        raise _failure(what, exc, log_path) from exc
    return pool, log_path


def _wait_ready(pool: Any) -> None:
    """Wait for the pool's ready job, watching the sidecar: a dead one never answers."""
    ready = compat.ready_future()
    deadline = time.monotonic() + POOL_READY_TIMEOUT_S
    while ready is not None and not ready.done():
        status = compat.pool_exit_status(pool)
        if status is not None:
            raise RuntimeError(f"the compile worker process exited with status {status}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no worker answered within {POOL_READY_TIMEOUT_S:.0f} s")
        time.sleep(0.1)
    if ready is not None:
        ready.result()  # raises the pool's own error, if any


def _prove_serves_compiles(pool: Any, device: Any, codegen: str, log_path: Path | None) -> ServedCompile:
    import torch

    # a constant nobody compiled before: no in-memory or on-disk cache can hold the kernel
    salt = 1.0 + (time.time_ns() % 1_000_003) * 1e-9

    def proof_graph(x: Any) -> Any:
        return torch.sin(x * salt + 1.0)

    counters = compat.dynamo_counters()
    compat.reset_dynamo()
    x = torch.randn(8, 64, device=device)
    # One pointwise kernel with one config: nothing to autotune, so the proof depends on the
    # workers alone, not on the device's timing events (a broken Event fails the tests
    # that autotune, under its own name, instead of every pool's setup).
    one_config = compat.inductor_config().patch({"triton.autotune_pointwise": False})
    try:
        with compat.record_pool_jobs(pool) as jobs, one_config:
            out = torch.compile(proof_graph, backend="inductor", fullgraph=True)(x)
        torch.testing.assert_close(out.cpu(), proof_graph(x).cpu(), atol=1e-4, rtol=1e-4)
        # AsyncCompile.triton counts every call as a "miss" before it finds the kernel that
        # codegen already sent to the pool; calls minus hits are the kernels actually built
        built = int(counters["inductor"]["async_compile_cache_miss"]) - int(
            counters["inductor"]["async_compile_cache_hit"]
        )
    except Exception as exc:
        raise _failure(
            "flagos: the proof compile failed with the compile worker pool up:", exc, log_path, compiling=True
        ) from exc
    finally:
        compat.reset_dynamo()

    names = tuple(name for name, _ in jobs)
    for name, future in jobs:
        error = future.exception(timeout=POOL_READY_TIMEOUT_S)
        if error is not None:
            raise _failure(f"flagos: compile worker job {name} failed:", error, log_path)
    from_pool = names.count(_TRITON_JOB)
    if codegen == "triton":
        in_process = max(built - from_pool, 0)
        if from_pool == 0:
            raise _failure(
                f"flagos: the compile worker pool is up but served no compile: inductor built "
                f"{built} Triton kernel(s) in this process instead",
                None,
                log_path,
            )
        note = f"{from_pool} Triton kernel(s) compiled in worker processes"
    else:
        in_process = 0
        note = (
            f"inductor's {codegen} back end compiles kernels on threads in this process, "
            "not in the worker pool; the pool was proven by a job run in a worker process"
        )
    return ServedCompile(codegen, names, from_pool, in_process, note)


def ensure_compile_workers(device: Any, codegen: str, log_dir: Path) -> CompileWorkers:
    """Start (or reuse) the pool for the current settings and cache env; raise WorkerPoolError."""
    global _record
    config = compat.inductor_config()
    start_method = str(config.worker_start_method)
    threads = compat.compile_threads()
    if threads <= 1:
        raise WorkerPoolError(
            "flagos: inductor's compile_threads is 1, so inductor compiles in-process and "
            "starts no worker pool; pass --flagos-compile-threads=N with N > 1"
        )
    if not compat.process_pool_allowed():
        raise WorkerPoolError(
            f"flagos: inductor refuses to start a {start_method!r} pool from a daemonic "
            "process; use --flagos-worker-start=subprocess"
        )

    env = cache_env()
    pools = compat.live_pools()
    reusable = (
        _record is not None
        and _record.pool in pools
        and compat.pool_is_running(_record.pool)
        and (_record.start_method, _record.threads) == (start_method, threads)
        and (_record.started_env == env or compat.pool_receives_cache_env_per_task())
    )
    if not reusable and pools:
        # a pool from other settings, an older cache env, or started lazily by inductor
        # itself (no log, never proven): replace it
        _discard_pools()

    if not reusable:
        pool, log_path = _start(start_method, threads, log_dir)
        proof = _prove_serves_compiles(pool, device, codegen, log_path)
        _record = _PoolRecord(pool, start_method, threads, env, proof, log_path)
    record = _record
    assert record is not None

    try:
        if not compat.pool_is_running(record.pool):
            raise RuntimeError("the compile worker process has exited")
        worker_pid = int(record.pool.submit(os.getpid).result(timeout=POOL_READY_TIMEOUT_S))
    except Exception as exc:
        _discard_pools()
        raise _failure("flagos: the compile worker pool stopped answering:", exc, record.log_path) from exc
    if worker_pid == os.getpid():
        raise WorkerPoolError("flagos: a pool job ran in this process, not in a worker")
    return CompileWorkers(
        start_method=start_method,
        threads=threads,
        pool=record.pool,
        sidecar_pid=compat.pool_sidecar_pid(record.pool),
        worker_pid=worker_pid,
        started_env=dict(record.started_env),
        proof=record.proof,
        log_path=record.log_path,
    )
