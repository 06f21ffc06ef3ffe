"""The compiled-vs-eager check: run eagerly, compiled and as an upcast reference; compare.

This module imports only torch: repro scripts embed its source verbatim, so a repro runs
the very check that failed in the test. Everything about pytest, dynamo's counters and
the report lives in oracle.py.

Tolerances are those of a compiled result against the reference (float64, or float32 for
float16/bfloat16 results), in line with inductor's own tests (fp32 1e-4; reduced precision
compared against an fp32 reference). When eager itself is not within the tolerance of the
reference -- a long bf16 reduction, say -- the compiled result may deviate elementwise by
up to a small multiple of eager's own deviation (the rule of torch._dynamo.utils.same with
fp64_ref): a compiler is not asked to be more accurate than eager.
"""

import copy

import torch

TOLERANCES = {  # dtype of the result: (atol, rtol)
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}
EAGER_ERROR_MULTIPLIER = {torch.float16: 3.0, torch.bfloat16: 3.0}
LOW_PRECISION = (torch.float16, torch.bfloat16)


class CompiledMismatch(AssertionError):
    """A compiled result differs from eager beyond the tolerance."""


def tolerance(dtype, atol=None, rtol=None):
    default_atol, default_rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)


def reference_dtype(tensors):
    """float32 when every floating tensor is float16/bfloat16, float64 otherwise."""
    floats = [t.dtype for t in tensors if torch.is_tensor(t) and t.is_floating_point()]
    if floats and all(d in LOW_PRECISION for d in floats):
        return torch.float32
    return torch.float64


def leaves(value, path="output"):
    """(path, leaf) for every leaf of nested tuples/lists/dicts."""
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, f"{path}[{key!r}]")
    else:
        yield path, value


def clone_input(value, device=None, dtype=None, requires_grad=False):
    """A copy with the same sizes and strides (as_strided over a copied storage)."""
    if not torch.is_tensor(value):
        return copy.deepcopy(value)
    target_dtype = dtype if (dtype is not None and value.is_floating_point()) else value.dtype
    out = torch.empty_strided(value.size(), value.stride(), dtype=target_dtype, device=device or value.device)
    with torch.no_grad():
        out.copy_(value.detach())
    if requires_grad and out.is_floating_point():
        out.requires_grad_(True)
    return out


def significant_strides_equal(a, b):
    """Strides agree on every dimension of size > 1 (others are arbitrary)."""
    return all(sa == sb for size, sa, sb in zip(a.shape, a.stride(), b.stride(), strict=True) if size > 1)


def _within(actual, reference, atol, rtol, slack=None):
    allowed = atol + rtol * reference.abs()
    if slack is not None:
        allowed = allowed + slack
    error = (actual - reference).abs()
    both_nan = actual.isnan() & reference.isnan()
    same_inf = actual.isinf() & (actual == reference)
    return (error <= allowed) | both_nan | same_inf


def compare(compiled, eager, reference, *, atol=None, rtol=None, check_strides=True, what="output"):
    """Raise CompiledMismatch unless `compiled` matches `reference` like `eager` does."""
    got = list(leaves(compiled, what))
    want = list(leaves(eager, what))
    ref = list(leaves(reference, what))
    if len(got) != len(want):
        raise CompiledMismatch(f"{what}: compiled returned {len(got)} values, eager {len(want)}")
    for (path, c), (_, e), (_, r) in zip(got, want, ref, strict=True):
        if not torch.is_tensor(e):
            if c != e:
                raise CompiledMismatch(f"{path}: compiled {c!r} != eager {e!r}")
            continue
        if not torch.is_tensor(c):
            raise CompiledMismatch(f"{path}: compiled returned {type(c).__name__}, eager a tensor")
        if c.shape != e.shape or c.dtype != e.dtype:
            raise CompiledMismatch(f"{path}: compiled {tuple(c.shape)} {c.dtype}, eager {tuple(e.shape)} {e.dtype}")
        if check_strides and not significant_strides_equal(c, e):
            raise CompiledMismatch(
                f"{path}: compiled strides {c.stride()} != eager strides {e.stride()} for shape {tuple(c.shape)}"
            )
        c_cpu, e_cpu = c.detach().cpu(), e.detach().cpu()
        if not e.is_floating_point() and not e.is_complex():
            if not torch.equal(c_cpu, e_cpu):
                raise CompiledMismatch(f"{path}: compiled and eager {e.dtype} values differ")
            continue
        r_cpu = r.detach().cpu().to(torch.float64) if torch.is_tensor(r) else e_cpu.double()
        a, rt = tolerance(e.dtype, atol, rtol)
        try:
            torch.testing.assert_close(c_cpu.double(), r_cpu, atol=a, rtol=rt, equal_nan=True)
            continue
        except AssertionError as error:
            first_error = error
        eager_ok = bool(_within(e_cpu.double(), r_cpu, a, rt).all())
        if not eager_ok:
            slack = EAGER_ERROR_MULTIPLIER.get(e.dtype, 2.0) * (e_cpu.double() - r_cpu).abs()
            if bool(_within(c_cpu.double(), r_cpu, a, rt, slack).all()):
                continue
        ref_name = f"{r.dtype} reference" if torch.is_tensor(r) else "eager result"
        eager_note = (
            "eager itself is within tolerance of the reference"
            if eager_ok
            else "eager also deviates from the reference; compiled deviates more than "
            f"{EAGER_ERROR_MULTIPLIER.get(e.dtype, 2.0)}x eager's own error"
        )
        raise CompiledMismatch(
            f"{path}: compiled {e.dtype} result differs from the {ref_name} "
            f"(atol={a}, rtol={rt}); {eager_note}\n{first_error}"
        ) from None


