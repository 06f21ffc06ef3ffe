"""Every Triton internal the flagos back end touches, in one place.

flagos_triton imports ``triton._C``, ``triton.runtime``, ``triton.compiler`` and
``triton.language.semantic`` only here (ruff's TID251 fails any other product
file that does), so a Triton upgrade is checked in this one file. Triton's
documented back-end plugin API (``triton.backends.compiler``: ``BaseBackend``,
``GPUTarget``, ``Language``; ``triton.backends.driver``: ``DriverBase``;
``triton.backends.backends``) and the language modules (``triton.language``
and its ``core``, ``math``, ``standard``, ``extra``) are used directly.

Names are resolved on first access (PEP 562 ``__getattr__``), not when this
module is imported: Triton imports ``flagos_triton.compiler`` and ``.driver``
while ``triton`` itself is half-initialised (back-end discovery), so each
internal must be imported exactly when the module that uses it asked for it
before, and no earlier. ``from ._triton_adapter import TensorHandle`` at the
top of a module imports ``triton.runtime.interpreter`` then, as the direct
import did; inside a function, at the call.

Each entry names the upstream code; all were checked against the installed
Triton 3.7 (triton/runtime/interpreter.py, triton/language/semantic.py,
triton/runtime/jit.py, triton/runtime/cache.py, triton/compiler/compiler.py,
triton/_C/libtriton). Triton 3.6 was not re-checked here: the names are the
ones this back end already imported on both.
"""

import importlib

# name here -> (upstream module, name there)
_LAZY = {
    # triton/_C/libtriton (pybind11, python/src/interpreter.cc): numpy-level masked
    # load/store that the flagos builder falls back to (builder.py).
    "interpreter_bindings": ("triton._C.libtriton", "interpreter"),
    # triton/_C/libtriton (python/src/ir.cc, passes.cc): the MLIR module, pass manager and
    # the TTIR passes the flagos compile stages run (compiler.py); ir.PADDING_OPTION (builder.py).
    "ir": ("triton._C.libtriton", "ir"),
    "passes": ("triton._C.libtriton", "passes"),
    # triton/runtime/interpreter.py: the interpreter's builder (every tl op on numpy arrays),
    # its options, the value wrapper of a tensor, and dtype helpers (builder.py,
    # launcher.py, reduce_scan.py). _get_np_dtype, _get_signed_np_dtype, _convert_float are
    # module-private there.
    "InterpreterBuilder": ("triton.runtime.interpreter", "InterpreterBuilder"),
    "InterpreterOptions": ("triton.runtime.interpreter", "InterpreterOptions"),
    "TensorHandle": ("triton.runtime.interpreter", "TensorHandle"),
    "get_np_dtype": ("triton.runtime.interpreter", "_get_np_dtype"),
    "get_signed_np_dtype": ("triton.runtime.interpreter", "_get_signed_np_dtype"),
    "convert_float": ("triton.runtime.interpreter", "_convert_float"),
    # triton/language/semantic.py: TritonSemantic, the tl op semantics over a builder
    # (launcher.py instantiates it over the flagos builder).
    "TritonSemantic": ("triton.language.semantic", "TritonSemantic"),
    # triton/runtime/jit.py: JITFunction, the @triton.jit object (translate.py, binary.py,
    # lang_adapter.py patch or recognise it).
    "JITFunction": ("triton.runtime.jit", "JITFunction"),
    # triton/runtime/cache.py: FileCacheManager, knobs.cache.manager_class's default
    # (binary.py wraps it).
    "FileCacheManager": ("triton.runtime.cache", "FileCacheManager"),
}


def __getattr__(name):
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module_name), attribute)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def compiler_module():
    """triton/compiler/compiler.py, the module of ``triton.compile`` (compiler.py reads the
    code object of its ``compile`` function). Checked on Triton 3.7."""
    from triton.compiler import compiler

    return compiler


def privateuse1_backend_name():
    """torch._C._get_privateuse1_backend_name() (c10/core/DeviceType.cpp), or None where this
    torch lacks it: the one torch binding the back end reads (driver.py). It lives here, not
    in torch_fl's adapter, because importing torch_fl would register the device in a process
    that only imported Triton. Checked on torch 2.13."""
    import torch

    return getattr(torch._C, "_get_privateuse1_backend_name", lambda: None)()
