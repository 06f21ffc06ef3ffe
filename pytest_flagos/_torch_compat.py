"""The one place the plugin and the conformance suite touch torch internals.

Every name is looked up with getattr so the plugin works on torch 2.11 through
2.13; each function names the upstream code it relies on. pytest_flagos and
conformance/ import ``torch._dynamo``, ``torch._inductor``, ``torch._C``,
``torch._subclasses``, ``torch.testing._internal`` and torch.utils' private
modules only here (ruff's TID251 fails any other file of theirs that does).
Everything is imported inside the function that needs it: loading the plugin
must not import inductor. The entries added with the lint rule (from
``privateuse1_backend_name`` on, and ``reset_dynamo``'s keyword) were checked
against the installed torch 2.13.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable, Iterator


def dynamo_counters() -> Any:
    """torch._dynamo.utils.counters: the Counter-of-Counters dynamo and inductor fill."""
    from torch._dynamo.utils import counters

    return counters


def reset_dynamo(*, clear_counters: bool = True) -> None:
    """torch._dynamo.reset() and clear counters: no cached graphs, no stale statistics.
    ``clear_counters=False``: torch._dynamo.reset() alone (the counters keep counting)."""
    import torch._dynamo

    torch._dynamo.reset()
    if clear_counters:
        dynamo_counters().clear()


def fresh_cache(dir: str) -> Any:
    """torch._inductor.utils.fresh_cache (named fresh_inductor_cache before torch 2.8):
    a new TORCHINDUCTOR_CACHE_DIR under `dir` with TRITON_CACHE_DIR inside it, in-memory
    caches cleared on entry and exit, environment restored on exit."""
    from torch._inductor import utils

    factory = getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache
    return factory(dir=dir, delete=False)


# --- compile worker pool (torch/_inductor/async_compile.py, compile_worker/) ---------------


def async_compile() -> Any:
    from torch._inductor import async_compile as module

    return module


def inductor_config() -> Any:
    from torch._inductor import config

    return config


def compile_threads() -> int:
    """async_compile.get_compile_threads(): config.compile_threads, decided lazily in fbcode."""
    module = async_compile()
    getter = getattr(module, "get_compile_threads", None)
    if getter is not None:
        return int(getter())
    return int(inductor_config().compile_threads)


def process_pool_allowed() -> bool:
    """async_compile._process_pool_allowed(): multiprocessing daemons may not start pools
    (except the subprocess start method, whose sidecar is a plain Popen)."""
    check = getattr(async_compile(), "_process_pool_allowed", None)
    return True if check is None else bool(check())


def live_pools() -> list[Any]:
    """async_compile._pool_set: every pool AsyncCompile.process_pool() created and that
    shutdown_compile_workers() has not shut down yet."""
    return list(getattr(async_compile(), "_pool_set", ()))


def shutdown_pools() -> None:
    """async_compile.shutdown_compile_workers(): shut every pool down and clear
    AsyncCompile.process_pool's lru_cache, so the next use starts a new pool."""
    async_compile().shutdown_compile_workers()


def start_pool() -> Any:
    """AsyncCompile.warm_pool() creates the pool (a SubprocPool's sidecar process starts) and
    wakeup() tells the sidecar to start its workers; ready_future() then says when a worker
    has answered."""
    ac = async_compile().AsyncCompile
    ac.warm_pool()
    ac.wakeup()
    return ac.process_pool()


def ready_future() -> Any:
    """AsyncCompile._ready_future: the pool's first job (AsyncCompile._get_ready), submitted
    by use_process_pool(); done once a worker ran it. None if this torch lacks it."""
    ac = async_compile().AsyncCompile
    ac.use_process_pool()  # submits the ready job if it was not yet
    return getattr(ac, "_ready_future", None)


def pool_in_use() -> bool:
    """AsyncCompile.use_process_pool(): True once the pool answered its ready job; from then
    on inductor sends Triton compiles to the pool instead of compiling in-process."""
    return bool(async_compile().AsyncCompile.use_process_pool())