def _floating_outputs(value):
    return [t for _, t in leaves(value) if torch.is_tensor(t) and t.requires_grad]


def _backward(outputs, seed):
    """Backpropagate seeded random output gradients (the same values for every run)."""
    tensors = _floating_outputs(outputs)
    if not tensors:
        return
    generator = torch.Generator().manual_seed(seed + 1)
    grads = [torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.dtype).to(t.device) for t in tensors]
    torch.autograd.backward(tensors, grads)


def _grads(fn, inputs):
    named = {}
    for i, x in enumerate(inputs):
        if torch.is_tensor(x) and x.requires_grad:
            named[f"grad of input {i}"] = x.grad
    if isinstance(fn, torch.nn.Module):
        for name, p in fn.named_parameters():
            if p.requires_grad:
                named[f"grad of parameter {name}"] = p.grad
    return named


def _module_copy(fn, device, dtype=None):
    if not isinstance(fn, torch.nn.Module):
        return fn
    module = copy.deepcopy(fn).to(device)
    if dtype is not None:
        module = module.to(dtype)  # converts floating parameters and buffers only
    return module


def check_compiles_like_eager(
    fn,
    input_sets,
    *,
    device,
    reference_device=None,
    grads=False,
    atol=None,
    rtol=None,
    check_strides=True,
    mark_dynamic=(),
    compile_kwargs=None,
    seed=0,
):
    """Compile `fn` once, run every input set eagerly, compiled and as a reference; compare.

    input_sets: list of input tuples; the first is compiled with `mark_dynamic`
    [(input index, dim)] applied, the others replay through the same compiled function.
    Returns (compiled outputs, eager outputs) of the last input set.
    """
    device = torch.device(device)
    compile_kwargs = dict(compile_kwargs or {})
    params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
    ref_dtype = reference_dtype(list(input_sets[0]) + params)
    ref_device = torch.device(reference_device) if reference_device is not None else device
    eager_fn = _module_copy(fn, device)
    compiled_module = _module_copy(fn, device)
    compiled_fn = torch.compile(compiled_module, **compile_kwargs)
    reference_fn = _module_copy(fn, ref_device, ref_dtype)

    compiled_out = eager_out = None
    for n, inputs in enumerate(input_sets):
        where = "" if n == 0 else f" (replay {n})"
        eager_in = [clone_input(x, device, requires_grad=grads) for x in inputs]
        compiled_in = [clone_input(x, device, requires_grad=grads) for x in inputs]
        reference_in = [clone_input(x, ref_device, ref_dtype, requires_grad=grads) for x in inputs]
        if n == 0:
            for index, dim in mark_dynamic:
                torch._dynamo.mark_dynamic(compiled_in[index], dim)
        torch.manual_seed(seed)
        eager_out = eager_fn(*eager_in)
        torch.manual_seed(seed)
        compiled_out = compiled_fn(*compiled_in)
        torch.manual_seed(seed)
        try:
            reference_out = reference_fn(*reference_in)
        except Exception:  # the function does not run in the reference dtype: compare to eager
            reference_out = eager_out
        compare(
            compiled_out,
            eager_out,
            reference_out,
            atol=atol,
            rtol=rtol,
            check_strides=check_strides,
            what="output" + where,
        )
        if grads:
            _backward(eager_out, seed)
            _backward(compiled_out, seed)
            eager_grads = _grads(eager_fn, eager_in)
            if reference_out is eager_out:
                reference_grads = eager_grads
            else:
                _backward(reference_out, seed)
                reference_grads = _grads(reference_fn, reference_in)
            compiled_grads = _grads(compiled_module, compiled_in)
            for name, eager_grad in eager_grads.items():
                compare(
                    compiled_grads.get(name),
                    eager_grad,
                    reference_grads.get(name),
                    atol=atol,
                    rtol=rtol,
                    check_strides=check_strides,
                    what=name + where,
                )
            for module in (eager_fn, compiled_module, reference_fn):
                if isinstance(module, torch.nn.Module):
                    module.zero_grad(set_to_none=True)
    return compiled_out, eager_out
