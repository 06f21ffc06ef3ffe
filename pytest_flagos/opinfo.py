"""Op coverage from PyTorch's OpInfo database: which cases to run, and the verdict of one case.

A *case* is one OpInfo (op name plus variant) in one dtype, forward or backward. Running a
case takes the op's sample inputs on the device and decides, from evidence, which layer is
at fault when something is wrong:

- ``eager-wrong``: the device's eager kernels disagree with a CPU reference (float64 where
  the op runs in float64 on CPU), or raise where the CPU runs the same sample;
- ``compiled-wrong``: eager is right, the compiled function (inductor) is not;
- ``compile-error``: torch.compile, or the code it generated, raised (the first line of the
  innermost error is kept);
- ``sample-error``: the op's sample inputs cannot be built on the device;
- ``timeout``: no result within the per-test limit (set by the test runner).

This module is the one user of ``torch.testing._internal`` (the OpInfo database is not a
public API), imported through ``_torch_compat`` like every torch internal: every name is
looked up where it is used and the upstream module is named in the function's docstring.
Works on torch 2.11 through 2.13.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Callable, Iterable, Sequence

from . import _torch_compat

PROP_VERDICT = "flagos_verdict"  # user property of the test report: one of VERDICTS
PROP_OP = "flagos_op"  # user property: "<op name>" (with its variant), the grouping key
VERDICTS = ("eager-wrong", "compiled-wrong", "compile-error", "sample-error", "timeout")

# Device types whose dtypes the OpInfo database lists (OpInfo.dtypesIf); any other device
# follows the dtypes listed for both cpu and cuda unless its capability manifest names a
# device type to follow (extra["opinfo_dtypes"]).
OPINFO_DEVICE_TYPES = ("cpu", "cuda", "xpu", "hpu", "mps")
DEFAULT_DTYPE_TABLES = ("cpu", "cuda")

# Ops whose result values are undefined (uninitialised memory): only shapes and dtypes compare.
UNDEFINED_VALUES = ("empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided")


def has_undefined_values(name: str) -> bool:
    """Whether the op is one of UNDEFINED_VALUES; `name` is a case's label ("new_empty float32"),
    its full name ("new_empty" or "new_empty.variant") or the op's name alone."""
    return name.split(" ")[0].split(".")[0] in UNDEFINED_VALUES


class CaseFailure(AssertionError):
    """One case failed; `verdict` names the layer at fault, `detail` is the evidence."""

    def __init__(self, verdict: str, headline: str, detail: str = "") -> None:
        assert verdict in VERDICTS, verdict
        super().__init__(headline + ("\n" + detail if detail else ""))
        self.verdict = verdict
        self.headline = headline
        self.detail = detail


class SampleNotRunnable(Exception):
    """The sample fails on the CPU reference as well: neither the device's nor the compiler's fault."""


# --------------------------------------------------------------------------------------------
# The OpInfo database (torch.testing._internal)
# --------------------------------------------------------------------------------------------


def load_op_db() -> list[Any]:
    """torch.testing._internal.common_methods_invocations.op_db.

    Importing it runs torch.testing._internal.common_utils, which freezes torch.backends'
    flags for the whole process (torch.backends.disable_global_flags(), meant for PyTorch's
    own test suite): the previous state is put back so that code outside the op tests may
    still set them. torch/backends/__init__.py keeps the state in its module global
    ``__allow_nonbracketed_mutation_flag``, read by flags_frozen() (whose globals are that
    module's dict even where torch.backends is wrapped).
    """
    import torch.backends

    was_frozen = torch.backends.flags_frozen()
    from ._torch_compat import opinfo_op_db

    op_db = opinfo_op_db()

    if not was_frozen and torch.backends.flags_frozen():
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    return list(op_db)