def pool_sidecar_pid(pool: Any) -> int | None:
    """SubprocPool.process is the Popen of `python -m torch._inductor.compile_worker`."""
    process = getattr(pool, "process", None)
    return getattr(process, "pid", None)


def pool_exit_status(pool: Any) -> int | None:
    """The exit status of a SubprocPool's sidecar once it has exited, else None.

    SubprocPool (compile_worker/subproc_pool.py) keeps the child's ends of both pipes open in
    the parent, so its reader thread never sees EOF when the sidecar dies: pending futures
    then never complete, and only polling the process shows the death."""
    process = getattr(pool, "process", None)
    return None if process is None else process.poll()


def pool_is_running(pool: Any) -> bool:
    """SubprocPool: `running` and a live sidecar; ProcessPoolExecutor: not broken or shut down."""
    if hasattr(pool, "running"):
        return bool(pool.running) and pool_exit_status(pool) is None
    return not getattr(pool, "_broken", False) and not getattr(pool, "_shutdown_thread", False)


def pool_receives_cache_env_per_task() -> bool:
    """Since torch 2.6, AsyncCompile.triton passes TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR
    with every job (runtime/compile_tasks._worker_compile_triton(load_kernel, extra_env, ...)),
    so a pool started under another cache directory still compiles into the current one."""
    try:
        from torch._inductor.runtime.compile_tasks import _worker_compile_triton
    except ImportError:
        return False
    return "extra_env" in inspect.signature(_worker_compile_triton).parameters


def worker_logpath_option() -> str | None:
    """config.torchinductor_worker_logpath (TORCHINDUCTOR_WORKER_LOGPATH): where a
    SubprocPool's sidecar writes its stdout/stderr; None if this torch lacks it."""
    config = inductor_config()
    name = "torchinductor_worker_logpath"
    return name if hasattr(config, name) else None


