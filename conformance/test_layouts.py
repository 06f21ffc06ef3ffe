"""Layouts: channels_last convolutions compile and match eager, and fake/meta strides agree
with the strides the device's real kernels produce.

inductor plans every buffer from fake tensors. A real kernel that returns other strides than
its fake counterpart predicted makes compiled code fail its stride assertions or compute on a
misread layout -- the known convolution bug: the conv kernel honoured
channels_last while its fake/meta kernel predicted contiguous strides, so inductor's layout
optimisation (channels_last for convs on GPU devices) rejected every conv graph.

The corpus test runs each op of a corpus, forward and backward separately, under torch's
CrossRefFakeMode, which runs every op on fake tensors too and compares sizes, strides and
aliasing. The corpus is split into families, one test each, and each test reports every
mismatching op of its family in one failure message (an expectations entry for a known
problem in one family then leaves the others guarding their ops -- above all the convs):

- conv: conv1d/2d/3d, strided, grouped, depthwise, transposed 1d/2d/3d and grouped
  transposed, in contiguous and channels_last layouts and mixed input/weight layouts;
- norm: batch norm (train, eval), group norm, layer norm, instance norm, both layouts;
- norm_noncontiguous: the same norms on a transposed input ([B, S, F] models);
- pool: max/avg/adaptive pooling 1d/2d/3d, both layouts;
- upsample: nearest, bilinear, trilinear, both layouts;
- matmul: mm/addmm/bmm/baddbmm/matmul/linear with transposed and permuted inputs;
- memory_format: contiguous(channels_last[_3d]), to(memory_format=...), elementwise ops
  mixing layouts;
- cat: cat of mixed layouts;
- like: empty_like/zeros_like/ones_like/clone of channels_last, permuted and transposed
  tensors (preserve_format);
- by_device_type: the ops whose meta kernels choose a layout by the device type's name, "cuda"
  or "anything else" (FFTs staged as cuFFT or MKL stage them, SVD/eig vectors row- or
  column-major, nonzero_static, channels_last 2d padding). A device that runs another
  backend's kernels under its own name gets the other family's prediction. Each case runs in a
  child interpreter; an op the device does not run eagerly (no FFT, no LAPACK) is left out, a
  warning names it with the eager error (all of them left out: a skip).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pytest_flagos import _torch_compat

from conformance_support import bullet, fail, how_it_ended, run_python, tail

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.flagos_area("layouts")

CL = {4: torch.channels_last, 5: torch.channels_last_3d}


# ---- compiled convolutions ----------------------------------------------------------------


def _conv_net():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=2),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )


@pytest.mark.requires("inductor")
def test_conv_net_with_layout_optimization_compiles_and_matches_eager(fresh_inductor_cache, assert_compiles_like_eager):
    """inductor's layout optimisation (forced on, whatever the device's heuristics say)
    turns the convs' activations channels_last; forward and gradients must match eager."""
    torch.manual_seed(0)
    patches = {"force_layout_optimization": True, "layout_optimization": True}
    assert_compiles_like_eager(_conv_net(), torch.randn(2, 3, 16, 16), grads=True, config_patches=patches)


@pytest.mark.requires("inductor")
def test_channels_last_input_conv_compiles_and_matches_eager(fresh_inductor_cache, assert_compiles_like_eager):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3)
    x = torch.randn(2, 4, 10, 10).to(memory_format=torch.channels_last)
    assert_compiles_like_eager(conv, x, grads=True)


# ---- fake vs real strides ------------------------------------------------------------------


class _RecordingCrossRef(_torch_compat.cross_ref_fake_mode_class()):
    """CrossRefFakeMode that records which ops it actually compared (it skips ops without a
    meta kernel, and some tags), so a case that compared nothing is reported too."""

    def __init__(self):
        super().__init__()
        self.checked = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (
            _torch_compat.has_meta(func)
            and torch.Tag.dynamic_output_shape not in func.tags
            and torch.Tag.inplace_view not in func.tags
            and torch.Tag.data_dependent_output not in func.tags
        ):
            self.checked.append(str(func))
        return super().__torch_dispatch__(func, types, args, kwargs)