def full_name(op: Any) -> str:
    """The op's name with its variant: ``max.reduction_with_dim`` (PyTorch's own convention)."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def stable_bucket(name: str, buckets: int) -> int:
    """A bucket in [0, buckets) that depends on the name alone (not on Python's hash seed)."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:12], 16) % buckets


def in_share(name: str, share: tuple[int, int]) -> bool:
    """Whether the op named `name` belongs to the share k/n: buckets 0..k-1 of n."""
    k, n = share
    return stable_bucket(name, n) < k


def dtype_tables(device_type: str, extra: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The device types whose OpInfo dtype lists apply to `device_type`."""
    named = (extra or {}).get("opinfo_dtypes")
    if named:
        return (named,) if isinstance(named, str) else tuple(named)
    if device_type in OPINFO_DEVICE_TYPES:
        return (device_type,)
    return DEFAULT_DTYPE_TABLES


def _supported(op: Any, tables: Sequence[str], backward: bool) -> set[Any]:
    """OpInfo.supported_dtypes / supported_backward_dtypes for every table, intersected."""
    out: set[Any] | None = None
    for table in tables:
        dtypes = set(op.supported_backward_dtypes(table) if backward else op.supported_dtypes(table))
        out = dtypes if out is None else out & dtypes
    return out or set()


@dataclasses.dataclass(frozen=True)
class Case:
    op: str  # full name
    dtype: str  # torch dtype name: "float32"
    backward: bool
    tables: tuple[str, ...] = ()  # the OpInfo device types whose dtypes chose it (dtype_tables)

    @property
    def id(self) -> str:
        return f"{self.op}-{self.dtype}"


@dataclasses.dataclass(frozen=True)
class Tier:
    """Which cases run: a share of the ops (by stable hash), their dtypes, how many samples."""

    name: str
    share: tuple[int, int]  # ops whose bucket is < k of n
    samples: int | None  # samples per case; None: all the op yields
    forward_dtypes: tuple[str, ...] | None  # None: every dtype the manifest claims
    backward_dtypes: tuple[str, ...]  # dtypes with a backward case (ops that support autograd)

    def describe(self) -> str:
        k, n = self.share
        share = "every op" if k == n else f"ops in stable-hash share {k}/{n}"
        dtypes = "every claimed dtype" if self.forward_dtypes is None else "/".join(self.forward_dtypes)
        samples = "all samples" if self.samples is None else f"{self.samples} sample(s)"
        backward = f"backward in {'/'.join(self.backward_dtypes)}" if self.backward_dtypes else "no backward"
        return f"tier {self.name}: {share}, {dtypes}, {samples}, forward, {backward}"


TIERS = {
    # CI on a 2-core machine: a fixed stable-hash share of op_db, one sample, float32, forward.
    "ci": Tier("ci", (1, 10), 1, ("float32",), ()),
    # Many cores / many machines: every op, every claimed dtype, every sample, float32 backward.
    "full": Tier("full", (1, 1), None, None, ("float32",)),
}


def parse_share(text: str) -> tuple[int, int]:
    """'k/n' with 1 <= k <= n; ValueError with the reason otherwise."""
    try:
        k_text, n_text = text.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise ValueError(f"{text!r} is not a share k/n (e.g. 1/4)") from None
    if not 1 <= k <= n:
        raise ValueError(f"{text!r}: a share k/n needs 1 <= k <= n")
    return k, n


def cases(ops: Iterable[Any], device_type: str, claimed: Sequence[str], tier: Tier, extra: dict | None = None):
    """(op, Case) for every case of the tier on the device, in op_db order.

    claimed: the dtypes of the device's capability manifest, by name. A case's dtype must be
    claimed by the manifest and supported by the op on the device's dtype tables.
    """
    tables = dtype_tables(device_type, extra)
    forward = [d for d in claimed if tier.forward_dtypes is None or d in tier.forward_dtypes]
    for op in ops:
        name = full_name(op)
        if not in_share(name, tier.share):
            continue
        supported = {str(d).removeprefix("torch.") for d in _supported(op, tables, backward=False)}
        for dtype in forward:
            if dtype in supported:
                yield op, Case(name, dtype, backward=False, tables=tables)
        if not op.supports_autograd:
            continue
        differentiable = {str(d).removeprefix("torch.") for d in _supported(op, tables, backward=True)}
        for dtype in tier.backward_dtypes:
            if dtype in claimed and dtype in differentiable:
                yield op, Case(name, dtype, backward=True, tables=tables)


def cpu_exemption(op: Any, tables: Sequence[str], dtype_name: str) -> str | None:
    """Why the OpInfo exempts the op from torch's own device-vs-cpu comparison
    (TestCommon.test_compare_cpu skipped or expected to fail on one of the device's tables:
    undefined order, integer overflow, LU pivots, ...), or None. Such an op's eager values are
    not compared with the CPU's, only their shapes and dtypes; compiled is still compared with
    eager on the device. Asked when a case runs: reading the decorations of every case at
    collection would cost a second per process."""
    import torch

    dtype = getattr(torch, dtype_name)
    for table in tables:
        for decorator in _torch_compat.opinfo_decorations(op, "TestCommon", "test_compare_cpu", table, dtype):
            try:
                probe = decorator(lambda: None)
            except Exception:
                continue  # not a skip or an expected failure (a tolerance override, ...)
            if getattr(probe, "__unittest_skip__", False):
                why = getattr(probe, "__unittest_skip_why__", "") or "skipped"
                return f"torch's OpInfo skips its cpu comparison ({why})"
            if getattr(probe, "__unittest_expecting_failure__", False):
                return "torch's OpInfo expects its cpu comparison to fail"
    return None


# --------------------------------------------------------------------------------------------
# Samples
# --------------------------------------------------------------------------------------------


def _tensors_in(value: Any) -> list[Any]:
    import torch

    pytree = _torch_compat.pytree()

    return [leaf for leaf in pytree.tree_leaves(value) if torch.is_tensor(leaf)]


def select_samples(op: Any, device: Any, dtype: Any, requires_grad: bool, limit: int | None, seed: int = 0) -> list:
    """The op's sample inputs on the device (OpInfo.sample_inputs), seeded.

    With a limit, the first `limit` samples whose tensors are all non-empty (an empty
    tensor compiles to nothing worth checking), or the first sample if none is.
    """
    import torch

    torch.manual_seed(seed)
    samples = op.sample_inputs(device, dtype, requires_grad=requires_grad)
    if limit is None:
        return list(samples)
    chosen, first = [], None
    for sample in samples:
        if first is None:
            first = sample
        tensors = _tensors_in((sample.input, sample.args, sample.kwargs))
        if all(t.numel() > 0 for t in tensors):
            chosen.append(sample)
            if len(chosen) == limit:
                break
    return chosen or ([first] if first is not None else [])


def describe_sample(sample: Any) -> str:
    """A short description: shapes and dtypes of its tensors, other arguments by repr."""
    import torch

    pytree = _torch_compat.pytree()

    def one(value: Any) -> str:
        if torch.is_tensor(value):
            return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."

    args = [pytree.tree_map(one, a) for a in (sample.input, *sample.args)]
    kwargs = {k: pytree.tree_map(one, v) for k, v in sample.kwargs.items()}
    text = ", ".join([str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()])
    return text.replace("'", "")


@dataclasses.dataclass
class FlatSample:
    """A sample as positional tensors: the function that calls the op takes only tensors, so
    the oracle and the reference can move and cast every one of them (kwargs too)."""

    tensors: list[Any]
    call: Callable[..., Any]  # call(device, *tensors): device= arguments follow `device`

    def fn(self, *tensors: Any) -> Any:
        """The op on these tensors; device= arguments follow the first tensor (the test
        device when there is none: a factory function's sample)."""
        return self.call(tensors[0].device if tensors else self.device, *tensors)

    device: Any = None
    # the OpInfo seeds the generator itself on every call (wrapper_set_seed: randint_like,
    # bernoulli, ...): a random op whose runs repeat, and whose draws differ between devices
    reseeds: bool = False


def flatten(op: Any, sample: Any, device: Any) -> FlatSample:
    import torch

    pytree = _torch_compat.pytree()

    leaves, spec = pytree.tree_flatten(((sample.input, *sample.args), dict(sample.kwargs)))
    positions = [i for i, leaf in enumerate(leaves) if torch.is_tensor(leaf)]
    tensors = [leaves[i].detach() for i in positions]
    # arguments naming the device (factory functions' device=) follow the tensors to the
    # reference device; the closure keeps no device tensor
    device_positions = [i for i, leaf in enumerate(leaves) if _names_device(leaf, device)]
    constants = [None if i in positions else leaf for i, leaf in enumerate(leaves)]
    call = op.op
    # Results defined only up to a choice (an SVD's signs, an eigenvector's phase) come with the
    # sample's output_process_fn_grad, which maps them to what any valid result agrees on (|U|,
    # U S Vh): torch's own test_compare_cpu compares devices through it, and so do we.
    process = getattr(sample, "output_process_fn_grad", None) or (lambda out: out)

    def call_on(where: Any, *inputs: Any) -> Any:
        values = list(constants)
        for i, tensor in zip(positions, inputs, strict=False):
            values[i] = tensor
        for i in device_positions:
            values[i] = where
        args, kwargs = pytree.tree_unflatten(values, spec)
        return _real_view(process(call(*args, **kwargs)))

    code = getattr(call, "__code__", None)
    reseeds = "wrapper_set_seed" in getattr(code, "co_names", ())
    return FlatSample(tensors, call_on, device, reseeds)


def _names_device(value: Any, device: Any) -> bool:
    import torch

    if isinstance(value, torch.device):
        return value.type == device.type
    if isinstance(value, str) and value.split(":")[0] == device.type and device.type != "cpu":
        try:
            return torch.device(value).type == device.type
        except RuntimeError:
            return False
    return False


def _real_view(value: Any) -> Any:
    """Complex results as real views (torch.view_as_real): the comparisons work on reals."""
    import torch

    pytree = _torch_compat.pytree()

    def real(t: Any) -> Any:
        if not torch.is_tensor(t) or not t.is_complex():
            return t
        if not t.is_conj():
            return torch.view_as_real(t)
        # a conjugate view (fft.ifft's result): view the unconjugated tensor and negate the
        # imaginary part, without materialising the conjugate (resolve_conj) on the device
        pairs = torch.view_as_real(t.conj())
        return torch.stack((pairs[..., 0], -pairs[..., 1]), dim=-1)

    return pytree.tree_map(real, value)


# --------------------------------------------------------------------------------------------
# Eager on the device vs the CPU reference
# --------------------------------------------------------------------------------------------


def _clone(value: Any, device: Any, dtype: Any = None, requires_grad: bool = False) -> Any:
    from . import check

    return check.clone_input(value, device, dtype, requires_grad=requires_grad)


def _backward(outputs: Any, seed: int) -> None:
    """Backpropagate seeded output gradients (float64 draws cast to each output's dtype:
    the same values on every device and in every dtype)."""
    import torch

    pytree = _torch_compat.pytree()

    tensors = [t for t in pytree.tree_leaves(outputs) if torch.is_tensor(t) and t.requires_grad]
    if not tensors:
        return
    generator = torch.Generator().manual_seed(seed + 1)
    grads = [torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.dtype).to(t.device) for t in tensors]
    torch.autograd.backward(tensors, grads)


def _run(call: Callable[..., Any], tensors: Sequence[Any], device: Any, dtype: Any, grads: bool, seed: int):
    """(outputs, input gradients) of call(device, *copies of `tensors` on `device`), floating
    ones cast to `dtype`."""
    import torch

    inputs = [_clone(t, device, dtype, requires_grad=grads) for t in tensors]
    torch.manual_seed(seed)
    out = call(device, *inputs)
    if not grads:
        return out, None
    _backward(out, seed)
    return out, [x.grad if torch.is_tensor(x) and x.requires_grad else None for x in inputs]


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0].strip() if lines else ''}".rstrip(": ")


