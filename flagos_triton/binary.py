"""The flagos host binary: a self-contained, JSON-encoded kernel.

Inductor compiles kernels in worker processes and pickles the result back
with the ``JITFunction`` stripped (``fn``/``__globals__`` set to None), so the
binary carries everything the launcher needs:

* the kernel's Python source (decorators stripped) and the source of every
  ``@triton.jit`` function it references by name, transitively, and of the
  ``@triton.jit`` functions reached through attributes of non-Triton modules
  (``triton_helpers.maximum``);
* each function's globals as references: literals, ``tl.constexpr``, dtypes,
  modules (by import name; for non-Triton modules also the attributes used, as
  a fallback when the module cannot be imported in the launching process),
  importable objects (``module`` + ``qualname``), other carried functions;
* the kernel signature and constants of this specialisation;
* whether several programs may run at once (``analysis.py``).

Layout (version 1)::

    {"format": "flagos-host-kernel", "version": 1, "name": ..., "entry": 0,
     "functions": [{"name", "qualname", "module", "filename", "lineno", "src",
                    "globals": {name: ref}}],
     "arg_names": [...], "signature": {arg: type}, "constants": [[path, ref]],
     "batch": {"ok": bool, "reason": str}, "debug": bool, "sanitize_overflow": bool,
     "triton_version": ...}

A binary that does not parse or lacks a field is ``CorruptBinary``. In Triton's file cache
such a binary is a cache miss: ``install_cache_check`` (called when the flagos compiler is
created) makes the cache lookup check every cached ``.flagosbin``, warn with the file's
path, remove the entry and let Triton compile the kernel again, as inductor does with its
own corrupt cache entries.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import threading
import types
import warnings
from collections import OrderedDict
from dataclasses import dataclass

FORMAT = "flagos-host-kernel"
FORMAT_VERSION = 1


class BinaryError(RuntimeError):
    pass


class CorruptBinary(BinaryError):
    """The bytes are not a well-formed flagos host binary (a damaged cache file)."""


class CorruptCacheWarning(UserWarning):
    """A cached flagos kernel was damaged; it is compiled again."""


# ---------------------------------------------------------------------------------
# building (compile side)
# ---------------------------------------------------------------------------------
def _is_triton_module(name: str) -> bool:
    return name == "triton" or name.startswith("triton.")


def _resolve(module_name: str, qualname: str):
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _names(tree):
    """(loaded names, locally bound names, {root: attrs used through it})."""
    loaded, bound = set(), set()
    attrs = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attrs.setdefault(node.value.id, set()).add(node.attr)
    return loaded, bound, attrs


class _Collector:
    def __init__(self):
        from ._triton_adapter import JITFunction

        self.JITFunction = JITFunction
        self.functions = []
        self.index = {}

    def add_function(self, jit_fn) -> int:
        key = id(jit_fn)
        if key in self.index:
            return self.index[key]
        fn = getattr(jit_fn, "fn", None)
        if fn is None:
            raise BinaryError(f"{jit_fn!r} has no Python function (stripped?); cannot build a flagos binary")
        from .translate import def_line

        idx = len(self.functions)
        self.index[key] = idx
        entry = {
            "name": fn.__name__,
            "qualname": getattr(fn, "__qualname__", fn.__name__),
            "module": getattr(fn, "__module__", None),
            "filename": fn.__code__.co_filename,
            "lineno": def_line(jit_fn),
            "src": jit_fn.src,
            "globals": {},
        }
        self.functions.append(entry)
        scope = dict(fn.__globals__)
        if fn.__closure__:
            scope.update({n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__, strict=True)})
        loaded, bound, attrs = _names(ast.parse(jit_fn.src))
        for name in sorted(loaded):
            if name not in scope:
                continue  # a builtin, or undefined (an error at run time, as in Triton)
            try:
                entry["globals"][name] = self.ref(scope[name], entry["module"], name, attrs.get(name, ()))
            except BinaryError:
                if name in bound:
                    continue  # shadowed by a local; the global is never read
                raise
        return idx

    def ref(self, value, module_name=None, global_name=None, attrs=()):
        import triton.language as tl

        what = f"global {global_name!r} of {module_name}" if global_name else "a constant"
        if value is None or isinstance(value, (bool, int, float, str)):
            return {"k": "lit", "v": value}
        if isinstance(value, tl.constexpr):
            return {"k": "constexpr", "v": self.ref(value.value, module_name, global_name)}
        if isinstance(value, tl.pointer_type):
            return {"k": "ptr", "v": self.ref(value.element_ty), "const": bool(getattr(value, "const", False))}
        if isinstance(value, tl.dtype) and type(value) is tl.dtype:
            return {"k": "dtype", "v": value.name}
        if isinstance(value, self.JITFunction):
            return {"k": "jit", "v": self.add_function(value)}
        if isinstance(value, types.ModuleType):
            out = {"k": "module", "v": value.__name__}
            if not _is_triton_module(value.__name__) and attrs:
                carried = {}
                for attr in sorted(attrs):
                    if not hasattr(value, attr):
                        continue
                    try:
                        carried[attr] = self.ref(getattr(value, attr), value.__name__, attr)
                    except BinaryError:
                        pass  # only needed if the module cannot be imported where the kernel runs
                out["attrs"] = carried
            return out
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return {"k": "tuple", "v": [self.ref(v, module_name, global_name) for v in value]}
        if isinstance(value, list):
            return {"k": "list", "v": [self.ref(v, module_name, global_name) for v in value]}
        # an importable object: by its own qualified name, or as a module global
        mod = getattr(value, "__module__", None)
        qual = getattr(value, "__qualname__", None)
        if isinstance(mod, str) and isinstance(qual, str) and "<" not in qual:
            try:
                if _resolve(mod, qual) is value:
                    return {"k": "object", "module": mod, "qualname": qual}
            except Exception:
                pass
        if module_name and global_name:
            try:
                if getattr(importlib.import_module(module_name), global_name) is value:
                    return {"k": "global", "module": module_name, "name": global_name}
            except Exception:
                pass
        raise BinaryError(f"flagos: cannot carry {what} = {value!r} into the host binary")


def _json_signature(sig):
    if isinstance(sig, tuple):
        return [_json_signature(s) for s in sig]
    return sig


def build(src, ttir_text: str, metadata: dict, options) -> bytes:
    """The binary for ``src`` (an ``ASTSource``) compiled to ``ttir_text``."""
    from . import analysis

    if src is None or getattr(src, "fn", None) is None:
        raise BinaryError(
            "the flagos host back end needs the kernel's Python source (an ASTSource); "
            "compiling from IR files is not supported"
        )
    jit_fn = src.fn
    collector = _Collector()
    entry = collector.add_function(jit_fn)
    arg_names = list(getattr(jit_fn, "arg_names", []))
    constants = []
    for path, value in getattr(src, "constants", {}).items():
        if isinstance(path, str):
            path = (arg_names.index(path),)
        constants.append([list(path), collector.ref(value)])
    ok, reason = analysis.batchable(ttir_text)
    doc = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "name": metadata.get("name"),
        "entry": entry,
        "functions": collector.functions,
        "arg_names": arg_names,
        "signature": {k: _json_signature(v) for k, v in src.signature.items()},
        "constants": constants,
        "batch": {"ok": ok, "reason": reason},
        "debug": bool(getattr(options, "debug", False)),
        "sanitize_overflow": bool(getattr(options, "sanitize_overflow", False)),
        "triton_version": metadata.get("triton_version"),
    }
    return json.dumps(doc, sort_keys=True).encode("utf-8")


# ---------------------------------------------------------------------------------
# loading (launch side)
# ---------------------------------------------------------------------------------
@dataclass
class HostProgram:
    name: str
    fn: object  # the translated kernel (a plain Python function)
    arg_names: list
    signature: dict
    constants: dict  # path tuple -> value
    batch_ok: bool
    batch_reason: str
    debug: bool
    sanitize_overflow: bool


def _py_signature(sig):
    if isinstance(sig, list):
        return tuple(_py_signature(s) for s in sig)
    return sig


class _Loader:
    def __init__(self, doc):
        self.doc = doc
        self.built = {}
        self.namespaces = []

    def value(self, ref):
        import triton.language as tl

        kind = ref["k"]
        if kind == "lit":
            return ref["v"]
        if kind == "constexpr":
            return tl.constexpr(self.value(ref["v"]))
        if kind == "dtype":
            return tl.dtype(ref["v"])
        if kind == "ptr":
            return tl.pointer_type(self.value(ref["v"]), const=ref.get("const", False))
        if kind == "tuple":
            return tuple(self.value(v) for v in ref["v"])
        if kind == "list":
            return [self.value(v) for v in ref["v"]]
        if kind == "jit":
            return self.function(ref["v"])
        if kind == "module":
            try:
                return importlib.import_module(ref["v"])
            except Exception:
                if "attrs" not in ref:
                    raise
                ns = types.SimpleNamespace(**{a: self.value(r) for a, r in ref["attrs"].items()})
                ns.__name__ = ref["v"]
                return ns
        if kind == "object":
            return _resolve(ref["module"], ref["qualname"])
        if kind == "global":
            return getattr(importlib.import_module(ref["module"]), ref["name"])
        raise BinaryError(f"unknown reference kind {kind!r}")

    def function(self, idx):
        if idx in self.built:
            return self.built[idx]
        from .translate import compile_function

        entry = self.doc["functions"][idx]
        namespace = {"__name__": entry.get("module") or "__flagos_kernel__"}
        # Placeholder first: recursive references resolve to the same namespace.
        self.built[idx] = _LazyFunction(namespace, entry["name"])
        for name, ref in entry["globals"].items():
            namespace[name] = self.value(ref)
        fn = compile_function(entry["src"], entry["name"], entry["filename"], entry["lineno"], namespace)
        self.built[idx] = fn
        return fn


class _LazyFunction:
    """Stands for a carried function during the construction of a recursive namespace."""

    def __init__(self, namespace, name):
        self.namespace = namespace
        self.name = name

    def __call__(self, *args, **kwargs):
        return self.namespace[self.name](*args, **kwargs)


# field: type(s) of its value; checked before anything is built from a binary
_FIELDS = {
    "name": str,
    "entry": int,
    "functions": list,
    "arg_names": list,
    "signature": dict,
    "constants": list,
    "batch": dict,
    "debug": bool,
    "sanitize_overflow": bool,
}
_FUNCTION_FIELDS = {"name": str, "src": str, "filename": str, "lineno": int, "globals": dict}


def parse(data) -> dict:
    """The binary's JSON document, checked field by field; CorruptBinary otherwise."""

    def corrupt(why: str) -> CorruptBinary:
        return CorruptBinary(f"corrupt flagos host binary: {why}")

    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise corrupt(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise corrupt(f"a JSON {type(doc).__name__}, not an object")
    if doc.get("format") != FORMAT or doc.get("version") != FORMAT_VERSION:
        raise corrupt(
            f"format {doc.get('format')!r} version {doc.get('version')!r}, expected {FORMAT!r} version {FORMAT_VERSION}"
        )
    for table, fields in [(doc, _FIELDS)] + [(f, _FUNCTION_FIELDS) for f in doc.get("functions") or ()]:
        if not isinstance(table, dict):
            raise corrupt("a function entry is not an object")
        for field, kind in fields.items():
            if not isinstance(table.get(field), kind):
                raise corrupt(f"field {field!r} is missing or not a {kind.__name__}")
    if not 0 <= doc["entry"] < len(doc["functions"]):
        raise corrupt(f"entry {doc['entry']} is not one of its {len(doc['functions'])} functions")
    return doc


def _problem_with_file(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            parse(f.read())
    except CorruptBinary as exc:
        return str(exc)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    return None


def _checked_cache_manager(base: type) -> type:
    """`base` (Triton's FileCacheManager) whose group lookup turns a damaged flagos binary
    into a miss. Groups without a flagos binary behave exactly as in `base`."""

    class FlagosCheckedCacheManager(base):
        def get_group(self, filename):
            group = super().get_group(filename)
            for child, path in (group or {}).items():
                if not child.endswith(".flagosbin"):
                    continue
                problem = _problem_with_file(path)
                if problem is None:
                    continue
                warnings.warn(
                    f"flagos: corrupt cached kernel {path} ({problem}); removed it, compiling the kernel again",
                    CorruptCacheWarning,
                    stacklevel=2,
                )
                for stale in [*group.values(), self._make_path(f"__grp__{filename}")]:
                    try:
                        os.unlink(stale)
                    except OSError:
                        pass  # gone already (another process), or read-only: the miss still holds
                return None
            return group

    return FlagosCheckedCacheManager


def install_cache_check() -> None:
    """Check cached flagos binaries at Triton's cache lookup (once per process).

    Upstream: triton/runtime/cache.py get_cache_manager() builds `knobs.cache.manager_class
    or FileCacheManager` for every lookup of triton.compiler.compiler.compile. A manager the
    user chose (TRITON_CACHE_MANAGER, a remote cache) is left alone; a damaged binary is then
    still a CorruptBinary error that names the fix, never a bare JSONDecodeError."""
    try:
        from triton import knobs

        from ._triton_adapter import FileCacheManager
    except ImportError:  # a Triton without knobs: nothing to hook
        return
    try:
        current = knobs.cache.manager_class
    except AttributeError:  # a Triton without this knob
        return
    except RuntimeError:  # a TRITON_CACHE_MANAGER that does not import: Triton reports it itself
        return
    if current is None:
        knobs.cache.manager_class = _checked_cache_manager(FileCacheManager)


_loaded: "OrderedDict[str, HostProgram]" = OrderedDict()
_loaded_lock = threading.Lock()
_MAX_LOADED = 512


def load(data) -> HostProgram:
    """The program of a binary (cached per content); CorruptBinary for damaged bytes."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    key = hashlib.sha256(data).hexdigest()
    with _loaded_lock:
        program = _loaded.get(key)
        if program is not None:
            _loaded.move_to_end(key)
            return program
    doc = parse(data)
    loader = _Loader(doc)
    try:
        fn = loader.function(doc["entry"])
        constants = {tuple(path): loader.value(ref) for path, ref in doc["constants"]}
    except (KeyError, TypeError, IndexError) as exc:  # a reference of the wrong shape
        raise CorruptBinary(f"corrupt flagos host binary {doc['name']!r}: {type(exc).__name__}: {exc}") from None
    program = HostProgram(
        name=doc["name"],
        fn=fn,
        arg_names=list(doc["arg_names"]),
        signature={k: _py_signature(v) for k, v in doc["signature"].items()},
        constants=constants,
        batch_ok=bool(doc["batch"]["ok"]),
        batch_reason=doc["batch"]["reason"],
        debug=bool(doc["debug"]),
        sanitize_overflow=bool(doc["sanitize_overflow"]),
    )
    with _loaded_lock:
        _loaded[key] = program
        while len(_loaded) > _MAX_LOADED:
            _loaded.popitem(last=False)
    return program
