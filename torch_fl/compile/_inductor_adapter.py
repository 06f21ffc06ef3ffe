"""Every version-sensitive touch of torch internals that flagos needs, in one place.

Each function names the upstream code it works around (torch 2.11 - 2.13) and
changes behaviour only for the flagos device type. torch_fl imports
``torch._inductor``, ``torch._dynamo``, ``torch._C`` and the other private torch
modules only here (ruff's TID251 fails any other product file that does), so a
torch upgrade is checked in this one file.

Everything from inductor and dynamo is imported inside the function that needs
it: ``import torch_fl`` must not import inductor (about two seconds), and this
module is imported by torch_fl's own registration.

The entries added with the single adapter (registration hooks, base classes,
worker pool, ``torch._C`` bindings) were checked against the installed torch
2.13; the older entries keep the version notes they were written with.
"""

import threading
import types
from collections.abc import Callable

import torch


def add_gpu_type(device_type: str) -> None:
    """Make inductor treat ``device_type`` as a GPU (is_gpu, autotuning, Triton codegen).

    torch/_inductor/utils.py: ``GPU_TYPES`` is a list that other modules
    imported by object (fx_passes/freezing_patterns.py), so it is extended in
    place. ``get_gpu_type()`` is ``functools.cache``d and asserts that at most
    one of ``GPU_TYPES`` is available: where another GPU is present (cuda on a
    GPU machine) it is resolved first, so it keeps answering that GPU;
    otherwise its cache is cleared so it can answer ``device_type``.
    """
    from torch._inductor import utils

    if device_type in utils.GPU_TYPES:
        return
    others = [t for t in utils.GPU_TYPES if getattr(getattr(torch, t, None), "is_available", lambda: False)()]
    if others:
        utils.get_gpu_type()
    utils.GPU_TYPES.append(device_type)
    if not others:
        utils.get_gpu_type.cache_clear()


def _has_triton_or_flagos():
    # Runs with torch.utils._triton's globals (see make_has_triton_see_device).
    return _flagos_original_has_triton() or _flagos_device_has_triton()  # noqa: F821


def make_has_triton_see_device(device_has_triton) -> None:
    """Let ``torch.utils._triton.has_triton()`` count a flagos device.

    torch/utils/_triton.py: ``has_triton`` is ``functools.cache``d, checks a
    hard-coded set of devices (cuda, xpu, cpu, mtia), and is imported *by name*
    into inductor's scheduler, compile_fx, pad_mm, autotune_cache and dynamo's
    utils, so rebinding the module attribute would reach none of them. All of
    them hold the same cache wrapper, which calls one function object: its code
    is replaced in place by "the original answer, or the flagos device has
    Triton", and the cache is cleared.
    """
    import torch.utils._triton as ut

    if getattr(ut, "_flagos_original_has_triton", None) is not None:
        return
    wrapped = ut.has_triton.__wrapped__
    ut._flagos_original_has_triton = types.FunctionType(
        wrapped.__code__, wrapped.__globals__, wrapped.__name__, wrapped.__defaults__, wrapped.__closure__
    )
    ut._flagos_device_has_triton = device_has_triton
    wrapped.__code__ = _has_triton_or_flagos.__code__
    ut.has_triton.cache_clear()