def _is_random(call: Callable[..., Any], tensors: Sequence[Any], dtype: Any) -> bool:
    """Whether the op draws random numbers: two CPU runs with different seeds differ."""
    import torch

    pytree = _torch_compat.pytree()

    runs = []
    for seed in (0, 1):
        try:
            out, _ = _run(call, tensors, torch.device("cpu"), dtype, False, seed)
        except Exception:
            return False
        runs.append([t for t in pytree.tree_leaves(out) if torch.is_tensor(t)])
    return any(
        a.shape != b.shape or not torch.equal(a.nan_to_num(), b.nan_to_num())
        for a, b in zip(runs[0], runs[1], strict=False)
    )


def uncaptured_on_cpu(sample: FlatSample, dtype: Any) -> str | None:
    """Why dynamo captures no graph of the sample on the CPU either, or None (it captures one,
    or the CPU cannot run the sample). A case that no device can compile (a data-dependent
    result, an op dynamo skips) says nothing about the device it failed on."""
    import functools

    import torch

    from .oracle import why_dynamo_captures_nothing

    cpu = torch.device("cpu")
    try:
        return why_dynamo_captures_nothing(
            functools.partial(sample.call, cpu), *[_clone(t, cpu, dtype) for t in sample.tensors]
        )
    except Exception:
        return None


