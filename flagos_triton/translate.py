"""``@triton.jit`` source -> plain Python functions the host executor calls.

The source is rewritten the way Triton's interpreter rewrites it (assignments
go through ``to_tensor`` so Python constants become scalar tensors), plus what
the code generator does and Python cannot overload: ``not x``, ``a and b`` and
``a or b`` on tensors are elementwise (``__not__``, ``logical_and``,
``logical_or``), Python semantics otherwise.

Two sources of functions:

* ``compile_function`` -- source text from a flagos binary, executed in a
  namespace rebuilt from the binary (``binary.py``);
* ``translate_jit`` -- a live ``JITFunction`` met while a kernel runs (a helper
  reached through a module, ``tl.sum``, ``triton_helpers.maximum`` ...),
  executed in a copy of its own globals. Cached per function object.
"""

from __future__ import annotations

import ast
import builtins
import threading

import triton.language as tl

from ._triton_adapter import JITFunction
from .launch_state import current_semantic

TO_TENSOR = "__flagos_to_tensor"
NOT = "__flagos_not"
AND = "__flagos_and"
OR = "__flagos_or"


def _to_tensor(value):
    return current_semantic().to_tensor(value, False)


def _not(value):
    if isinstance(value, tl.tensor):
        return value.__not__()
    return not value


def _and(lhs, rhs_thunk):
    if isinstance(lhs, tl.tensor):
        return lhs.logical_and(rhs_thunk())
    if not lhs:
        return lhs
    rhs = rhs_thunk()
    return rhs


def _or(lhs, rhs_thunk):
    if isinstance(lhs, tl.tensor):
        return lhs.logical_or(rhs_thunk())
    if lhs:
        return lhs
    return rhs_thunk()


HELPERS = {TO_TENSOR: _to_tensor, NOT: _not, AND: _and, OR: _or}


def _call(name, *args):
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


def _thunk(expr):
    args = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    return ast.Lambda(args=args, body=expr)


class _Rewriter(ast.NodeTransformer):
    def visit_Assign(self, node):
        self.generic_visit(node)
        node.value = _call(TO_TENSOR, node.value)
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call(NOT, node.operand), node)
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        helper = AND if isinstance(node.op, ast.And) else OR
        expr = node.values[0]
        for value in node.values[1:]:
            expr = _call(helper, expr, _thunk(value))
        return ast.copy_location(expr, node)


def compile_function(src: str, name: str, filename: str, def_lineno: int, namespace: dict):
    """Execute the rewritten ``def`` in ``namespace``; return the function."""
    tree = ast.parse(src)
    tree = _Rewriter().visit(tree)
    ast.fix_missing_locations(tree)
    if def_lineno > 1:
        ast.increment_lineno(tree, def_lineno - 1)
    code = compile(tree, filename, "exec")
    namespace.setdefault("__builtins__", builtins)
    namespace.update(HELPERS)
    exec(code, namespace)
    return namespace[name]


def def_line(jit_fn) -> int:
    """Line of the ``def`` in the file (``starting_line_number`` is the first decorator)."""
    line = getattr(jit_fn, "starting_line_number", None)
    raw = getattr(jit_fn, "raw_src", None)
    if line is None:
        return getattr(jit_fn.fn.__code__, "co_firstlineno", 1)
    for idx, text in enumerate(raw or ()):
        if text.strip().startswith("def "):
            return line + idx
    return line


_cache: dict = {}
_cache_lock = threading.Lock()


def translate_jit(jit_fn: JITFunction):
    """The host-executable version of a live ``JITFunction``."""
    key = id(jit_fn)
    entry = _cache.get(key)
    src = jit_fn.src
    if entry is not None and entry[0] is jit_fn and entry[1] is src:
        return entry[2]
    fn = jit_fn.fn
    if fn is None:
        raise RuntimeError(f"{jit_fn!r} was stripped for pickling and is not in a flagos binary")
    namespace = dict(fn.__globals__)
    if fn.__closure__:
        namespace.update(
            {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, fn.__closure__, strict=True)}
        )
    translated = compile_function(src, fn.__name__, fn.__code__.co_filename, def_line(jit_fn), namespace)
    with _cache_lock:
        _cache[key] = (jit_fn, src, translated)
    return translated


def call(fn, *args, **kwargs):
    """Call a combine function or helper: a live JITFunction or a plain callable."""
    if isinstance(fn, JITFunction):
        fn = translate_jit(fn)
    return fn(*args, **kwargs)
