"""assert_compiles_like_eager: the compiled-vs-eager oracle.

Runs check.check_compiles_like_eager (compile on the device, eager on the device, an
upcast reference, outputs/strides/gradients compared) and adds what only a test run can
know: dynamo's counters (a compile that compiled nothing, broke the graph, or fell back to
eager after the recompile limit fails), the session's device and repro directory, and a
standalone repro script when the comparison or the compile fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from . import _torch_compat, check, session

if TYPE_CHECKING:
    import pytest


class NotCompiledError(AssertionError):
    """Dynamo did not compile what it was given (nothing captured, graph breaks, fallback)."""


@dataclasses.dataclass(frozen=True)
class OracleResult:
    compiled: Any  # outputs of the last input set
    eager: Any
    graphs: int  # graphs dynamo compiled
    graph_breaks: dict[str, int]
    repro: Path | None = None


def _default_device(current: session.FlagosSession | None, inputs: Sequence[Any]) -> Any:
    import torch

    if current is not None:
        return current.device.device
    for x in inputs:
        if torch.is_tensor(x):
            return x.device
    return torch.device("cpu")


def _reference_device(current: session.FlagosSession | None, device: Any, fn: Any, inputs: Sequence[Any]) -> Any:
    """The device itself if it supports the reference dtype, else cpu."""
    import torch

    params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
    ref_dtype = check.reference_dtype(list(inputs) + params)
    if current is not None and current.device.device.type == device.type:
        caps = current.capabilities()
    else:
        from .capabilities import default_capabilities

        caps = default_capabilities(device)
    return device if caps.supports(ref_dtype) else torch.device("cpu")


def _not_compiled_reason(allow_graph_breaks: bool) -> tuple[str | None, int, dict[str, int]]:
    counters = _torch_compat.dynamo_counters()
    graphs = int(counters["stats"]["unique_graphs"])
    breaks = {str(k): int(v) for k, v in counters["graph_break"].items()}
    frames_total = int(counters["frames"]["total"])
    frames_ok = int(counters["frames"]["ok"])
    unsupported = [str(k).splitlines()[0] for k in counters["unimplemented"]]
    if graphs == 0:
        return (
            "dynamo compiled nothing: no graph was captured, the function ran eagerly"
            + (f" ({'; '.join(unsupported)})" if unsupported else ""),
            graphs,
            breaks,
        )
    if frames_total > frames_ok and not allow_graph_breaks:
        return (
            f"dynamo fell back to eager for {frames_total - frames_ok} of {frames_total} "
            f"frame(s): {'; '.join(unsupported) or 'no reason recorded'}",
            graphs,
            breaks,
        )
    if breaks and not allow_graph_breaks:
        listed = "; ".join(f"{reason.splitlines()[0]} (x{n})" for reason, n in breaks.items())
        return f"dynamo broke the graph {sum(breaks.values())} time(s): {listed}", graphs, breaks
    return None, graphs, breaks


def _with_repro_note(exc: BaseException, repro: Path | None, why_not: str | None) -> None:
    note = f"flagos repro: {repro}" if repro is not None else f"flagos repro: not written ({why_not})"
    if hasattr(exc, "add_note"):
        exc.add_note(note)


def assert_compiles_like_eager(
    fn_or_module: Any,
    *inputs: Any,
    device: Any = None,
    grads: bool = False,
    atol: float | None = None,
    rtol: float | None = None,
    check_strides: bool = True,
    mark_dynamic: Iterable[tuple[int, int]] = (),
    replay: Iterable[Sequence[Any]] = (),
    dynamic: bool | None = None,
    fullgraph: bool = False,
    backend: Any = "inductor",
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    config_patches: dict[str, Any] | None = None,
    allow_graph_breaks: bool = False,
    seed: int = 0,
    repro_dir: str | Path | None = None,
    repro_name: str | None = None,
    config: pytest.Config | None = None,
) -> OracleResult:
    """Compile `fn_or_module` on the device and check it computes what eager computes.

    inputs: the example inputs (moved to the device, strides kept).
    grads: also compare gradients of floating inputs and parameters.
    atol/rtol: override the per-dtype tolerances of check.TOLERANCES.
    mark_dynamic: [(input index, dim)] marked dynamic before the first compiled call.
    replay: more input tuples run through the same compiled function (dynamic sizes).
    dynamic/fullgraph/backend/mode/options: passed to torch.compile.
    config_patches: torch._inductor.config patches in force while compiling and running.
    allow_graph_breaks: otherwise a graph break or an eager fallback fails.
    repro_dir/repro_name: where a failing check writes repro_<name>.py (default: the
    session's --flagos-repro-dir and the current test's name).
    config: the pytest.Config of the run whose device, capabilities and repro directory
    apply (the fixture passes request.config); without it, the run in progress.
    """
    import torch

    from . import repro

    current = session.current(config)
    device = torch.device(device) if device is not None else _default_device(current, inputs)
    input_sets = [tuple(inputs)] + [tuple(extra) for extra in replay]
    reference_device = _reference_device(current, device, fn_or_module, inputs)
    compile_kwargs: dict[str, Any] = {"backend": backend, "fullgraph": fullgraph}
    if dynamic is not None:
        compile_kwargs["dynamic"] = dynamic
    if mode is not None:
        compile_kwargs["mode"] = mode
    if options is not None:
        compile_kwargs["options"] = options
    check_kwargs = dict(
        grads=grads,
        atol=atol,
        rtol=rtol,
        check_strides=check_strides,
        mark_dynamic=tuple(tuple(m) for m in mark_dynamic),
        seed=seed,
    )
    patches = dict(config_patches or {})

    _torch_compat.reset_dynamo()
    patch_ctx = _torch_compat.inductor_config().patch(patches) if patches else contextlib.nullcontext()
    try:
        with patch_ctx:
            compiled, eager = check.check_compiles_like_eager(
                fn_or_module,
                input_sets,
                device=device,
                reference_device=reference_device,
                compile_kwargs=compile_kwargs,
                **check_kwargs,
            )
    except Exception as exc:
        # a mismatch, a compile error, or an error of the function itself: the repro
        # script re-raises each of them the same way
        written, why_not = repro.write_for_failure(
            repro.ReproCase(
                fn=fn_or_module,
                input_sets=input_sets,
                device=str(device),
                reference_device=str(reference_device),
                check_kwargs=check_kwargs,
                compile_kwargs=compile_kwargs,
                config_patches=patches,
                # read outside the patch: the repro sets these, then applies the patches
                base_config=_torch_compat.config_codegen(),
                failure=f"{type(exc).__name__}: {exc}",
            ),
            repro_dir=repro_dir,
            name=repro_name,
            config=config,
        )
        description = getattr(fn_or_module, "_flagos_description", None)
        if description and hasattr(exc, "add_note"):
            exc.add_note(f"flagos graph: {description}")
        _with_repro_note(exc, written, why_not)
        raise

    reason, graphs, breaks = _not_compiled_reason(allow_graph_breaks)
    if reason is not None:
        raise NotCompiledError(f"on {device}: {reason}")
    return OracleResult(compiled=compiled, eager=eager, graphs=graphs, graph_breaks=breaks)


def why_dynamo_captures_nothing(fn: Any, *inputs: Any) -> str | None:
    """Why dynamo captures no graph of fn(*inputs), or None when it captures one. Traced with
    the "eager" backend: dynamo alone, no code generated. Errors of fn propagate."""
    import torch

    _torch_compat.reset_dynamo()
    torch.compile(fn, backend="eager")(*inputs)
    reason, graphs, _ = _not_compiled_reason(allow_graph_breaks=True)
    return reason if graphs == 0 else None