def values_erased(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` whose tensor results are zeros of their shape and dtype: what compiled and eager runs of
    an op in UNDEFINED_VALUES (uninitialised memory) can be compared on."""
    import torch

    pytree = _torch_compat.pytree()

    def erased(*tensors: Any) -> Any:
        return pytree.tree_map(lambda t: torch.zeros_like(t) if torch.is_tensor(t) else t, fn(*tensors))

    return erased


def _compare_leaf(path: str, got: Any, cpu: Any, ref: Any, dtype_slack: float) -> str | None:
    """Why the device's eager leaf is wrong, or None. `cpu`: CPU in the same dtype; `ref`:
    CPU float64 (or None). The device may deviate from the float64 reference by the dtype's
    tolerance, or by `dtype_slack` times the CPU's own deviation (a device is not asked to
    be more accurate than the CPU)."""
    import torch

    from . import check

    if not torch.is_tensor(cpu):
        return None if got == cpu or (got != got and cpu != cpu) else f"{path}: {got!r} where cpu gives {cpu!r}"
    if not torch.is_tensor(got):
        return f"{path}: {type(got).__name__} where cpu gives a tensor"
    if got.shape != cpu.shape or got.dtype != cpu.dtype:
        return f"{path}: {tuple(got.shape)} {got.dtype} where cpu gives {tuple(cpu.shape)} {cpu.dtype}"
    g = got.detach().cpu()
    if not cpu.is_floating_point():
        if torch.equal(g, cpu.detach()):
            return None
        mismatched = int((g != cpu.detach()).sum())
        return f"{path}: {mismatched} of {g.numel()} {cpu.dtype} values differ from cpu's"
    use_ref = torch.is_tensor(ref) and ref.shape == cpu.shape
    reference = (ref if use_ref else cpu).detach().double()
    atol, rtol = check.tolerance(cpu.dtype)
    error = (g.double() - reference).abs()
    allowed = atol + rtol * reference.abs() + dtype_slack * (cpu.detach().double() - reference).abs()
    nan_ok = g.isnan() == reference.isnan()
    ok = ((error <= allowed) | (g.isnan() & reference.isnan()) | (g.double() == reference)) & nan_ok
    if bool(ok.all()):
        return None
    bad = ~ok
    worst = float(error.masked_fill(~bad | error.isnan(), 0).max())
    name = str(cpu.dtype).removeprefix("torch.")
    kind = "cpu float64 reference" if use_ref else f"cpu {name} result"
    return (
        f"{path}: {int(bad.sum())} of {g.numel()} values differ from the {kind} "
        f"(atol={atol}, rtol={rtol}, plus {dtype_slack}x cpu's own {name} error; worst abs error {worst:.3g})"
    )


def _device_module_at_fault(exc: BaseException, device: Any) -> str | None:
    """The name of the device's torch module (torch.get_device_module) when `exc`, raised by a
    CPU run, names it or was raised inside it: the device's doing, not the sample's."""
    import traceback

    import torch

    try:
        module = torch.get_device_module(device.type).__name__
    except Exception:
        return None
    if not module or module == "torch":
        return None
    frames = {frame.f_globals.get("__name__", "") for frame, _ in traceback.walk_tb(exc.__traceback__)}
    inside = any(name == module or name.startswith(module + ".") for name in frames)
    return module if inside or f"'{module}'" in str(exc) else None


def check_eager(
    sample: FlatSample, device: Any, dtype: Any, *, grads: bool, name: str, cpu_exemption: str | None = None
) -> None:
    """Run the sample eagerly on the device and compare with the CPU (shapes and dtypes only
    for random draws and for an op the OpInfo exempts: `cpu_exemption`, see cpu_exemption()).

    Raises CaseFailure('eager-wrong') when the device raises or deviates, SampleNotRunnable
    when the CPU cannot run the sample either. On the cpu device itself only the second.
    """
    import torch

    pytree = _torch_compat.pytree()

    from . import check

    what = "forward and backward" if grads else "forward"
    cpu = torch.device("cpu")
    device_error: Exception | None
    try:
        got, got_grads = _run(sample.call, sample.tensors, device, dtype, grads, 0)
    except Exception as exc:
        device_error = exc
    else:
        device_error = None
    try:
        cpu_out, cpu_grads = _run(sample.call, sample.tensors, cpu, dtype, grads, 0)
    except Exception as exc:
        if device.type != "cpu" and (module := _device_module_at_fault(exc, device)):
            raise CaseFailure(
                "eager-wrong",
                f"eager-wrong: {name} {what}: the sample fails on cpu too, in the device module {module} "
                f"({_first_line(exc)}): torch calls the module of every registered device from code on "
                "any device (its RNG state functions from freeze_rng_state and fork_rng); provide what it asks for",
            ) from None
        if device_error is not None or device.type == "cpu":
            raise SampleNotRunnable(f"the sample fails on cpu too ({_first_line(exc)})") from None
        return  # the device runs what the CPU cannot (a dtype the CPU lacks): nothing to compare with
    if device_error is not None:
        raise CaseFailure(
            "eager-wrong",
            f"eager-wrong: {name} {what} raised on {device} where cpu runs it: {_first_line(device_error)}",
        )
    if device.type == "cpu" or has_undefined_values(name):
        return
    # random draws differ between generators; an exempt op's values may differ from the CPU's
    shapes_only = bool(cpu_exemption) or sample.reseeds or _is_random(sample.call, sample.tensors, dtype)
    ref_out = ref_grads = None
    if not shapes_only and dtype in (torch.float32, torch.float16, torch.bfloat16):
        try:
            ref_out, ref_grads = _run(sample.call, sample.tensors, cpu, torch.float64, grads, 0)
        except Exception:
            pass  # no float64 kernel on cpu: compare with cpu in the same dtype
    slack = check.EAGER_ERROR_MULTIPLIER.get(dtype, 2.0)
    problems = []
    pairs = [("output", got, cpu_out, ref_out)]
    if grads:
        pairs += [
            (f"grad of input {i}", g, c, r)
            for i, (g, c, r) in enumerate(zip(got_grads, cpu_grads, ref_grads or [None] * len(cpu_grads), strict=False))
        ]
    for what_, device_value, cpu_value, ref_value in pairs:
        d_leaves = pytree.tree_leaves(device_value)
        c_leaves = pytree.tree_leaves(cpu_value)
        r_leaves = pytree.tree_leaves(ref_value) if ref_value is not None else [None] * len(c_leaves)
        if len(d_leaves) != len(c_leaves):
            problems.append(f"{what_}: {len(d_leaves)} values where cpu gives {len(c_leaves)}")
            continue
        for n, (d, c, r) in enumerate(zip(d_leaves, c_leaves, r_leaves, strict=False)):
            path = f"{what_}[{n}]" if len(c_leaves) > 1 else what_
            if shapes_only and torch.is_tensor(c):
                if not torch.is_tensor(d) or d.shape != c.shape or d.dtype != c.dtype:
                    problems.append(f"{path}: {getattr(d, 'shape', d)} where cpu gives {tuple(c.shape)} {c.dtype}")
                continue
            problem = _compare_leaf(path, d, c, r if torch.is_tensor(r) else None, slack)
            if problem:
                problems.append(problem)
    if problems:
        raise CaseFailure(
            "eager-wrong",
            f"eager-wrong: {name} {what} on {device} differs from cpu: {problems[0]}",
            "\n".join(f"  - {p}" for p in problems[1:6]),
        )


# --------------------------------------------------------------------------------------------
# Compiled vs eager: classifying what the oracle raised
# --------------------------------------------------------------------------------------------


WRAPPER_MODULES = ("torch._dynamo", "torch._inductor")


def innermost(exc: BaseException) -> BaseException:
    """The error under dynamo's and inductor's wrappers, which is the one that says what went
    wrong: BackendCompilerFailed.inner_exception, ``raise ... from ...``, and the handled
    exception of a wrapper raised ``from None`` (torch._dynamo.exc.TorchRuntimeError around a
    fake kernel's error)."""
    seen = {id(exc)}
    while True:
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if inner is None and type(exc).__module__.startswith(WRAPPER_MODULES):
            inner = exc.__context__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def classify_compiled(exc: BaseException, name: str, what: str) -> CaseFailure:
    """The verdict of an exception from the compiled-vs-eager oracle, eager being right."""
    from . import check
    from .oracle import NotCompiledError

    if isinstance(exc, check.CompiledMismatch):
        lines = str(exc).strip().splitlines()
        return CaseFailure(
            "compiled-wrong",
            f"compiled-wrong: {name} {what}: {lines[0] if lines else 'compiled differs from eager'}",
            "\n".join(lines[1:12]),
        )
    if isinstance(exc, NotCompiledError):
        return CaseFailure("compile-error", f"compile-error: {name} {what}: not compiled: {str(exc).strip()}")
    real = innermost(exc)
    wrapper = "" if real is exc else f" (raised as {type(exc).__name__})"
    return CaseFailure("compile-error", f"compile-error: {name} {what}: {_first_line(real)}{wrapper}")