def time_with_events(fn, *, warmup: float, rep: float, device_type: str) -> float:
    """Median milliseconds of ``fn`` timed by the device's own events.

    The same algorithm as torch 2.13's InductorBenchmarker.benchmark_gpu:
    estimate with a few runs, then time ``rep`` ms worth of runs, each after
    flushing an L2-sized buffer.
    """
    import statistics  # here, not at the top: torch_fl's registration imports this module

    from torch._dynamo.device_interface import get_interface_for_device

    interface = get_interface_for_device(device_type)
    l2_bytes = interface.get_device_properties(interface.current_device()).L2_cache_size
    flush = torch.empty(max(l2_bytes // 4, 1), dtype=torch.int, device=device_type)

    def timed(iterations):
        pairs = [(interface.Event(enable_timing=True), interface.Event(enable_timing=True)) for _ in range(iterations)]
        for start, end in pairs:
            flush.zero_()
            start.record()
            fn()
            end.record()
        interface.synchronize()
        return [start.elapsed_time(end) for start, end in pairs]

    interface.synchronize()
    estimate = min(timed(3))
    warmup_iters = max(int(warmup / max(estimate, 1e-3)), 1)
    for _ in range(min(warmup_iters, 10)):
        fn()
    iterations = max(min(int(rep / max(estimate, 1e-3)), 100), 1)
    return statistics.median(timed(iterations))


def time_benchmarks_with_device_events(device_type: str) -> None:
    """Route inductor's benchmarking of ``device_type`` kernels to the device's events.

    torch/_inductor/runtime/benchmarking.py: ``Benchmarker.benchmark`` sends
    any device it does not know to ``benchmark_gpu`` without a device type,
    which falls back to "cuda" and ``torch.cuda.Event`` -- on a CPU-only wheel
    the dummy class ("Tried to instantiate dummy base class Event").
    - torch 2.13 has ``register_benchmarker``: register one that calls
      inductor's own ``benchmark_gpu(device_type=...)``, whose
      ``get_event_pairs`` builds the device interface's ``Event``.
    - torch 2.11 has no registry and a CUDA-only ``InductorBenchmarker``: the
      shared ``benchmarker`` singleton (imported by name in triton_heuristics,
      autotune_process, ir, select_algorithm...) gets an instance-level
      ``benchmark`` that times ``device_type`` work with ``time_with_events``
      and hands everything else to the original method.
    """
    from torch._inductor.runtime import benchmarking

    register = getattr(benchmarking, "register_benchmarker", None)
    if register is not None:

        def bench(self, fn, *, warmup, rep, **kwargs):
            kwargs.setdefault("device_type", device_type)
            return self.benchmark_gpu(fn, warmup=warmup, rep=rep, **kwargs)

        register(device_type, bench, override=True)
        return

    from torch._dynamo.utils import counters

    singleton = benchmarking.benchmarker
    if getattr(singleton, "_flagos_device_type", None) == device_type:
        return
    original = singleton.benchmark
    config = __import__("torch._inductor.config", fromlist=["config"])

    def benchmark(fn, fn_args=None, fn_kwargs=None, device=None, **kwargs):
        target = torch.device(device) if isinstance(device, str) else device
        if target is None and (fn_args or fn_kwargs):
            target = singleton.infer_device(*(fn_args or ()), **(fn_kwargs or {}))
        if target is None or target.type != device_type:
            return original(fn, fn_args, fn_kwargs, device=device, **kwargs)
        call = fn if not (fn_args or fn_kwargs) else (lambda: fn(*(fn_args or ()), **(fn_kwargs or {})))
        warmup = kwargs.pop("warmup", config.inductor_default_autotune_warmup)
        rep = kwargs.pop("rep", config.inductor_default_autotune_rep)
        # Counted under inductor's own naming (benchmarking.<Benchmarker>.<method>), as 2.13 does.
        counters["inductor"][f"benchmarking.{type(singleton).__name__}.benchmark_gpu"] += 1
        return time_with_events(call, warmup=warmup, rep=rep, device_type=device_type)

    singleton.benchmark = benchmark
    singleton._flagos_device_type = device_type


def initialize_builtin_device_op_overrides() -> None:
    """Load inductor's built-in cuda/cpu/... op overrides before adding flagos's.

    torch 2.11 torch/_inductor/codegen/common.py: ``get_device_op_overrides``
    imports the built-in overrides only while the registry is *empty*, so a
    device registered first would leave cuda with none. 2.13 uses a flag;
    calling it first is harmless there.
    """
    from torch._inductor.codegen.common import get_device_op_overrides

    get_device_op_overrides("cpu")


def wrapper_with_direct_calls(
    device_type: str, header: list[str], extern_kernels: dict[str, str], extern_kernels_allowed: Callable[[], bool]
):
    """PythonWrapperCodegen whose ``device_type`` buffers and extern matmuls take direct calls.

    torch/_inductor/codegen/wrapper.py: ``make_allocation`` emits a C fast path
    (``empty_strided_cuda`` and the like, from ``torch._C._dynamo.guards``)
    only for cpu, cuda, xpu and mtia; any other device gets
    ``empty_strided(..., device=..., dtype=...)``: Python argument parsing and
    a full dispatch for every buffer of every call, about 2 us each, which
    host-bound compiled graphs (hundreds of buffers) pay per call. The
    generic line is rewritten to ``empty_strided_<device>(size, stride,
    dtype)``. A line of another shape (another torch) is left as it is.

    ``_generate_extern_kernel_out_helper`` writes ``extern_kernels.mm(a, b,
    out=buf)`` and the like (``torch.mm`` and its kind: Python argument
    parsing, then the autograd and ADInplaceOrView kernels before the
    device's); a kernel named in ``extern_kernels`` is written under its new
    name instead, for the buffer's device only, in a wrapper generated while
    ``extern_kernels_allowed()`` holds (asked once per wrapper). Where the
    method is missing (another torch), the calls stay as they are.

    ``header`` lines import the new names into the wrapper. ``create`` is a
    staticmethod that names the base class, so it is overridden too;
    subgraphs keep inductor's own class.
    """
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    generic = f", device='{device_type}', dtype="
    fast = f"= empty_strided_{device_type}("

    class DirectCallWrapperCodegen(PythonWrapperCodegen):
        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return PythonWrapperCodegen.create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures)
            return DirectCallWrapperCodegen()

        def write_header(self) -> None:
            super().write_header()
            for line in header:
                self.header.writeline(line)

        def make_allocation(self, *args, **kwargs) -> str:
            line = super().make_allocation(*args, **kwargs)
            if "= empty_strided(" in line and generic in line:
                return line.replace("= empty_strided(", fast, 1).replace(generic, ", ", 1)
            return line

        if hasattr(PythonWrapperCodegen, "_generate_extern_kernel_out_helper"):

            def _generate_extern_kernel_out_helper(self, kernel, out, out_view, args, device, *rest, **kwargs):
                if not hasattr(self, "_direct_extern_kernels"):
                    self._direct_extern_kernels = extern_kernels if extern_kernels_allowed() else {}
                if str(device).split(":")[0] == device_type:  # a device type, or a torch.device
                    kernel = self._direct_extern_kernels.get(kernel, kernel)
                return super()._generate_extern_kernel_out_helper(kernel, out, out_view, args, device, *rest, **kwargs)

    return DirectCallWrapperCodegen


def launch_statically_as(device_type: str, native_type: str) -> None:
    """Let inductor's static launcher run ``device_type`` kernels built as ``native_type`` binaries.

    torch/_inductor/runtime/triton_heuristics.py:
    ``StaticTritonCompileResult.can_statically_launch`` accepts only device
    types cuda, xpu and hip, so every other device's kernels go through
    Triton's own launcher (Python argument handling and ``cuLaunchKernelEx``:
    a few microseconds more per launch, and a C launcher compiled per kernel
    signature). On the cuda accelerator a flagos kernel *is* a CUDA kernel
    (cubin from Triton's NVIDIA back end) and the launcher is handed the raw
    flagos stream, so the check is asked as for ``native_type``.
    ``reload_cubin_path`` (a kernel loaded from inductor's caches) looks the
    binary's extension up by the compile's device type, hence the
    ``GPU_KERNEL_BIN_EXTS`` entry. Must run in every process that compiles
    kernels (compile workers included).
    """
    from torch._inductor import utils
    from torch._inductor.runtime import triton_heuristics

    result_cls = getattr(triton_heuristics, "StaticTritonCompileResult", None)
    if result_cls is None or getattr(result_cls, "_flagos_launches_as", None) is not None:
        return
    original = result_cls.can_statically_launch

    def can_statically_launch(kernel, inductor_meta, triton_meta, heuristic_type):
        if triton_meta.get("device_type") == device_type:
            triton_meta = {**triton_meta, "device_type": native_type}
        return original(kernel, inductor_meta, triton_meta, heuristic_type)

    result_cls.can_statically_launch = staticmethod(can_statically_launch)
    result_cls._flagos_launches_as = native_type
    utils.GPU_KERNEL_BIN_EXTS.setdefault(device_type, utils.GPU_KERNEL_BIN_EXTS[native_type])


def conv_layout_of_compute_device(device_type: str) -> None:
    """Fake convolutions of ``device_type`` predict the layout cuDNN gives, as they do for cuda.

    torch/_subclasses/fake_impls.py (``conv``): a fake convolution's output
    layout is ``torch._C._conv_determine_backend_memory_format`` of the
    backend ``_select_conv_backend`` picks, which for any PrivateUse1 tensor
    is ``Overrideable``, whose layout is always contiguous. On the cuda
    accelerator flagos convolutions run cuDNN, which keeps channels-last
    inputs channels-last: the predicted contiguous layout cost a copy after
    every such convolution (and inductor makes a graph's convolutions
    channels-last). The flagos kernel predicts with cuDNN's rule too
    (csrc/aten/fallback.cpp, ``predicted_conv_format``), so fake and real agree.
    """
    original = torch._C._conv_determine_backend_memory_format
    if getattr(original, "_flagos_device_type", None) == device_type:
        return
    backends = torch._C._ConvBackend

    def determine_backend_memory_format(input, weight, backend):
        if backend == backends.Overrideable and input.device.type == device_type:
            backend = backends.Cudnn
        return original(input, weight, backend)

    determine_backend_memory_format._flagos_device_type = device_type
    torch._C._conv_determine_backend_memory_format = determine_backend_memory_format


def meta_layouts_of_compute_device(device_type: str, compute_type: str) -> None:
    """Meta kernels predict for ``device_type`` the layouts ``compute_type``'s kernels give.

    torch/_meta_registrations.py (``device_hint``, torch 2.11 - 2.13): the meta
    kernels of the FFTs (``_fft_c2c``, ``_fft_r2c``, ``_fft_c2r``: cuFFT's
    staged layout or MKL's), ``linalg_eig`` and ``_linalg_svd`` (row- or
    column-major vectors), ``nonzero_static`` and the 2d paddings'
    channels-last output (``_pad2d_common``) pick their strides by the fake tensor's device type
    name, as "cuda" or "anything else". flagos runs the compute device's own
    kernels (cuFFT and cuSOLVER on the cuda accelerator, the CPU's on the host),
    so under the name "flagos" the prediction was the other family's: compiled
    ``fft.ifft`` failed inductor's stride assertion on the cuda accelerator, and
    ``nonzero_static``'s on the host. ``device_hint`` is looked up as a module
    global at each call (torch/_refs imports it at call time too), so wrapping
    the module attribute reaches every caller; other device types are untouched.
    """
    from torch import _meta_registrations as meta_registrations

    original = meta_registrations.device_hint
    if getattr(original, "_flagos_device_type", None) == device_type:
        return

    def device_hint(tensor) -> str:
        hint = original(tensor)
        return compute_type if hint == device_type else hint

    device_hint._flagos_device_type = device_type
    device_hint.__wrapped__ = original
    meta_registrations.device_hint = device_hint


def share_template_heuristics(device_type: str, like: str = "cuda") -> int:
    """Give ``device_type`` the GEMM template heuristics registered for ``like``.

    torch/_inductor/template_heuristics/registry.py: template configs (mm, bmm,
    addmm, ... for the Triton templates and aten choices) are looked up by
    ``(template, device type[, op])``; a device type with no entry gets an empty
    fallback and an error-level "No template heuristic found" log line on every
    lookup, and max-autotune has no GEMM templates for it. flagos devices run
    Triton like cuda (on the cuda accelerator, the same kernels), so they get
    cuda's entries. The key layout differs across torch 2.11-2.13 (device type
    second in each tuple), and lookups are cached (a dict in 2.13, a
    functools.cache before): both are cleared. Returns the number of entries added.
    """
    try:
        from torch._inductor.template_heuristics import registry
    except ImportError:  # a torch without the registry: nothing to share
        return 0
    table = getattr(registry, "_TEMPLATE_HEURISTIC_REGISTRY", None)
    if not isinstance(table, dict):
        return 0
    added = 0
    for key, heuristic in list(table.items()):
        if len(key) >= 2 and key[1] == like:
            mirrored = (key[0], device_type, *key[2:])
            if mirrored not in table:
                table[mirrored] = heuristic
                added += 1
    cache = getattr(registry, "_HEURISTIC_CACHE", None)
    if isinstance(cache, dict):
        cache.clear()
    for name in ("get_template_heuristic", "get_registered_heuristic_class"):
        cache_clear = getattr(getattr(registry, name, None), "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
    return added


# --- torch._C: the core bindings torch_fl reads -------------------------------------------------


def privateuse1_backend_name() -> str:
    """torch._C._get_privateuse1_backend_name (c10/core/DeviceType.cpp): PrivateUse1's current
    name, ``"privateuseone"`` until ``torch.utils.rename_privateuse1_backend``. Checked on 2.13."""
    return torch._C._get_privateuse1_backend_name()


def has_privateuse1_fallback() -> bool:
    """torch._C._dispatch_has_backend_fallback(DispatchKey.PrivateUse1)
    (torch/csrc/utils/python_dispatch.cpp): whether an extension registered a boxed fallback
    for PrivateUse1. False where this torch lacks the binding. Checked on 2.13."""
    has_fallback = getattr(torch._C, "_dispatch_has_backend_fallback", None)
    return bool(has_fallback and has_fallback(torch._C.DispatchKey.PrivateUse1))


def cuda_event_base():
    """torch._C._CudaEventBase (torch/csrc/cuda/Event.cpp), or None: in a build without CUDA
    torch/cuda/streams.py puts a ``torch._utils._dummy_type`` placeholder (a Python class)
    in its place. Checked on 2.13."""
    return getattr(torch._C, "_CudaEventBase", None)


# --- registration: what dynamo and inductor look up by device type ------------------------------


def register_device_interface(device_type: str, interface) -> None:
    """torch/_dynamo/device_interface.py ``register_interface_for_device``: the DeviceInterface
    dynamo, inductor and the compile workers ask about a device ("flagos" and "flagos:N").
    Checked on 2.13."""
    from torch._dynamo.device_interface import register_interface_for_device

    register_interface_for_device(device_type, interface)


def device_op_overrides(device_type: str):
    """torch/_inductor/codegen/common.py ``get_device_op_overrides``: the snippets the Python
    wrapper emits for a device type (benchmarks run them as compiled code would)."""
    from torch._inductor.codegen.common import get_device_op_overrides

    return get_device_op_overrides(device_type)


def register_device_op_overrides(device_type: str, overrides) -> None:
    """torch/_inductor/codegen/common.py ``register_device_op_overrides``: the source snippets
    (stream, device guard, synchronize) the Python wrapper emits. Checked on 2.13."""
    from torch._inductor.codegen.common import register_device_op_overrides as register

    register(device_type, overrides)


def register_backend_for_device(
    device_type: str, scheduling, wrapper, cache_identity: Callable[[], str] | None = None
) -> None:
    """torch/_inductor/codegen/common.py ``register_backend_for_device``: the kernel scheduling
    and wrapper codegen classes inductor uses for a device type, and its ``device_custom_pass``,
    a graph pass run on the device's graphs whose ``uuid()`` goes into every FX graph cache key
    (codecache.py ``FxGraphHashDetails.custom_backend_passes``). Given ``cache_identity``, the
    pass changes nothing and its uuid is what that function returns, asked per key: cached
    graphs compiled under another identity are not reused. Every device's pass is in every key,
    so cuda graphs cached by a process without torch_fl are compiled once more in one with it.
    Checked on 2.11-2.13."""
    from torch._inductor.codegen.common import register_backend_for_device as register

    if cache_identity is None:
        register(device_type, scheduling, wrapper)
    else:
        register(device_type, scheduling, wrapper, device_custom_pass=identity_pass(cache_identity))


def identity_pass(identity: str | Callable[[], str]):
    """torch/_inductor/custom_graph_pass.py ``CustomGraphModulePass`` that leaves the graph as it
    is and names ``identity`` (or what it returns) as its uuid. Checked on 2.11-2.13."""
    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    class CompiledBy(CustomGraphModulePass):
        def __call__(self, gm) -> None:
            pass  # only its uuid matters

        def uuid(self) -> str:
            return identity() if callable(identity) else identity

    return CompiledBy()


# --- base classes torch_fl subclasses (imported when first asked for, see the module docstring) -


def device_interface_base():
    """torch/_dynamo/device_interface.py ``DeviceInterface``. Checked on 2.13."""
    from torch._dynamo.device_interface import DeviceInterface

    return DeviceInterface


def worker_device_caches():
    """torch/_dynamo/device_interface.py ``caching_worker_current_devices`` and
    ``caching_worker_device_properties``: module-level dicts (device type -> current index,
    device type -> properties of every device) that inductor's pre_fork_setup fills in the
    parent so that a compile worker answers without touching the device. The dicts themselves
    are returned: they are only ever updated in place. Checked on 2.13."""
    from torch._dynamo import device_interface

    return device_interface.caching_worker_current_devices, device_interface.caching_worker_device_properties


def device_op_overrides_base():
    """torch/_inductor/codegen/common.py ``DeviceOpOverrides``. Checked on 2.13."""
    from torch._inductor.codegen.common import DeviceOpOverrides

    return DeviceOpOverrides


def triton_scheduling_base():
    """torch/_inductor/codegen/triton.py ``TritonScheduling``. Checked on 2.13."""
    from torch._inductor.codegen.triton import TritonScheduling

    return TritonScheduling


# --- compiling and the compile worker pool ------------------------------------------------------


def inductor_compiler(mode, options):
    """torch/__init__.py ``_TorchCompileInductorWrapper(mode, options, dynamic)``: what
    ``torch.compile(backend="inductor", mode=..., options=...)`` hands dynamo, so the flagos
    backend gives ``mode`` and ``options`` inductor's meaning. Checked on 2.13."""
    return torch._TorchCompileInductorWrapper(mode, options, None)


def inductor_config():
    """torch/_inductor/config.py (``worker_start_method``, ``compile_threads``...). Checked on 2.13."""
    from torch._inductor import config

    return config


def maybe_warm_pool() -> None:
    """torch/_inductor/async_compile.py ``maybe_warm_pool``: start the compile worker pool
    ahead of the first kernel unless the environment opts out (TORCH_WARM_POOL=0, no Triton,
    fbcode), as a ``backend="inductor"`` compile does. Checked on 2.13."""
    from torch._inductor.async_compile import maybe_warm_pool as warm

    warm()


def shutdown_compile_workers() -> None:
    """torch/_inductor/async_compile.py ``shutdown_compile_workers``: shut every pool down and
    clear ``AsyncCompile.process_pool``'s cache, so the next compile starts a new pool.
    Checked on 2.13."""
    from torch._inductor import async_compile

    async_compile.shutdown_compile_workers()


# --- CUDA graphs (mode="reduce-overhead") ---------------------------------------------------------

_cuda_graph_owner = threading.local()  # .device_type while a post-compile wraps a graph of that type


def record_cuda_graphs_for(device_type: str, why_not, cudagraphify, report_skip) -> bool:
    """Let ``mode="reduce-overhead"`` record CUDA graphs of ``device_type`` graphs with ``cudagraphify``.

    torch/_inductor/cudagraph_utils.py ``check_multiple_devices_or_any_cpu_nodes`` (called through
    ``check_lowering_disable_cudagraph`` by compile_fx at lowering, a module global looked up per
    call) accepts one device of type "cuda" only, and says "skipping cudagraphs due to multiple
    devices: flagos:0" of a graph on one flagos device: wrapped so that such a graph gets
    ``why_not(fx_graph)`` instead (None: record it), every other mapping the original answer.
    torch/_inductor/output_code.py ``cudagraph_post_compile`` and
    ``cudagraph_partition_post_compile`` (module globals of ``CompiledFxGraph.post_compile``) import
    ``compile_fx.cudagraphify`` at each call and hand it each graph or partition: they are wrapped to
    mark, per thread, a graph whose ``device_types`` hold ``device_type``, and
    ``compile_fx.cudagraphify`` to send a marked graph to ``cudagraphify`` (the cudagraph trees are
    CUDA's only) and the rest to the original. ``output_code.maybe_handle_backward_generation``
    (a module global of both post-compiles) tells cuda's tree manager that a backward it does not
    record runs, and asserts that there is one: a no-op for a marked graph, whose forward no tree
    manager recorded. Inductor logs a skip only of a graph with cuda in it:
    ``report_skip(reason)`` reports the flagos graphs' own. Checked on 2.13; returns whether every
    hook was found (False: reduce-overhead stays skipped for ``device_type``, as upstream).
    """
    from torch._inductor import compile_fx, cudagraph_utils, output_code

    if getattr(compile_fx.cudagraphify, "_flagos_device_type", None) == device_type:
        return True
    original_check = getattr(cudagraph_utils, "check_multiple_devices_or_any_cpu_nodes", None)
    post_compiles = [
        name
        for name in ("cudagraph_post_compile", "cudagraph_partition_post_compile")
        if callable(getattr(output_code, name, None))
    ]
    if original_check is None or "cudagraph_post_compile" not in post_compiles:
        return False

    def check_multiple_devices_or_any_cpu_nodes(device_node_mapping):
        devices = {device for device in device_node_mapping if device.type != "meta"}
        if getattr(cudagraph_utils, "is_using_cudagraph_partition", lambda: False)():
            devices.discard(torch.device("cpu"))
        if not any(device.type == device_type for device in devices):
            return original_check(device_node_mapping)
        if len(devices) == 1:
            from torch._inductor.virtualized import V

            reason = why_not(getattr(V.graph, "graph", None) if V.graph is not None else None)
        else:
            reason = original_check(device_node_mapping)
        if reason is not None:
            report_skip(reason)
        return reason

    def marking(original):
        def post_compile(example_inputs, compiled_graph, *args, **kwargs):
            device_types = getattr(compiled_graph, "device_types", None) or ()
            if device_type not in device_types:
                return original(example_inputs, compiled_graph, *args, **kwargs)
            reasons = getattr(getattr(compiled_graph, "cudagraph_info", None), "cudagraph_fail_reasons", None)
            if reasons and "cuda" not in device_types:  # inductor counts and logs these for cuda only
                report_skip(f"flagos: inductor does not record this graph: {'; '.join(map(str, reasons))}")
                count_cuda_graph_skip()
            _cuda_graph_owner.device_type = device_type
            try:
                return original(example_inputs, compiled_graph, *args, **kwargs)
            finally:
                _cuda_graph_owner.device_type = None

        post_compile.__wrapped__ = original
        return post_compile

    original_cudagraphify = compile_fx.cudagraphify

    def routed_cudagraphify(model, static_input_idxs=(), **kwargs):
        if getattr(_cuda_graph_owner, "device_type", None) == device_type:
            return cudagraphify(model, static_input_idxs, **kwargs)
        return original_cudagraphify(model, static_input_idxs, **kwargs)

    check_multiple_devices_or_any_cpu_nodes.__wrapped__ = original_check
    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = check_multiple_devices_or_any_cpu_nodes
    for name in post_compiles:
        setattr(output_code, name, marking(getattr(output_code, name)))
    original_backward_generation = getattr(output_code, "maybe_handle_backward_generation", None)
    if original_backward_generation is not None:

        def maybe_handle_backward_generation(*args, **kwargs):
            if getattr(_cuda_graph_owner, "device_type", None) == device_type:
                return None  # no cuda tree manager recorded the forward: nothing to tell it
            return original_backward_generation(*args, **kwargs)

        maybe_handle_backward_generation.__wrapped__ = original_backward_generation
        output_code.maybe_handle_backward_generation = maybe_handle_backward_generation
    routed_cudagraphify.__wrapped__ = original_cudagraphify
    routed_cudagraphify._flagos_device_type = device_type
    compile_fx.cudagraphify = routed_cudagraphify
    return True


def cuda_graph_recorder():
    """torch/_inductor/compile_fx.py ``cudagraphify_impl(model, inputs, static_input_idxs)``: inductor's
    CUDA graph recorder without trees (static inputs, a warm-up, one capture; returns the replaying
    callable), or None where this torch lacks it. Checked on 2.13."""
    from torch._inductor import compile_fx

    return getattr(compile_fx, "cudagraphify_impl", None)


def preserved_rng_state():
    """torch/_dynamo/utils.py ``preserve_rng_state``: what ``compile_fx.cudagraphify`` records under,
    so the warm-up and capture runs leave the RNG state as it was. Checked on 2.13."""
    from torch._dynamo.utils import preserve_rng_state

    return preserve_rng_state()


def count_cuda_graph_skip() -> None:
    """``counters["inductor"]["cudagraph_skips"]`` (torch/_dynamo/utils.py), where inductor counts
    every graph that mode="reduce-overhead" runs without a CUDA graph. Checked on 2.13."""
    from torch._dynamo.utils import counters

    counters["inductor"]["cudagraph_skips"] += 1
