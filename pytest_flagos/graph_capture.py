"""The FX graphs dynamo traces from a callable, with the inputs each graph was called with.

A repro script rebuilds a function by importing it from its module; a lambda, a closure, a
bound method or a class defined inside a test cannot be rebuilt that way. What dynamo traced
from it can: the callable is compiled again with a backend that records every GraphModule
and runs it eagerly, and every call of a graph records its arguments (lifted parameters
included). A repro of those graphs reproduces a bug of the compiler below dynamo (inductor,
a device's back end); a bug in dynamo's own tracing is already baked into the graph.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from . import _torch_compat, check


class CaptureFailed(Exception):
    """Dynamo did not yield a graph that a script can hold."""


@dataclasses.dataclass
class CapturedGraph:
    module: Any  # torch.fx.GraphModule, free of dynamo's bookkeeping (picklable)
    code: str  # its Python code, for the reader of the script
    calls: list[tuple[Any, ...]]  # the arguments of each call, on cpu
    mark_dynamic: tuple[tuple[int, int], ...]  # (placeholder index, dim) traced as symbolic


def _dynamic_dims(gm: Any) -> tuple[tuple[int, int], ...]:
    """Dims of tensor placeholders whose traced size is a SymInt (dynamic in the test)."""
    import torch

    dims = []
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for index, node in enumerate(placeholders):
        value = node.meta.get("example_value")
        if not isinstance(value, torch.Tensor):
            continue
        dims += [(index, dim) for dim, size in enumerate(value.shape) if isinstance(size, torch.SymInt)]
    return tuple(dims)


def _standalone(gm: Any) -> Any:
    """The same graph and attributes as a plain GraphModule (drops dynamo's shape env, sources)."""
    import torch.fx

    clean = torch.fx.GraphModule(gm, gm.graph, class_name="Graph")
    clean.meta = {}
    clean.__dict__.pop("shape_env", None)
    return clean


def capture(
    fn: Any, input_sets: Sequence[Sequence[Any]], device: Any, mark_dynamic: Sequence[tuple[int, int]]
) -> list[CapturedGraph]:
    """Trace `fn` over every input set (the first with `mark_dynamic`); raise CaptureFailed."""
    import torch

    recorded: list[tuple[Any, list[tuple[Any, ...]]]] = []

    def recording_backend(gm: Any, example_inputs: Any) -> Any:
        calls: list[tuple[Any, ...]] = []
        recorded.append((gm, calls))

        def run(*args: Any) -> Any:
            calls.append(tuple(check.clone_input(a, device="cpu") for a in args))
            return gm.forward(*args)

        return run

    target = check._module_copy(fn, device)
    _torch_compat.reset_dynamo()
    try:
        compiled = torch.compile(target, backend=recording_backend)
        for n, inputs in enumerate(input_sets):
            args = [check.clone_input(x, device) for x in inputs]
            if n == 0:
                for index, dim in mark_dynamic:
                    _torch_compat.mark_dynamic(args[index], dim)
            compiled(*args)
    except Exception as exc:
        raise CaptureFailed(f"dynamo could not trace it again ({type(exc).__name__}: {exc})") from None
    finally:
        _torch_compat.reset_dynamo()
    graphs = [CapturedGraph(_standalone(gm), gm.code, calls, _dynamic_dims(gm)) for gm, calls in recorded if calls]
    if not graphs:
        raise CaptureFailed("dynamo traced no graph from it")
    return graphs
