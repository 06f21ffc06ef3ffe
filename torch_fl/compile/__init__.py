"""torch.compile integration: flagos as a first-class inductor GPU device.

inductor generates Triton kernels for flagos tensors (compiled by the flagos
Triton back end on the host accelerator), autotunes them with flagos events
and compiles them in parallel worker processes.
"""

import functools

import torch

from flagos_autoload.device_type import DEVICE_TYPE

from ._after_import import call_after_import

_registered = False


def device_has_triton() -> bool:
    """Whether flagos kernels can be compiled by Triton in this process."""
    if not torch.flagos.is_available():
        return False
    try:
        import triton.backends
    except ImportError:
        return False
    wanted = "nvidia" if torch.flagos.accelerator_name() == "cuda" else DEVICE_TYPE
    return wanted in triton.backends.backends


def register() -> None:
    """Registers flagos with dynamo and inductor (idempotent)."""
    global _registered
    if _registered:
        return
    _registered = True
    from .. import _C
    from . import _inductor_adapter as adapter
    from .cache_identity import compile_identity
    from .device_interface import FlagosInterface
    from .op_overrides import FlagosDeviceOpOverrides
    from .scheduling import FlagosScheduling

    adapter.register_device_interface(DEVICE_TYPE, FlagosInterface)
    for index in range(torch.flagos.device_count()):
        adapter.register_device_interface(f"{DEVICE_TYPE}:{index}", FlagosInterface)
    adapter.initialize_builtin_device_op_overrides()
    adapter.register_device_op_overrides(DEVICE_TYPE, FlagosDeviceOpOverrides())
    # Compiled code's buffers and extern matmuls call torch_fl._C directly (see the adapter).
    matmuls = ("mm", "addmm", "bmm")
    header = [f"from torch_fl._C import _empty_strided as empty_strided_{DEVICE_TYPE}"]
    header += [f"from torch_fl._C import _compiled_{op} as {op}_{DEVICE_TYPE}" for op in matmuls]
    extern_kernels = {f"extern_kernels.{op}": f"{op}_{DEVICE_TYPE}" for op in matmuls}
    # Not where a kernel was registered over flagos's for one of them since: that one must run.
    allowed = _C._compiled_matmul_kernels_unchanged
    wrapper = adapter.wrapper_with_direct_calls(DEVICE_TYPE, header, extern_kernels, allowed)
    adapter.register_backend_for_device(DEVICE_TYPE, FlagosScheduling, wrapper, compile_identity)
    adapter.add_gpu_type(DEVICE_TYPE)
    adapter.make_has_triton_see_device(device_has_triton)
    adapter.time_benchmarks_with_device_events(DEVICE_TYPE)
    adapter.share_template_heuristics(DEVICE_TYPE)
    from . import cuda_graphs

    adapter.record_cuda_graphs_for(
        DEVICE_TYPE, cuda_graphs.why_not_captured, cuda_graphs.cudagraphify, cuda_graphs.report_skip
    )


def install() -> None:
    """Register as soon as torch._dynamo is imported (now, if it already is).

    Backstops: inductor's own privateuse1 hook (``torch.flagos.Scheduling``,
    looked up when the first graph is lowered) and ``backend="flagos"`` (the
    ``torch_dynamo_backends`` entry point) both call ``register()`` too.
    On the cuda accelerator flagos kernels are cubins: inductor's static
    launcher takes them wherever its kernel runtime is imported (compile
    workers too, which never import torch._dynamo's registration path first);
    and fake convolutions predict cuDNN's layout from the start, as the eager
    kernel does (CrossRefFakeMode compares them without torch._dynamo).
    On both accelerators the meta kernels that choose a layout by device type
    predict the compute device's (torch._meta_registrations is imported by
    ``import torch`` already).
    """
    from . import _inductor_adapter as adapter

    call_after_import("torch._dynamo", register)
    compute_type = "cuda" if torch.flagos.accelerator_name() == "cuda" else "cpu"
    adapter.meta_layouts_of_compute_device(DEVICE_TYPE, compute_type)
    if compute_type == "cuda":
        adapter.conv_layout_of_compute_device(DEVICE_TYPE)
        launch_as_cuda = functools.partial(adapter.launch_statically_as, DEVICE_TYPE, "cuda")
        call_after_import("torch._inductor.runtime.triton_heuristics", launch_as_cuda)
