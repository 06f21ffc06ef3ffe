"""Compiler half of the ``flagos`` Triton back end (host accelerator).

Stages (``add_stages``):

* ``ttir`` -- the target-independent TTIR pipeline (what the nvidia back end's
  ``make_ttir`` runs, plus LICM), so front-end and TTIR errors surface where
  compilation happens, as they would for a GPU;
* ``flagosbin`` -- the binary: a self-contained JSON document (see
  ``binary.py``) holding the kernel's Python source and what it needs to run.

This module must hold exactly one concrete ``BaseBackend`` subclass (Triton's
``_find_concrete_subclasses``); keep other back ends' classes out of its
namespace.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any, Dict, Optional, Tuple

from triton.backends.compiler import BaseBackend, GPUTarget, Language

from ._triton_adapter import ir, passes

BACKEND_NAME = "flagos"
BINARY_EXT = "flagosbin"


@dataclass(frozen=True)
class FlagosOptions:
    # Fields read by Triton's front end, JIT hooks and inductor (metadata).
    num_warps: int = 4
    num_ctas: int = 1
    num_stages: int = 3
    warp_size: int = 32
    maxnreg: Optional[int] = None
    enable_fp_fusion: bool = True
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    supported_fp8_dtypes: Tuple[str, ...] = ("fp8e4b15", "fp8e4nv", "fp8e5")
    deprecated_fp8_dot_operand_dtypes: Tuple[str, ...] = ()
    default_dot_input_precision: str = "tf32"
    allowed_dot_input_precisions: Tuple[str, ...] = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")
    max_num_imprecise_acc_default: int = 0
    extern_libs: Optional[Tuple] = None
    debug: bool = False
    backend_name: str = BACKEND_NAME
    sanitize_overflow: bool = True
    arch: Any = None
    instrumentation_mode: str = ""
    ir_override: Optional[str] = None

    def __post_init__(self):
        # Nothing is linked on the host: libdevice calls are run by numpy/torch
        # implementations (``libdevice_impl.py``) keyed by the extern symbol.
        libs = () if self.extern_libs is None else tuple(dict(self.extern_libs).items())
        object.__setattr__(self, "extern_libs", libs)
        if self.num_warps <= 0 or (self.num_warps & (self.num_warps - 1)) != 0:
            raise ValueError("num_warps must be a power of 2")

    def hash(self):
        key = "_".join(f"{name}-{val}" for name, val in sorted(self.__dict__.items()))
        return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _add_passes(pm, names):
    """Add the passes that this Triton exposes; names are ``group.add_xxx``."""
    for dotted in names:
        group_name, fn_name = dotted.split(".")
        fn = getattr(getattr(passes, group_name, None), fn_name, None)
        if fn is not None:
            fn(pm)


# The target-independent TTIR pipeline: the nvidia back end's make_ttir for an
# sm < 90 target (descriptors rewritten to pointers) plus LICM and a final
# clean-up. Looked up by name: both Triton 3.6 and 3.7 expose all of them.
_TTIR_PASSES = (
    "common.add_inliner",
    "ttir.add_rewrite_tensor_pointer",
    "ttir.add_rewrite_tensor_descriptor_to_pointer",
    "common.add_canonicalizer",
    "ttir.add_combine",
    "ttir.add_reorder_broadcast",
    "common.add_cse",
    "common.add_symbol_dce",
    "ttir.add_loop_unroll",
    "ttir.add_triton_licm",
    "common.add_canonicalizer",
    "common.add_cse",
)


def _find_compile_source():
    """The ``src`` argument of the ``triton.compiler.compiler.compile`` call
    that is building this kernel (an ``ASTSource`` for Python kernels).

    ``BaseBackend`` stages only see the IR, but the host binary needs the
    kernel's Python source; ``compile(src, ...)`` is our caller's caller when
    ``add_stages`` runs, on Triton 3.6 and 3.7 alike.
    """
    from ._triton_adapter import compiler_module

    compiler_mod = compiler_module()

    code = compiler_mod.compile.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return frame.f_locals.get("src")
        frame = frame.f_back
    return None


def min_dot_size(target: GPUTarget):
    # Same check as the nvidia back end, so a kernel that would not compile for
    # a GPU does not compile here either.
    def check_dot_compatibility(lhs_type, rhs_type):
        lhs_bitwidth = lhs_type.scalar.primitive_bitwidth
        return (1, 1, 32) if lhs_bitwidth == 8 else (1, 1, 16)

    return check_dot_compatibility


def _nvidia_backend(target: GPUTarget) -> BaseBackend:
    """Triton's NVIDIA back end for a flagos target on the cuda accelerator.

    Looked up through Triton's registry, not imported: this module must hold
    exactly one concrete back-end class.
    """
    from triton.backends import backends

    nvidia = backends.get("nvidia")
    if nvidia is None:
        raise RuntimeError("flagos: the cuda accelerator needs Triton's NVIDIA back end, which is not installed")
    return nvidia.compiler(GPUTarget("cuda", int(target.arch), target.warp_size))


class FlagosBackend(BaseBackend):
    """Compiles Triton kernels for the flagos host accelerator.

    Inductor asks for target ``flagos`` (the device's name). Where flagos runs
    on the cuda accelerator the kernels are CUDA kernels, so construction
    returns Triton's NVIDIA back end for the same arch instead: compiled
    kernels, cache keys and cubins are then exactly those of native cuda, and
    metadata naming target ``flagos`` maps back to it when loaded.
    """

    binary_ext = BINARY_EXT

    def __new__(cls, target: GPUTarget):
        from . import presence

        accelerator = presence.accelerator_name()
        if accelerator is None:
            # Guessing would be worse than failing: a host binary handed to
            # a GPU driver is "device kernel image is invalid" much later.
            raise RuntimeError(
                "flagos: this process (a compile worker?) has not loaded torch_fl, so it cannot tell which "
                "accelerator flagos kernels are for. Let torch autoload torch_fl (unset "
                "TORCH_DEVICE_BACKEND_AUTOLOAD=0) or use fork compile workers."
            )
        # A GPU arch (an int) on the cuda accelerator; the host target's arch is "host".
        if accelerator == "cuda" and isinstance(target.arch, int):
            return _nvidia_backend(target)
        return super().__new__(cls)

    @staticmethod
    def supports_target(target: GPUTarget):
        return target.backend == BACKEND_NAME

    def __init__(self, target: GPUTarget) -> None:
        super().__init__(target)
        self.binary_ext = BINARY_EXT
        from . import binary

        binary.install_cache_check()  # a damaged cached binary is a miss, not a broken compile

    def get_target_name(self, options) -> str:
        return f"{BACKEND_NAME}:{self.target.arch}"

    def parse_options(self, opts) -> Any:
        args = {"arch": self.target.arch, "warp_size": self.target.warp_size}
        names = {f.name for f in fields(FlagosOptions)}
        args.update({k: opts[k] for k in names if k in opts and opts[k] is not None})
        return FlagosOptions(**args)

    def pack_metadata(self, metadata):
        return (metadata.num_warps, metadata.num_ctas, metadata.shared)

    def get_codegen_implementation(self, options):
        import triton.language.extra.cuda as cuda

        return {
            "convert_custom_types": cuda.convert_custom_float8_sm80,
            "min_dot_size": min_dot_size(self.target),
        }

    def get_module_map(self) -> Dict[str, ModuleType]:
        # Kernels call the generic ``triton.language.extra.libdevice``; map it to
        # the CUDA flavour so TTIR gets ``tt.extern_elementwise`` ops with the
        # ``__nv_*`` symbols, which the host launcher implements.
        from triton.language.extra.cuda import libdevice

        return {"triton.language.extra.libdevice": libdevice}

    def load_dialects(self, ctx):
        pass  # TTIR only needs the dialects Triton always loads

    @staticmethod
    def make_ttir(mod, metadata, options):
        pm = ir.pass_manager(mod.context)
        pm.enable_debug()
        _add_passes(pm, _TTIR_PASSES)
        pm.run(mod, "make_ttir")
        return mod

    @staticmethod
    def make_binary(mod, metadata, options, src):
        from . import binary

        name = None
        if hasattr(mod, "get_entry_func_name"):
            try:
                name = mod.get_entry_func_name()
            except Exception:
                name = None
        ttir_text = str(mod)
        metadata["name"] = name or getattr(src, "name", None) or "kernel"
        metadata["shared"] = 0
        metadata["global_scratch_size"] = 0
        metadata["global_scratch_align"] = 1
        metadata["profile_scratch_size"] = 0
        metadata["profile_scratch_align"] = 1
        return binary.build(src, ttir_text, metadata, options)

    def add_stages(self, stages, options, language=Language.TRITON):
        if language != Language.TRITON:
            raise NotImplementedError("the flagos host back end compiles Triton kernels only (not Gluon)")
        src = _find_compile_source()
        stages["ttir"] = lambda mod, metadata: self.make_ttir(mod, metadata, options)
        stages[BINARY_EXT] = lambda mod, metadata: self.make_binary(mod, metadata, options, src)

    # One backend object per target lives as long as the process, so the cache keeping it alive costs nothing.
    @functools.lru_cache()  # noqa: B019
    def hash(self):
        # Part of Triton's cache key: change it whenever what the stages emit
        # could change, i.e. with the sources of the modules that produce the binary.
        import os

        digest = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(__file__))
        for name in ("compiler.py", "binary.py", "analysis.py"):
            with open(os.path.join(here, name), "rb") as f:
                digest.update(f.read())
        return f"flagos-host-{digest.hexdigest()[:16]}-{self.target.arch}"