@contextlib.contextmanager
def record_pool_jobs(pool: Any) -> Iterator[list[tuple[str, Any]]]:
    """Record (job name, future) of every job submitted to `pool` inside the block.

    Wraps the submit method of this one pool object (an instance attribute, removed on
    exit); SubprocPool.submit and ProcessPoolExecutor.submit both take (fn, *args)."""
    jobs: list[tuple[str, Any]] = []
    original: Callable[..., Any] = pool.submit

    def submit(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        future = original(fn, *args, **kwargs)
        jobs.append((getattr(fn, "__name__", type(fn).__name__), future))
        return future

    pool.submit = submit
    try:
        yield jobs
    finally:
        del pool.submit  # back to the class's method


# --- config for repro scripts -----------------------------------------------------------------


def config_codegen() -> list[str]:
    """torch._dynamo.config / torch._inductor.config codegen_config(): Python lines that set
    every option whose value differs from its default (what inductor's minifier writes)."""
    import torch._dynamo.config as dynamo_config

    lines: list[str] = []
    for config in (dynamo_config, inductor_config()):
        codegen = getattr(config, "codegen_config", None)
        if codegen is None:
            continue
        try:
            text = codegen()
        except Exception:  # an option whose value cannot be written as Python
            continue
        lines.extend(line for line in text.splitlines() if line.strip())
    return lines


# --- torch._C -----------------------------------------------------------------------------------


def privateuse1_backend_name() -> str:
    """torch._C._get_privateuse1_backend_name() (c10/core/DeviceType.cpp): PrivateUse1's
    current name, "privateuseone" until torch.utils.rename_privateuse1_backend()."""
    import torch

    return torch._C._get_privateuse1_backend_name()


# --- dynamo -------------------------------------------------------------------------------------


def get_device_interface(device_type: str) -> Any:
    """torch._dynamo.device_interface.get_interface_for_device(device_type): the DeviceInterface
    registered for the device type (raises where there is none). torch._dynamo is imported
    first: devices may register their interface on that import (torch_fl does)."""
    import torch._dynamo  # noqa: F401
    from torch._dynamo.device_interface import get_interface_for_device

    return get_interface_for_device(device_type)


def list_dynamo_backends() -> list[str]:
    """torch._dynamo.list_backends(exclude_tags=()) (backends/registry.py): every registered
    torch.compile backend name, the debug and experimental ones included."""
    from torch._dynamo import list_backends

    return list(list_backends(exclude_tags=()))


def lookup_dynamo_backend(name: str) -> Any:
    """torch._dynamo.backends.registry.lookup_backend(name): the compiler function a
    torch.compile backend name stands for (entry points loaded on demand)."""
    from torch._dynamo.backends.registry import lookup_backend

    return lookup_backend(name)


def mark_dynamic(tensor: Any, dim: int) -> None:
    """torch._dynamo.mark_dynamic(tensor, dim) (torch/_dynamo/decorators.py): compile that
    dimension of the input as a symbolic size from the first graph on."""
    import torch._dynamo

    torch._dynamo.mark_dynamic(tensor, dim)


# --- inductor -----------------------------------------------------------------------------------


def is_inductor_gpu(device_type: str) -> bool:
    """torch._inductor.utils.is_gpu(device_type): whether inductor treats the device type as a
    GPU (utils.GPU_TYPES: Triton kernels, autotuning)."""
    from torch._inductor.utils import is_gpu

    return bool(is_gpu(device_type))


def scheduling_for_device(device_type: str) -> Any:
    """torch._inductor.codegen.common.get_scheduling_for_device(device_type) after
    init_backend_registration() (which registers the built-in devices): the scheduling class
    the device registered, or None."""
    from torch._inductor.codegen import common

    common.init_backend_registration()
    return common.get_scheduling_for_device(device_type)


def inductor_benchmarker() -> Any:
    """torch._inductor.runtime.benchmarking.benchmarker: the shared Benchmarker singleton that
    triton_heuristics' autotuner (and select_algorithm) time kernels with."""
    from torch._inductor.runtime.benchmarking import benchmarker

    return benchmarker


# --- fake tensors, dispatch modes, pytrees ------------------------------------------------------


def cross_ref_fake_mode_class() -> type:
    """torch._subclasses.fake_utils.CrossRefFakeMode: a dispatch mode that runs every op on
    fake tensors too and fails where the fake (meta) result's sizes, strides or dtype differ."""
    from torch._subclasses.fake_utils import CrossRefFakeMode

    return CrossRefFakeMode


def has_meta(func: Any) -> bool:
    """torch._subclasses.fake_impls.has_meta(op): whether the op has a meta kernel (the ops
    CrossRefFakeMode compares)."""
    from torch._subclasses.fake_impls import has_meta as check

    return bool(check(func))


def torch_dispatch_mode_class() -> type:
    """torch.utils._python_dispatch.TorchDispatchMode: the base class of a mode whose
    __torch_dispatch__ sees every aten op called under it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def pytree() -> Any:
    """torch.utils._pytree: tree_leaves, tree_map, tree_flatten and tree_unflatten over the
    containers torch knows (lists, tuples, dicts, namedtuples, torch.return_types)."""
    from torch.utils import _pytree

    return _pytree


# --- the OpInfo database ------------------------------------------------------------------------


def opinfo_op_db() -> list[Any]:
    """torch.testing._internal.common_methods_invocations.op_db: PyTorch's OpInfo entries.
    Importing it has side effects (torch.backends' flags frozen): see opinfo.load_op_db."""
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def opinfo_decorations(op: Any, cls_name: str, test_name: str, device_type: str, dtype: Any) -> list[Any]:
    """The decorators an OpInfo applies to torch's test `cls_name.test_name` on the device type
    in the dtype (DecorateInfo.is_active in torch/testing/_internal/opinfo/core.py; its
    param_kwargs argument is newer than some releases, so it is passed only where taken)."""
    found: list[Any] = []
    for info in getattr(op, "decorators", ()) or ():
        is_active = getattr(info, "is_active", None)
        if is_active is None:
            continue
        args: tuple[Any, ...] = (cls_name, test_name, device_type, dtype)
        if len(inspect.signature(is_active).parameters) > len(args):
            args += ({},)
        if is_active(*args):
            found.extend(getattr(info, "decorators", ()))
    return found