def _rand(shape, device, fmt=None, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed + len(shape) * 31 + sum(shape))
    t = torch.randn(shape, generator=g).to(device)
    if fmt is not None:
        t = t.contiguous(memory_format=fmt)
    return t.requires_grad_(grad)


def _transposed(shape, device, dims=(-1, -2), grad=False):
    """A tensor of `shape` whose storage is laid out with `dims` swapped."""
    d0, d1 = dims
    swapped = list(shape)
    swapped[d0], swapped[d1] = swapped[d1], swapped[d0]
    t = _rand(tuple(swapped), device).transpose(d0, d1)
    return t.detach().requires_grad_(grad)


def _case_runner(forward, inputs):
    """(forward under the mode, backward under the mode) callables for one corpus case."""

    def run_forward():
        return forward(*[x.detach() for x in inputs])

    def run_backward():
        leaves = [x.detach().requires_grad_(True) for x in inputs if x.is_floating_point()]
        it = iter(leaves)
        args = [next(it) if x.is_floating_point() else x for x in inputs]
        out = forward(*args)
        outs = [
            o for o in (out if isinstance(out, (tuple, list)) else (out,)) if torch.is_tensor(o) and o.requires_grad
        ]
        grads = [torch.ones_like(o) for o in outs]  # ones_like keeps the output's layout
        return outs, grads, leaves

    return run_forward, run_backward


CONVS = {
    # name: (fn, input shape, weight shape, kwargs, bias size)
    "conv1d": (F.conv1d, (2, 4, 9), (6, 4, 3), {}, 6),
    "conv2d": (F.conv2d, (2, 4, 9, 9), (6, 4, 3, 3), {"padding": 1}, 6),
    "conv2d_strided": (F.conv2d, (2, 4, 9, 9), (6, 4, 3, 3), {"stride": 2}, 6),
    "conv3d": (F.conv3d, (1, 4, 5, 5, 5), (6, 4, 3, 3, 3), {}, 6),
    "grouped_conv2d": (F.conv2d, (2, 4, 9, 9), (6, 2, 3, 3), {"groups": 2}, 6),
    "depthwise_conv2d": (F.conv2d, (2, 4, 9, 9), (4, 1, 3, 3), {"groups": 4, "stride": 2}, 4),
    "conv_transpose1d": (F.conv_transpose1d, (2, 4, 5), (4, 6, 3), {"stride": 2}, 6),
    "conv_transpose2d": (F.conv_transpose2d, (2, 4, 5, 5), (4, 6, 3, 3), {"stride": 2}, 6),
    "conv_transpose3d": (F.conv_transpose3d, (1, 4, 3, 3, 3), (4, 2, 2, 2, 2), {}, 2),
    "grouped_conv_transpose2d": (F.conv_transpose2d, (2, 4, 5, 5), (4, 3, 3, 3), {"groups": 2}, 6),
}


def _conv_family(device):
    cases = {}
    for name, (fn, x_shape, w_shape, kwargs, bias) in CONVS.items():

        def run(x, w, b, fn=fn, kwargs=kwargs):
            return fn(x, w, b, **kwargs)

        layouts = ["contiguous"] + (["channels_last"] if len(x_shape) in CL else [])
        for layout in layouts:
            fmt = CL[len(x_shape)] if layout == "channels_last" else None
            cases[f"{name}[{layout}]"] = (
                run,
                (_rand(x_shape, device, fmt), _rand(w_shape, device, fmt), _rand((bias,), device)),
                True,
            )
        if len(x_shape) == 4:  # mixed: the input's layout and the weight's disagree
            cases[f"{name}[channels_last input, contiguous weight]"] = (
                run,
                (_rand(x_shape, device, torch.channels_last), _rand(w_shape, device), _rand((bias,), device)),
                True,
            )
            cases[f"{name}[contiguous input, channels_last weight]"] = (
                run,
                (_rand(x_shape, device), _rand(w_shape, device, torch.channels_last), _rand((bias,), device)),
                True,
            )
    return cases


