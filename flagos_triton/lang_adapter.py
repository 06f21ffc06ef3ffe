"""The one place where flagos adapts ``triton.language`` to run kernels on the host.

What it works around (upstream: ``triton/runtime/interpreter.py``,
``_patch_lang`` / ``_patch_builtin`` / ``_patch_lang_tensor`` /
``_patch_lang_core`` / ``_patch_reduce_scan``, and ``JITFunction.__call__`` in
``triton/runtime/jit.py``):

* Triton builtins (``tl.load``, ``tensor.__add__`` ...) require a ``_semantic``
  argument that only the code generator passes. Triton's interpreter patches
  the ``triton.language`` modules and the ``tl.tensor`` class to inject its own
  semantic, and (in ``InterpretedFunction.__call__``, used for every helper call)
  never undoes the patch, which breaks the next real compile in the process.
* Calling a ``@triton.jit`` helper (``triton_helpers.maximum``, ``tl.sum``)
  from interpreted code raises unless the whole process runs with
  ``TRITON_INTERPRET=1``.
* libdevice externs are stubs under the interpreter.

Here every replacement is thread-aware: it behaves like the original unless
the *calling thread* is inside a flagos launch (``launch_scope``), and the
replacements are installed only for the duration of a launch and removed in
``finally``. Other threads compiling real kernels meanwhile see Triton's
normal behaviour; after a launch ``triton.language`` is exactly as before.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from typing import ClassVar

import numpy as np
import triton.language as tl
from triton.language import core as tl_core
from triton.language import math as tl_math

from . import reduce_scan
from ._triton_adapter import JITFunction
from .launch_state import current_semantic, this_thread
from .translate import translate_jit

_launch_lock = threading.RLock()  # one launch at a time: the builder holds per-launch state
_MISSING = object()


# -- replacements ---------------------------------------------------------------
def _inject(orig):
    """A builtin that gets the launch's semantic inside a launch."""

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        sem = getattr(this_thread, "semantic", None)
        if sem is None:
            return orig(*args, **kwargs)
        kwargs["_semantic"] = sem
        return orig(*args, **kwargs)

    return wrapper


def _switch(orig, host_impl):
    """``host_impl`` inside a launch, ``orig`` elsewhere."""

    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        if getattr(this_thread, "semantic", None) is None:
            return orig(*args, **kwargs)
        return host_impl(*args, **kwargs)

    return wrapper


def _redirect_libdevice(orig, cuda_fn):
    # The generic libdevice module holds stubs; the code generator maps it to the
    # back end's module (get_module_map). Do the same at run time.
    def host_impl(*args, **kwargs):
        kwargs.pop("_semantic", None)
        return cuda_fn(*args, _semantic=current_semantic(), **kwargs)

    return _switch(orig, host_impl)


def _host_range(arg1, arg2=None, step=None, **_kwargs):
    start, end = (0, arg1) if arg2 is None else (arg1, arg2)
    return range(int(start), int(end), 1 if step is None else int(step))


def _host_static_assert(cond, msg="", **_kwargs):
    assert cond, msg


def _host_static_print(*values, sep=" ", end="\n", file=None, flush=False, **_kwargs):
    print(*values, sep=sep, end=end, file=file, flush=flush)


def _host_identity_hint(input, values, **_kwargs):
    return input  # multiple_of / max_contiguous / max_constancy: compiler hints only


def _host_jit_call(self, *args, **kwargs):
    kwargs.pop("_semantic", None)
    kwargs.pop("_generator", None)
    return translate_jit(self)(*args, **kwargs)


def _host_bool(self):
    from .builder import uniform_value

    return bool(uniform_value(self.handle.data))


def _host_index(self):
    from .builder import uniform_value

    return int(uniform_value(self.handle.data))


def _host_transpose(self):
    return current_semantic().permute(self, list(reversed(range(len(self.shape)))))


def _host_to_ir(self, builder):
    # Triton's interpreter needs signed/unsigned integer types (numpy), which the
    # MLIR builder's signless types cannot express (upstream: _new_to_ir).
    name = {
        "int1": "int1",
        "int8": "int8",
        "uint8": "uint8",
        "int16": "int16",
        "uint16": "uint16",
        "int32": "int32",
        "uint32": "uint32",
        "int64": "int64",
        "uint64": "uint64",
        "fp8e5": "fp8e5",
        "fp8e4nv": "fp8e4nv",
        "fp8e4b15": "fp8e4b15",
        "fp16": "half",
        "bf16": "bf16",
        "fp32": "float",
        "fp64": "double",
        "void": "void",
        "fp8e4b8": "fp8e4b8",
        "fp8e5b16": "fp8e5b16",
    }.get(self.name)
    if name is None:
        raise ValueError(f"fail to convert {self} to ir type")
    return getattr(builder, f"get_{name}_ty")()


