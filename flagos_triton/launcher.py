"""``driver.launcher_cls`` for the flagos host accelerator.

Called like every Triton launcher (Triton 3.6 and 3.7, ``CompiledKernel.run``
and inductor's generated launchers)::

    launcher(grid_x, grid_y, grid_z, stream, function, packed_metadata,
             launch_metadata, launch_enter_hook, launch_exit_hook, *kernel_args)

``kernel_args`` are all kernel parameters in order, constexprs included;
pointer parameters are tensors (``data_ptr()`` is a host pointer on the host
accelerator) or raw integer addresses. The kernel runs synchronously on the
calling thread, directly on that memory (no copies).

Programs run in batches unless the binary's TTIR analysis advises against it
(``analysis.py``): a batch of B programs is one pass over the kernel with every
value carrying a leading dimension B (``builder.py``), B chosen so that a value
holds about ``FLAGOS_HOST_BATCH_ELEMENTS`` elements (default 2**17). If the
programs of a batch take different paths at run time, the batch's writes are
undone and it is rerun one program at a time, so results never depend on the
batching. Otherwise programs run one at a time, in program-id order (x fastest).
"""

from __future__ import annotations

import os

import numpy as np
import triton.language as tl

from . import binary
from ._triton_adapter import TensorHandle, TritonSemantic
from ._triton_adapter import get_np_dtype as _get_np_dtype
from .builder import HostBuilder, NonUniformControlFlow
from .lang_adapter import launch_scope

# Elements per value that a batch aims at: big enough for numpy to amortise
# Python overhead, small enough to keep temporaries in cache-sized memory.
BATCH_ELEMENTS = int(os.environ.get("FLAGOS_HOST_BATCH_ELEMENTS", 1 << 17))
_DEFAULT_PROGRAM_ELEMENTS = 1024

_builder = HostBuilder()
_semantic = TritonSemantic(_builder)


class LaunchError(RuntimeError):
    pass


def _float_to_bf16_bits(value: float) -> np.ndarray:
    from ._triton_adapter import convert_float as _convert_float

    f32 = np.array([value], dtype=np.float32)
    return _convert_float(f32, tl.float32, tl.bfloat16, None).view(np.uint16)


def _scalar_arg(value, ty):
    if ty.is_bf16():
        data = _float_to_bf16_bits(float(value))
    else:
        data = np.array([value], dtype=_get_np_dtype(ty))
    return tl.core.tensor(TensorHandle(data, ty), ty)


def _pointer_arg(value, ty):
    if value is None:
        address = 0
    elif hasattr(value, "data_ptr"):
        address = value.data_ptr()
    else:
        address = int(value)
    return tl.core.tensor(TensorHandle(np.array([address], dtype=np.uint64), ty), ty)


def _kernel_arg(value, sig):
    if isinstance(sig, tuple):
        return tuple(_kernel_arg(v, s) for v, s in zip(value, sig, strict=False))
    if sig == "constexpr":
        return value
    if isinstance(sig, str) and (sig.startswith("tensordesc") or sig == "nvTmaDesc"):
        raise NotImplementedError("tensor descriptor arguments are not supported by the flagos host executor")
    ty = tl.str_to_ty(sig, None)
    if isinstance(ty, tl.pointer_type):
        return _pointer_arg(value, ty)
    return _scalar_arg(value, ty)


def _program_elements(program, args) -> int:
    """Elements in one program's blocks, estimated from *BLOCK* constexprs."""
    total = 1
    found = False
    for name, value in zip(program.arg_names, args, strict=False):
        if "BLOCK" in name.upper() and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total *= value
            found = True
    return total if found else _DEFAULT_PROGRAM_ELEMENTS


class FlagosLauncher:
    """Runs a flagos host binary over a grid."""

    def __init__(self, src, metadata):
        self.name = getattr(metadata, "name", None)
        self.program = None  # loaded lazily from the binary (``function`` argument)

    def __call__(
        self,
        gridX,
        gridY,
        gridZ,
        stream,
        function,
        packed_metadata,
        launch_metadata,
        launch_enter_hook,
        launch_exit_hook,
        *args,
    ):
        program = function if isinstance(function, binary.HostProgram) else self.program
        if program is None:
            raise LaunchError("flagos launcher called without a loaded binary")
        if launch_enter_hook is not None and launch_metadata is not None:
            launch_enter_hook(launch_metadata)
        try:
            run(program, (int(gridX), int(gridY), int(gridZ)), args)
        finally:
            if launch_exit_hook is not None and launch_metadata is not None:
                launch_exit_hook(launch_metadata)


def _bind(program, args):
    names = program.arg_names
    if len(args) != len(names):
        raise LaunchError(f"{program.name}: expected {len(names)} arguments ({', '.join(names)}), got {len(args)}")
    kwargs = {}
    for idx, (name, value) in enumerate(zip(names, args, strict=False)):
        sig = program.signature.get(name, "constexpr")
        if (idx,) in program.constants:
            value = program.constants[(idx,)]
            if isinstance(value, tl.constexpr):
                value = value.value
            kwargs[name] = value
            continue
        kwargs[name] = _kernel_arg(value, sig)
    return kwargs


def run(program, grid, args, batch_elements=None):
    """Run ``program`` over ``grid`` with the kernel arguments ``args``."""
    gx, gy, gz = grid
    total = gx * gy * gz
    if total <= 0:
        return
    kwargs = _bind(program, args)
    if program.batch_ok:
        per_program = _program_elements(program, args)
        target = BATCH_ELEMENTS if batch_elements is None else batch_elements
        chunk = max(1, min(total, target // max(per_program, 1)))
    else:
        chunk = 1
    _builder.set_options(debug=program.debug, sanitize_overflow=program.sanitize_overflow)
    with launch_scope(_semantic):
        start = 0
        while start < total:
            count = min(chunk, total - start)
            _run_chunk(program, kwargs, grid, start, count)
            start += count


def _set_chunk(grid, start, count):
    gx, gy, _ = grid
    linear = np.arange(start, start + count, dtype=np.int64)
    x = (linear % gx).astype(np.int32)
    y = ((linear // gx) % gy).astype(np.int32)
    z = (linear // (gx * gy)).astype(np.int32)
    _builder.set_programs(x, y, z, grid)


def _run_chunk(program, kwargs, grid, start, count):
    _set_chunk(grid, start, count)
    try:
        program.fn(**kwargs)
        return
    except NonUniformControlFlow:
        if count == 1:
            raise
        _builder.rollback()
    # the programs of this batch took different paths: undo its writes, run it one program at a time
    for pid in range(start, start + count):
        _set_chunk(grid, pid, 1)
        program.fn(**kwargs)