def _norm_family(device):
    cases = {}
    weight, bias = _rand((6,), device), _rand((6,), device)
    rm, rv = torch.zeros(6, device=device), torch.ones(6, device=device)
    for layout, fmt in (("contiguous", None), ("channels_last", torch.channels_last)):
        x = _rand((2, 6, 5, 5), device, fmt)
        cases[f"batch_norm_train[{layout}]"] = (
            lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
            (x, weight, bias),
            True,
        )
        cases[f"batch_norm_eval[{layout}]"] = (
            lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=False),
            (x, weight, bias),
            True,
        )
        cases[f"group_norm[{layout}]"] = (lambda x, w, b: F.group_norm(x, 3, w, b), (x, weight, bias), True)
        cases[f"layer_norm_over_HW[{layout}]"] = (lambda x: F.layer_norm(x, (5, 5)), (x,), True)
        cases[f"instance_norm[{layout}]"] = (lambda x: F.instance_norm(x), (x,), True)
    cases["layer_norm[last dim, affine]"] = (
        lambda x, w, b: F.layer_norm(x, (16,), w, b),
        (_rand((3, 5, 16), device), _rand((16,), device), _rand((16,), device)),
        True,
    )
    return cases


def _norm_noncontiguous_family(device):
    """Normalizations fed a transposed (non-contiguous, dense) input, as a [B, S, F] model
    does with `norm(x.transpose(1, 2))`."""
    x = _transposed((2, 6, 5), device, dims=(1, 2))  # [B, C, L] laid out as [B, L, C]
    weight, bias = _rand((6,), device), _rand((6,), device)
    rm, rv = torch.zeros(6, device=device), torch.ones(6, device=device)
    return {
        "batch_norm_eval[transposed]": (
            lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=False),
            (x, weight, bias),
            True,
        ),
        "batch_norm_train[transposed]": (
            lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
            (x, weight, bias),
            True,
        ),
        "group_norm[transposed]": (lambda x, w, b: F.group_norm(x, 2, w, b), (x, weight, bias), True),
        "instance_norm[transposed]": (lambda x: F.instance_norm(x), (x,), True),
        "layer_norm[transposed]": (lambda x: F.layer_norm(x, (5,)), (x,), True),
    }


def _pool_family(device):
    cases = {}
    for layout, fmt in (("contiguous", None), ("channels_last", torch.channels_last)):
        x = _rand((2, 6, 5, 5), device, fmt)
        cases[f"max_pool2d[{layout}]"] = (lambda x: F.max_pool2d(x, 2, return_indices=True), (x,), True)
        cases[f"avg_pool2d[{layout}]"] = (lambda x: F.avg_pool2d(x, 2, ceil_mode=True), (x,), True)
        cases[f"adaptive_avg_pool2d[{layout}]"] = (lambda x: F.adaptive_avg_pool2d(x, (2, 3)), (x,), True)
        cases[f"adaptive_max_pool2d[{layout}]"] = (lambda x: F.adaptive_max_pool2d(x, 2), (x,), True)
    x3 = _rand((1, 4, 4, 6, 6), device, torch.channels_last_3d)
    cases["avg_pool3d[channels_last_3d]"] = (lambda x: F.avg_pool3d(x, 2), (x3,), True)
    cases["max_pool3d[channels_last_3d]"] = (lambda x: F.max_pool3d(x, 2), (x3,), True)
    cases["max_pool1d"] = (lambda x: F.max_pool1d(x, 2), (_rand((2, 4, 9), device),), True)
    return cases


def _upsample_family(device):
    cases = {}
    for layout, fmt in (("contiguous", None), ("channels_last", torch.channels_last)):
        x = _rand((2, 6, 5, 5), device, fmt)
        cases[f"upsample_nearest2d[{layout}]"] = (
            lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
            (x,),
            True,
        )
        cases[f"upsample_bilinear2d[{layout}]"] = (
            lambda x: F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=False),
            (x,),
            True,
        )
    x3 = _rand((1, 4, 4, 6, 6), device, torch.channels_last_3d)
    cases["upsample_trilinear3d[channels_last_3d]"] = (
        lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"),
        (x3,),
        True,
    )
    return cases