def _property_switch(orig_prop, host_getter):

    def getter(self):
        if getattr(this_thread, "semantic", None) is None:
            return orig_prop.fget(self)
        return host_getter(self)

    return property(getter)


def _method_switch(cls, name, host_impl, default):
    """Replacement for a method ``tl.tensor`` may not define (``__bool__``,
    ``__index__``): ``default`` stands in for the missing original."""
    orig = cls.__dict__.get(name, _MISSING)
    return _switch(default if orig is _MISSING else orig, host_impl)


def _default_bool(self):
    return True  # Python's default truth value of an object


def _default_index(self):
    raise TypeError(f"'{type(self).__name__}' object cannot be interpreted as an integer")


# -- the patch set ----------------------------------------------------------------
def _builtins_of(owner):
    for name, member in list(vars(owner).items()):
        if tl_core.is_builtin(member):
            yield name, member


@functools.lru_cache(maxsize=None)
def _patch_set():
    """[(owner, name, replacement)] -- built once per process."""
    patches = {}

    def put(owner, name, value):
        patches[(id(owner), name)] = (owner, name, value)

    modules = [tl, tl_core, tl_math]
    cuda_libdevice = None
    try:
        from triton.language.extra.cuda import libdevice as cuda_libdevice

        modules.append(cuda_libdevice)
    except ImportError:
        pass
    for module in modules:
        for name, member in _builtins_of(module):
            put(module, name, _inject(member))
    for cls in (tl_core.tensor, getattr(tl_core, "tensor_descriptor_base", None)):
        if cls is None:
            continue
        for name, member in _builtins_of(cls):
            put(cls, name, _inject(member))

    # generic libdevice stubs -> the CUDA flavour (what get_module_map does)
    try:
        from triton.language.extra import libdevice as generic_libdevice
    except ImportError:
        generic_libdevice = None
    if generic_libdevice is not None and cuda_libdevice is not None and generic_libdevice is not cuda_libdevice:
        for name, member in list(vars(generic_libdevice).items()):
            target = getattr(cuda_libdevice, name, None)
            if inspect.isfunction(member) and target is not None:
                put(generic_libdevice, name, _redirect_libdevice(member, target))

    for module in (tl, tl_core):
        for name, impl in (
            ("reduce", reduce_scan.reduce),
            ("associative_scan", reduce_scan.associative_scan),
            ("range", _host_range),
            ("static_range", _host_range),
            ("static_assert", _host_static_assert),
            ("static_print", _host_static_print),
            ("multiple_of", _host_identity_hint),
            ("max_contiguous", _host_identity_hint),
            ("max_constancy", _host_identity_hint),
        ):
            orig = vars(module).get(name, _MISSING)
            if orig is not _MISSING:
                put(module, name, _switch(orig, impl))

    tensor = tl_core.tensor
    put(tensor, "__bool__", _method_switch(tensor, "__bool__", _host_bool, _default_bool))
    put(tensor, "__index__", _method_switch(tensor, "__index__", _host_index, _default_index))
    if isinstance(tensor.__dict__.get("T"), property):
        put(tensor, "T", _property_switch(tensor.__dict__["T"], _host_transpose))
    put(tl_core.dtype, "to_ir", _switch(tl_core.dtype.to_ir, _host_to_ir))
    put(JITFunction, "__call__", _switch(JITFunction.__call__, _host_jit_call))
    return tuple(patches.values())


class _Installed:
    depth = 0
    saved: ClassVar[list] = []


def _install():
    saved = []
    for owner, name, value in _patch_set():
        saved.append((owner, name, vars(owner).get(name, _MISSING)))
        setattr(owner, name, value)
    _Installed.saved = saved


def _uninstall():
    for owner, name, original in reversed(_Installed.saved):
        if original is _MISSING:
            try:
                delattr(owner, name)
            except AttributeError:
                pass
        else:
            setattr(owner, name, original)
    _Installed.saved = []


@contextlib.contextmanager
def launch_scope(semantic):
    """Run host kernels with ``semantic`` in this thread; patches live only inside."""
    with _launch_lock:
        if _Installed.depth == 0:
            _install()
        _Installed.depth += 1
        previous = getattr(this_thread, "semantic", None)
        this_thread.semantic = semantic
        try:
            with np.errstate(all="ignore"):
                yield
        finally:
            this_thread.semantic = previous
            _Installed.depth -= 1
            if _Installed.depth == 0:
                _uninstall()


def is_installed() -> bool:
    return _Installed.depth > 0
