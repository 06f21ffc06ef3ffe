"""``tl.reduce`` and ``tl.associative_scan`` for the host executor, vectorised.

Triton's interpreter applies a custom combine function one element at a time
(a Python loop over the whole block). Here the combine function runs on whole
blocks: log2(n) calls for a reduction (adjacent pairs, so the left operand is
always the earlier element) and log2(n) calls for a scan (Hillis-Steele).
Triton's standard sum/max/min/xor/prod combines take numpy fast paths.

Values carry a leading batch dimension (see ``builder.py``).
"""

from __future__ import annotations

import numpy as np
import triton.language as tl
from triton.language import standard as _std

from . import translate
from ._triton_adapter import TensorHandle
from ._triton_adapter import get_np_dtype as _get_np_dtype


def _unwrap(x):
    return x.value if isinstance(x, tl.constexpr) else x


def _as_tensor(data, dtype, shape):
    ty = tl.block_type(dtype, list(shape)) if shape else dtype
    return tl.core.tensor(TensorHandle(data, dtype.scalar), ty)


def _results(ret):
    return ret if isinstance(ret, tuple) else (ret,)


def _prepare(inputs, axis):
    """Common broadcasting: (datas, dtypes, per-program shape, axis)."""
    shape = [int(_unwrap(s)) for s in inputs[0].shape]
    batch = max(t.handle.data.shape[0] for t in inputs)
    datas = [np.broadcast_to(t.handle.data, (batch, *shape)) for t in inputs]
    dtypes = [t.dtype for t in inputs]
    if axis is None:
        numel = int(np.prod(shape)) if shape else 1
        datas = [d.reshape(batch, numel) for d in datas]
        shape, axis = [numel], 0
    elif axis < 0:
        axis += len(shape)
    return datas, dtypes, shape, axis


_FAST_REDUCE = {
    "_sum_combine": np.sum,
    "_elementwise_max": np.fmax.reduce,
    "_elementwise_min": np.fmin.reduce,
    "_xor_combine": np.bitwise_xor.reduce,
    "_prod_combine": np.prod,
}


def _fast_reduce_op(combine_fn):
    for name, op in _FAST_REDUCE.items():
        if combine_fn is getattr(_std, name, None):
            return op
    return None


def reduce(input, axis, combine_fn, keep_dims=False, **_ignored):
    single = not isinstance(input, tuple)
    inputs = (input,) if single else tuple(input)
    axis = _unwrap(axis)
    keep_dims = bool(_unwrap(keep_dims))
    orig_rank = len(inputs[0].shape)
    datas, dtypes, shape, ax = _prepare(inputs, axis)

    op = _fast_reduce_op(combine_fn) if single else None
    if op is not None:
        np_dtype = _get_np_dtype(dtypes[0])
        with np.errstate(all="ignore"):
            outs = [op(datas[0], axis=ax + 1).astype(np_dtype, copy=False)]
        out_dtypes = dtypes
    else:
        outs, out_dtypes = _tree_reduce(datas, dtypes, shape, ax, combine_fn)

    # outs have the reduced axis removed
    new_shape = shape[:ax] + shape[ax + 1 :]
    results = []
    for data, dtype in zip(outs, out_dtypes, strict=False):
        if keep_dims:
            if axis is None:
                data = data.reshape((data.shape[0],) + (1,) * orig_rank)
                rshape = [1] * orig_rank
            else:
                data = np.expand_dims(data, ax + 1)
                rshape = [*shape[:ax], 1, *shape[ax + 1 :]]
        else:
            rshape = new_shape
        results.append(_as_tensor(np.ascontiguousarray(data), dtype, rshape))
    return results[0] if single else tuple(results)


def _tree_reduce(datas, dtypes, shape, ax, combine_fn):
    n = shape[ax]
    cur_shape = list(shape)
    while n > 1:
        half = n // 2
        lhs_idx = [slice(None)] * (len(shape) + 1)
        rhs_idx = list(lhs_idx)
        lhs_idx[ax + 1] = slice(0, 2 * half, 2)
        rhs_idx[ax + 1] = slice(1, 2 * half, 2)
        pair_shape = [*cur_shape[:ax], half, *cur_shape[ax + 1 :]]
        lhs = [_as_tensor(d[tuple(lhs_idx)], t, pair_shape) for d, t in zip(datas, dtypes, strict=False)]
        rhs = [_as_tensor(d[tuple(rhs_idx)], t, pair_shape) for d, t in zip(datas, dtypes, strict=False)]
        outs = _results(translate.call(combine_fn, *lhs, *rhs))
        batch = datas[0].shape[0]
        new = []
        for out, d in zip(outs, datas, strict=False):
            arr = np.broadcast_to(out.handle.data, (batch, *pair_shape))
            if n % 2:
                tail_idx = [slice(None)] * (len(shape) + 1)
                tail_idx[ax + 1] = slice(n - 1, n)
                arr = np.concatenate([arr, d[tuple(tail_idx)].astype(arr.dtype, copy=False)], axis=ax + 1)
            new.append(arr)
        dtypes = [out.dtype for out in outs]
        datas = new
        n = half + (n % 2)
        cur_shape[ax] = n
    out_datas = [np.take(d, 0, axis=ax + 1) for d in datas]
    return out_datas, dtypes


_FAST_SCAN = {"_sum_combine": np.cumsum, "_prod_combine": np.cumprod}


def associative_scan(input, axis, combine_fn, reverse=False, **_ignored):
    single = not isinstance(input, tuple)
    inputs = (input,) if single else tuple(input)
    axis = _unwrap(axis)
    reverse = bool(_unwrap(reverse))
    datas, dtypes, shape, ax = _prepare(inputs, axis)
    if reverse:
        datas = [np.flip(d, axis=ax + 1) for d in datas]

    op = None
    if single:
        for name, fast in _FAST_SCAN.items():
            if combine_fn is getattr(_std, name, None):
                op = fast
    if op is not None:
        with np.errstate(all="ignore"):
            outs = [op(datas[0], axis=ax + 1).astype(_get_np_dtype(dtypes[0]), copy=False)]
    else:
        outs, dtypes = _hillis_steele(datas, dtypes, shape, ax, combine_fn)

    if reverse:
        outs = [np.flip(d, axis=ax + 1) for d in outs]
    results = [_as_tensor(np.ascontiguousarray(d), t, shape) for d, t in zip(outs, dtypes, strict=False)]
    return results[0] if single else tuple(results)


def _hillis_steele(datas, dtypes, shape, ax, combine_fn):
    n = shape[ax]
    datas = [np.ascontiguousarray(d) for d in datas]
    position = np.arange(n).reshape([1] * (ax + 1) + [n] + [1] * (len(shape) - ax - 1))
    step = 1
    while step < n:
        # lhs[i] = x[i - step]; positions i < step get a wrapped value, masked below
        lhs = [_as_tensor(np.roll(d, step, axis=ax + 1), t, shape) for d, t in zip(datas, dtypes, strict=False)]
        rhs = [_as_tensor(d, t, shape) for d, t in zip(datas, dtypes, strict=False)]
        with np.errstate(all="ignore"):
            outs = _results(translate.call(combine_fn, *lhs, *rhs))
        valid = position >= step
        datas = [
            np.where(valid, o.handle.data, d.astype(o.handle.data.dtype, copy=False))
            for o, d in zip(outs, datas, strict=False)
        ]
        dtypes = [o.dtype for o in outs]
        step *= 2
    return datas, dtypes