def _matmul_family(device):
    b = _rand((12, 5), device)
    return {
        "mm[a.t() @ b]": (lambda a, b: a.t() @ b, (_rand((12, 8), device), b), True),
        "mm[a @ b.t()]": (lambda a, b: a @ b.t(), (_rand((8, 12), device), _rand((5, 12), device)), True),
        "mm[a.t() @ b.t()]": (lambda a, b: a.t() @ b.t(), (_rand((12, 8), device), _rand((5, 12), device)), True),
        "addmm[transposed]": (
            lambda c, a, b: torch.addmm(c, a.t(), b),
            (_rand((5,), device), _rand((12, 8), device), b),
            True,
        ),
        "bmm[transposed lhs]": (
            lambda a, b: torch.bmm(a.transpose(1, 2), b),
            (_rand((3, 12, 8), device), _rand((3, 12, 5), device)),
            True,
        ),
        "bmm[transposed rhs]": (
            lambda a, b: torch.bmm(a, b.transpose(1, 2)),
            (_rand((3, 8, 12), device), _rand((3, 5, 12), device)),
            True,
        ),
        "baddbmm[transposed]": (
            lambda c, a, b: torch.baddbmm(c, a, b.transpose(1, 2)),
            (_rand((3, 8, 5), device), _rand((3, 8, 12), device), _rand((3, 5, 12), device)),
            True,
        ),
        "matmul[3d @ 2d transposed]": (
            lambda a, b: torch.matmul(a, b.t()),
            (_rand((3, 8, 12), device), _rand((5, 12), device)),
            True,
        ),
        "matmul[permuted 4d]": (
            lambda a, b: torch.matmul(a.permute(0, 2, 1, 3), b.permute(0, 2, 3, 1)),
            (_rand((2, 7, 3, 4), device), _rand((2, 5, 3, 4), device)),
            True,
        ),
        "linear[transposed input]": (
            lambda x, w: F.linear(x.transpose(0, 1), w),
            (_rand((6, 4, 12), device), _rand((5, 12), device)),
            True,
        ),
    }


def _memory_format_family(device):
    nchw, ncdhw = _rand((2, 6, 5, 4), device), _rand((1, 4, 3, 5, 6), device)
    return {
        "contiguous(channels_last)": (lambda x: x.contiguous(memory_format=torch.channels_last), (nchw,), True),
        "contiguous(channels_last_3d)": (lambda x: x.contiguous(memory_format=torch.channels_last_3d), (ncdhw,), True),
        "to(memory_format=channels_last)": (lambda x: x.to(memory_format=torch.channels_last) * 1.0, (nchw,), True),
        "contiguous() of channels_last": (
            lambda x: x.contiguous(),
            (_rand((2, 6, 5, 4), device, torch.channels_last),),
            True,
        ),
        "relu_and_add[channels_last]": (
            lambda x: F.relu(x) + x * 2,
            (_rand((2, 6, 5, 4), device, torch.channels_last),),
            True,
        ),
        "add[channels_last + contiguous]": (
            lambda x, y: x + y,
            (_rand((2, 6, 5, 4), device, torch.channels_last), nchw),
            True,
        ),
        "add[contiguous + channels_last]": (
            lambda x, y: x + y,
            (nchw, _rand((2, 6, 5, 4), device, torch.channels_last)),
            True,
        ),
    }


def _cat_family(device):
    nchw = _rand((2, 6, 5, 4), device)
    cl = _rand((2, 6, 5, 4), device, torch.channels_last)
    return {
        "cat[channels_last, contiguous] dim 1": (lambda a, b: torch.cat([a, b], dim=1), (cl, nchw), True),
        "cat[contiguous, channels_last] dim 0": (lambda a, b: torch.cat([a, b], dim=0), (nchw, cl), True),
        "cat[channels_last, channels_last] dim 1": (lambda a, b: torch.cat([a, b], dim=1), (cl, cl * 2), True),
        "cat[channels_last, channels_last] dim 3": (lambda a, b: torch.cat([a, b], dim=3), (cl, cl * 2), True),
        "cat[transposed, contiguous] dim 0": (
            lambda a, b: torch.cat([a, b], dim=0),
            (_transposed((3, 7), device), _rand((3, 7), device)),
            True,
        ),
    }


def _like_family(device):
    cases = {}
    for label, t in (
        ("channels_last", _rand((2, 6, 5, 4), device, torch.channels_last)),
        ("channels_last_3d", _rand((1, 4, 3, 5, 6), device, torch.channels_last_3d)),
        ("permuted", _rand((4, 6, 5), device).permute(2, 0, 1)),
        ("transposed", _transposed((5, 7), device)),
    ):
        cases[f"empty_like[{label}]"] = (lambda x: torch.empty_like(x).fill_(1.0), (t,), False)
        cases[f"zeros_like[{label}]"] = (lambda x: torch.zeros_like(x), (t,), False)
        cases[f"ones_like[{label}]"] = (lambda x: torch.ones_like(x), (t,), False)
        cases[f"clone[{label}]"] = (lambda x: x.clone(), (t,), True)
        cases[f"clone(preserve_format)[{label}]"] = (
            lambda x: torch.clone(x, memory_format=torch.preserve_format),
            (t,),
            True,
        )
        cases[f"mul[{label}]"] = (lambda x: x * 3.0, (t,), True)
    return cases


def _by_device_type_family(device):
    """Ops whose fake layout depends on ``device.type`` in torch's meta registrations."""
    x = _rand((6, 10), device)
    x3 = _rand((3, 4, 6), device)
    x4 = _rand((2, 3, 4, 5), device)
    square = _rand((5, 5), device)
    cl = _rand((2, 3, 6, 6), device, torch.channels_last)
    return {
        "fft.fft[dim 0]": (lambda x: torch.fft.fft(x, dim=0), (x,), True),
        "fft.ifft[dim 0]": (lambda x: torch.fft.ifft(x, dim=0), (x,), True),
        "fft.ifft[transposed]": (lambda x: torch.fft.ifft(x.t()), (x,), True),
        "fft.fft2": (lambda x: torch.fft.fft2(x), (x3,), True),
        "fft.fftn[4 dims]": (lambda x: torch.fft.fftn(x), (x4,), True),
        "fft.rfft[dim 0]": (lambda x: torch.fft.rfft(x, dim=0), (x,), True),
        "fft.rfft2": (lambda x: torch.fft.rfft2(x), (x3,), True),
        "fft.rfftn[4 dims]": (lambda x: torch.fft.rfftn(x), (x4,), True),
        "fft.irfft[dim 0]": (lambda x: torch.fft.irfft(x.to(torch.complex64), dim=0), (x,), False),
        "fft.irfftn[4 dims]": (lambda x: torch.fft.irfftn(x.to(torch.complex64)), (x4,), False),
        "fft.hfft": (lambda x: torch.fft.hfft(x.to(torch.complex64)), (x,), False),
        "fft.ihfft[transposed]": (lambda x: torch.fft.ihfft(x.t()), (x,), True),
        "linalg.svd": (lambda a: torch.linalg.svd(a), (square,), False),
        "linalg.eig": (lambda a: torch.linalg.eig(a), (square,), False),
        "nonzero_static": (lambda x: torch.nonzero_static(x > 0, size=7), (x,), False),
        # forward only: the padding backward's meta kernels mispredict channels_last on cpu too
        "reflection_pad2d[channels_last]": (lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"), (cl,), False),
        "replication_pad2d[channels_last]": (lambda x: F.pad(x, (1, 2, 1, 2), mode="replicate"), (cl,), False),
    }


# Families whose ops a device may lack altogether: an op that fails eagerly is skipped, not failed.
OPTIONAL_OPS = {"by_device_type"}

FAMILIES = {
    "conv": _conv_family,
    "norm": _norm_family,
    "norm_noncontiguous": _norm_noncontiguous_family,
    "pool": _pool_family,
    "upsample": _upsample_family,
    "matmul": _matmul_family,
    "memory_format": _memory_format_family,
    "cat": _cat_family,
    "like": _like_family,
    "by_device_type": _by_device_type_family,
}


# Runs the by_device_type corpus in a fresh interpreter, one case after the other: a device
# whose FFT or complex views kill the process (the Conjugate-view copy recursion is one way)
# then fails the op that did it instead of ending the conformance run.
CHILD_SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
import test_layouts as t
device = torch.device({device!r})
cases = t.FAMILIES[{family!r}](device)
for name, case in cases.items():
    if name in {done!r}:
        continue
    print("CASE", json.dumps(name), flush=True)  # the last CASE line names a case that kills the process
    forward, inputs, _ = case
    try:
        t._case_runner(forward, inputs)[0]()
    except Exception as exc:
        print("UNSUPPORTED", json.dumps([name, type(exc).__name__ + ": " + t.first_line(exc)[:200]]), flush=True)
        continue
    problems, compared = t._run_corpus({{name: case}})
    print("RESULT", json.dumps([name, problems, compared]), flush=True)
"""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _run_in_children(device, family, timeout=300):
    """(problems, compared, {name: why the device does not run it}, number of cases), each case
    run in a child interpreter; a case that ends the child is a problem, and the next child
    goes on after it."""
    problems, compared, unsupported, seen = [], 0, {}, []
    while True:  # until a child gets through the cases not seen yet
        code = CHILD_SCRIPT.format(here=str(HERE), device=str(device), family=family, done=seen)
        proc = run_python(code, timeout=timeout)
        last = None
        for line in proc.stdout.splitlines():
            kind, _, payload = line.partition(" ")
            if kind == "CASE":
                last = json.loads(payload)
                seen.append(last)
            elif kind == "UNSUPPORTED":
                name, why = json.loads(payload)
                unsupported[name] = why
            elif kind == "RESULT":
                _, case_problems, case_compared = json.loads(payload)
                problems += case_problems
                compared += case_compared
                last = None
        if proc.returncode == 0:
            break
        died = how_it_ended(proc.returncode)
        if last is None:  # died outside a case: nothing more can be learned
            problems.append(f"the corpus's interpreter ended ({died}) outside a case:\n{tail(proc.stderr, 10)}")
            break
        said = [
            line
            for line in proc.stderr.splitlines()
            if line.strip() and not line[0].isspace() and "Warning" not in line
        ]
        problems.append(f"{last}: ended the process ({died})" + (f": {said[-1][:300]}" if said else ""))
    return problems, compared, unsupported, len(seen)


def _run_corpus(cases):
    """Every case forward, then backward, each under its own CrossRefFakeMode; returns
    (problems, number of op comparisons)."""
    problems, compared = [], 0
    for name, (forward, inputs, backward) in cases.items():
        run_forward, run_backward = _case_runner(forward, inputs)
        phases = [("forward", None)] + ([("backward", run_backward)] if backward else [])
        for phase, prepare in phases:
            mode = _RecordingCrossRef()
            try:
                if phase == "forward":
                    with mode:
                        run_forward()
                else:
                    outs, grads, leaves = prepare()  # the forward runs outside the mode
                    with mode:
                        torch.autograd.grad(outs, leaves, grads, allow_unused=True)
            except Exception as exc:
                text = first_line(exc)
                kind = "stride/metadata mismatch" if "mismatch" in text else f"raised {type(exc).__name__}"
                problems.append(f"{name} {phase}: {kind}: {text[:400]}")
                continue
            if phase == "forward" and not mode.checked:  # (a gradient may be a pass-through)
                problems.append(f"{name} {phase}: CrossRefFakeMode compared no op (no meta kernel for any op it ran?)")
            compared += len(mode.checked)
    return problems, compared


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fake_strides_match_real_kernels(flagos_device, family):
    unsupported = {}
    if family in OPTIONAL_OPS:
        problems, compared, unsupported, ops = _run_in_children(flagos_device, family)
        if len(unsupported) == ops:
            pytest.skip(
                f"{flagos_device.type} runs none of the {family!r} ops eagerly: "
                + "; ".join(f"{name}: {why}" for name, why in list(unsupported.items())[:3])
            )
    else:
        cases = FAMILIES[family](flagos_device)
        problems, compared = _run_corpus(cases)
        ops = len(cases)
    if problems:
        fail(
            f"{len(problems)} fake-vs-real check(s) of the {family!r} corpus failed on "
            f"{flagos_device.type} ({ops} ops, forward and backward; {compared} op "
            "results compared): the fake/meta kernel's strides or sizes (what inductor "
            "plans with) differ from the real kernel's, or the op failed (in CrossRefFakeMode's "
            "messages the real kernel's sizes/strides come first, the fake's second):\n"
            + bullet(problems)
            + (f"\nnot run (the device does not run them eagerly): {', '.join(unsupported)}" if unsupported else ""),
            "fake",
        )
    if unsupported:  # a pass over fewer ops: say which were left out
        warnings.warn(
            f"{flagos_device.type}: the {family!r} corpus left out the ops the device does not run "
            f"eagerly: {'; '.join(f'{name}: {why}' for name, why in unsupported.items())}",
            stacklevel=1,
        )
