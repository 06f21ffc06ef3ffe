"""The host executor's IR builder: Triton's ``InterpreterBuilder`` with a batch
of programs in every value.

Every ``TensorHandle.data`` holds ``(b,) + per-program shape`` where ``b`` is
either the number of programs run together (the batch) or 1 (a value that is
the same in every program: constants, kernel arguments, ranges). Scalars are
``(b,)``, which is what Triton's interpreter already uses for scalars
(``np.array([x])``), so the inherited elementwise operations work unchanged;
only shape-aware operations are overridden here.

Running one program at a time is the same code with a batch of 1.

No monkeypatching here: this is a subclass, used through its own
``TritonSemantic`` instance (see ``lang_adapter.py``).
"""

from __future__ import annotations

import numpy as np
import triton.language as tl

from . import libdevice_impl, memory
from ._triton_adapter import InterpreterBuilder, InterpreterOptions, TensorHandle
from ._triton_adapter import get_np_dtype as _get_np_dtype
from ._triton_adapter import interpreter_bindings as _interpreter
from ._triton_adapter import ir as _ir


class NonUniformControlFlow(RuntimeError):
    """A branch or loop bound differs between the programs of a batch."""


def _bcast(*arrays):
    """Broadcast arrays to one shape (numpy rules; the batch dimension leads)."""
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [a if a.shape == shape else np.broadcast_to(a, shape) for a in arrays]


def _with_batch(data, ndim):
    """Give ``data`` (with a leading batch dim) exactly ``1 + ndim`` dims."""
    if data.ndim == 1 + ndim:
        return data
    return data.reshape(data.shape[:1] + (1,) * ndim)


def uniform_value(data: np.ndarray):
    """The single value of a scalar handle, or NonUniformControlFlow."""
    flat = data.reshape(-1)
    first = flat[0]
    if flat.size > 1 and not (flat == first).all():
        raise NonUniformControlFlow("control flow depends on a value that differs between programs")
    return first


class BatchedBlockPointer:
    """``tl.make_block_ptr`` pointer whose base/offsets may differ per program."""

    def __init__(self, base, shape, strides, offsets, block_shape, order):
        self.base = base
        self.shape = shape
        self.strides = strides
        self.offsets = offsets
        self.block_shape = list(block_shape)
        self.order = order

    def materialize_pointers(self, boundary_check):
        dtype_tt = self.base.get_element_ty()
        n_bytes = max(1, dtype_tt.primitive_bitwidth // 8)
        nd = len(self.block_shape)
        ptrs = _with_batch(self.base.data, nd)
        masks = np.ones((1, *self.block_shape), dtype=bool)
        for dim in range(nd):
            bcast = [1] * (nd + 1)
            bcast[dim + 1] = self.block_shape[dim]
            off = _with_batch(self.offsets[dim].data.astype(np.int64), nd) + np.arange(
                self.block_shape[dim], dtype=np.int64
            ).reshape(bcast)
            stride = _with_batch(self.strides[dim].data.astype(np.int64), nd)
            ptrs = ptrs + (n_bytes * off * stride).astype(np.uint64)
            if dim in boundary_check:
                limit = _with_batch(self.shape[dim].data.astype(np.int64), nd)
                masks = masks & (off < limit) & (off >= 0)
        ptrs = np.broadcast_to(ptrs, np.broadcast_shapes(ptrs.shape, masks.shape))
        return TensorHandle(ptrs, self.base.dtype.scalar), masks


class HostBuilder(InterpreterBuilder):
    """InterpreterBuilder over batches of programs."""

    def __init__(self) -> None:
        super().__init__()
        self.set_programs(np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32), (1, 1, 1))

    # -- launch state ---------------------------------------------------------
    def set_options(self, debug: bool, sanitize_overflow: bool):
        self.options = InterpreterOptions(debug=debug, sanitize_overflow=sanitize_overflow)

    def set_programs(self, x, y, z, grid):
        self.pids = (x, y, z)
        self.grid_dim = tuple(grid)
        self.grid_idx = (int(x[0]), int(y[0]), int(z[0]))
        # Undo journal of a batch: (pointers, mask, previous values) per write, so
        # a batch whose programs diverge can be rolled back and rerun one by one.
        self.journal = [] if x.shape[0] > 1 else None

    def _current(self, p, m, dtype):
        zeros = np.zeros(p.shape, dtype=dtype)
        old = memory.gather(p, m, zeros, dtype)
        if old is None:
            old = _interpreter.load(np.ascontiguousarray(p), np.ascontiguousarray(m), zeros, dtype)
        return old

    def rollback(self):
        """Undo the writes of the current batch (latest first)."""
        for p, m, old in reversed(self.journal or ()):
            p, m, old = p.reshape(-1), np.broadcast_to(m, p.shape).reshape(-1), old.reshape(-1)
            active = np.flatnonzero(m)
            # for an address written several times, the value before the first write
            _, first = np.unique(p[active], return_index=True)
            sel = active[first]
            p, old = np.ascontiguousarray(p[sel]), np.ascontiguousarray(old[sel])
            ones = np.ones(p.shape, dtype=bool)
            if not memory.scatter(p, old, ones):
                _interpreter.store(p, old, ones)
        if self.journal is not None:
            self.journal = []

    def create_get_program_id(self, axis):
        return TensorHandle(self.pids[axis], tl.int32)

    def create_get_num_programs(self, axis):
        return TensorHandle(np.array([self.grid_dim[axis]], dtype=np.int32), tl.int32)

    # -- shape-aware operations --------------------------------------------------
    def create_make_range(self, ret_ty, start, stop):
        return TensorHandle(np.arange(start, stop, dtype=np.int32).reshape(1, -1), tl.int32)

    def create_splat(self, ret_ty, arg):
        shape = tuple(ret_ty.shape)
        data = arg.data
        if data.ndim > 1:  # a one-element block
            data = data.reshape(data.shape[0])
        data = data.astype(_get_np_dtype(arg.dtype), copy=False)
        return TensorHandle(np.broadcast_to(_with_batch(data, len(shape)), data.shape[:1] + shape), arg.dtype.scalar)

    def create_unsplat(self, arg):
        data = arg.data
        return TensorHandle(data.reshape(data.shape[0], -1)[:, 0].copy(), arg.dtype.scalar)

    def create_reshape(self, arg, shape, allow_reorder):
        return TensorHandle(arg.data.reshape(arg.data.shape[:1] + tuple(shape)), arg.dtype.scalar)

    def create_trans(self, arg, perm):
        return TensorHandle(np.transpose(arg.data, (0, *(p + 1 for p in perm))), arg.dtype.scalar)

    def create_expand_dims(self, arg, axis):
        nd = arg.data.ndim - 1
        if axis < 0:
            axis += nd + 1
        return TensorHandle(np.expand_dims(arg.data, axis + 1), arg.dtype.scalar)

    def create_broadcast(self, arg, shape):
        return TensorHandle(np.broadcast_to(arg.data, arg.data.shape[:1] + tuple(shape)), arg.dtype.scalar)

    def create_cat(self, lhs, rhs):
        lhs_d, rhs_d = lhs.data, rhs.data
        batch = max(lhs_d.shape[0], rhs_d.shape[0])
        lhs_d = np.broadcast_to(lhs_d, (batch, *lhs_d.shape[1:]))
        rhs_d = np.broadcast_to(rhs_d, (batch, *rhs_d.shape[1:]))
        return TensorHandle(np.concatenate([lhs_d, rhs_d], axis=1), lhs.dtype.scalar)

    def create_join(self, lhs, rhs):
        lhs_d, rhs_d = _bcast(lhs.data, rhs.data)
        return TensorHandle(np.stack([lhs_d, rhs_d], axis=-1), lhs.dtype.scalar)

    def create_gather(self, src, indices, axis):
        src_d, idx_d = src.data, indices.data
        batch = max(src_d.shape[0], idx_d.shape[0])
        src_d = np.broadcast_to(src_d, (batch, *src_d.shape[1:]))
        idx_d = np.broadcast_to(idx_d, (batch, *idx_d.shape[1:]))
        return TensorHandle(np.take_along_axis(src_d, idx_d.astype(np.intp), axis=axis + 1), src.dtype.scalar)

    def create_histogram(self, data, bins, mask):
        values = data.data.reshape(data.data.shape[0], -1)
        if mask is None:
            valid = np.ones_like(values, dtype=bool)
        else:
            valid = np.broadcast_to(mask.data, data.data.shape).reshape(values.shape)
        out = np.zeros((values.shape[0], bins), dtype=np.int32)
        for b in range(values.shape[0]):
            sel = values[b][valid[b] & (values[b] >= 0) & (values[b] < bins)]
            out[b] = np.bincount(sel.astype(np.int64), minlength=bins)[:bins]
        return TensorHandle(out, tl.int32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        acc_dtype = d.data.dtype
        a_d = _to_compute(a.data, a.dtype.scalar).astype(acc_dtype, copy=False)
        b_d = _to_compute(b.data, b.dtype.scalar).astype(acc_dtype, copy=False)
        return TensorHandle(np.matmul(a_d, b_d) + d.data, d.dtype.scalar)

    # -- bfloat16 is stored as its bits (uint16); compute in float32 ---------------
    def binary_op(self, lhs, rhs, op):
        if lhs.dtype.scalar == tl.bfloat16 and lhs.data.dtype == np.uint16:
            out = op(bf16_to_f32(lhs.data), bf16_to_f32(rhs.data))
            if out.dtype == np.float32:
                out = f32_to_bf16(out)
            return TensorHandle(out, lhs.dtype.scalar)
        return super().binary_op(lhs, rhs, op)

    def unary_op(self, arg, op):
        if arg.dtype.scalar == tl.bfloat16 and arg.data.dtype == np.uint16:
            return TensorHandle(f32_to_bf16(op(bf16_to_f32(arg.data))), arg.dtype.scalar)
        return super().unary_op(arg, op)

    def cast_impl(self, src, dst_type):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        src_bf16 = src_ty == tl.bfloat16 and src.data.dtype == np.uint16
        if not src_bf16 and dst_ty != tl.bfloat16:
            return super().cast_impl(src, dst_type)
        values = bf16_to_f32(src.data) if src_bf16 else src.data.astype(np.float32)
        if dst_ty == tl.bfloat16:
            return TensorHandle(f32_to_bf16(values), dst_ty)
        return TensorHandle(values.astype(_get_np_dtype(dst_ty)), dst_ty)

    def create_rsqrt(self, arg):
        return self.unary_op(arg, lambda x: 1 / np.sqrt(x))

    def create_erf(self, arg):
        if arg.dtype.scalar == tl.bfloat16 and arg.data.dtype == np.uint16:
            return self.unary_op(arg, lambda x: libdevice_impl.call("__nv_erff", [x], np.float32))
        return TensorHandle(libdevice_impl.call("__nv_erf", [arg.data], arg.data.dtype), arg.dtype.scalar)

    def create_fma(self, x, y, z):
        if z.dtype.scalar == tl.bfloat16 and z.data.dtype == np.uint16:
            out = bf16_to_f32(x.data) * bf16_to_f32(y.data) + bf16_to_f32(z.data)
            return TensorHandle(f32_to_bf16(out), z.dtype.scalar)
        return super().create_fma(x, y, z)

    # -- memory ----------------------------------------------------------------
    def create_masked_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile):
        dtype_tt = ptrs.get_element_ty()
        dtype_np = _get_np_dtype(dtype_tt)
        arrays = [ptrs.data, mask.data]
        if other is not None:
            arrays.append(other.data.astype(dtype_np, copy=False))
        arrays = _bcast(*arrays)
        other_d = arrays[2] if other is not None else np.zeros(arrays[0].shape, dtype=dtype_np)
        ret = memory.gather(arrays[0], arrays[1], other_d, dtype_np)
        if ret is None:
            ret = _interpreter.load(*(np.ascontiguousarray(a) for a in (arrays[0], arrays[1], other_d)), dtype_np)
        return TensorHandle(ret, dtype_tt)

    def create_masked_store(self, ptrs, value, mask, cache_modifier, eviction_policy):
        p, v, m = _bcast(ptrs.data, value.data, mask.data)
        if self.journal is not None:
            self.journal.append((p, m, self._current(p, m, v.dtype)))
        if not memory.scatter(p, v, m):
            _interpreter.store(np.ascontiguousarray(p), np.ascontiguousarray(v), np.ascontiguousarray(m))

    def create_atomic_cas(self, ptr, cmp, val, sem, scope):
        p, c, v = (np.ascontiguousarray(a) for a in _bcast(ptr.data, cmp.data, val.data))
        old = super().create_atomic_cas(
            TensorHandle(p, ptr.dtype), TensorHandle(c, cmp.dtype), TensorHandle(v, val.dtype), sem, scope
        )
        if self.journal is not None:
            self.journal.append((p, np.ones(p.shape, dtype=bool), old.data))
        return old

    def create_atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):
        p, v, m = (np.ascontiguousarray(a) for a in _bcast(ptr.data, val.data, mask.data))
        old = super().create_atomic_rmw(
            rmwOp, TensorHandle(p, ptr.dtype), TensorHandle(v, val.dtype), TensorHandle(m, mask.dtype), sem, scope
        )
        if self.journal is not None:
            self.journal.append((p, m, old.data))
        return old

    def create_make_block_ptr(self, base, shape, strides, offsets, block_shape, order):
        return BatchedBlockPointer(base, shape, strides, [o.clone() for o in offsets], block_shape, order)

    def create_advance(self, ptr, offsets):
        if len(ptr.offsets) != len(offsets):
            raise ValueError("len(ptr.offsets) != len(offsets)")
        new_offsets = [
            TensorHandle(o.data + d.data.astype(o.data.dtype), o.dtype)
            for o, d in zip(ptr.offsets, offsets, strict=False)
        ]
        return BatchedBlockPointer(ptr.base, ptr.shape, ptr.strides, new_offsets, ptr.block_shape, ptr.order)

    def create_tensor_pointer_load(
        self, ptr, boundary_check, padding_option, cache_modifier, eviction_policy, is_volatile
    ):
        ptrs, masks = ptr.materialize_pointers(boundary_check)
        dtype_tt = ptrs.get_element_ty()
        dtype_np = _get_np_dtype(dtype_tt)
        if padding_option == _ir.PADDING_OPTION.PAD_NAN:
            other = TensorHandle(np.full((1,), float("nan"), dtype=dtype_np), dtype_tt)
        else:
            other = None
        return self.create_masked_load(
            ptrs, TensorHandle(masks, tl.int1), other, cache_modifier, eviction_policy, is_volatile
        )

    def create_tensor_pointer_store(self, ptr, value, boundary_check, cache_modifier, eviction_policy):
        ptrs, masks = ptr.materialize_pointers(boundary_check)
        return self.create_masked_store(ptrs, value, TensorHandle(masks, tl.int1), cache_modifier, eviction_policy)

    def _one_program_only(self, what):
        if self.pids[0].shape[0] != 1:
            raise NonUniformControlFlow(f"{what} runs one program at a time on the host")

    def create_make_tensor_descriptor(self, *args, **kwargs):
        self._one_program_only("a tensor descriptor")
        return super().create_make_tensor_descriptor(*args, **kwargs)

    def create_descriptor_load(self, desc, indices, cache_modifier, eviction_policy):
        self._one_program_only("a tensor descriptor")
        ptrs, mask = desc.materialize_pointers(indices)
        ptrs = TensorHandle(ptrs.data.reshape((1, *ptrs.data.shape)), ptrs.dtype)
        mask = mask.reshape((1, *mask.shape))
        dtype_tt = ptrs.get_element_ty()
        other = None
        if desc.padding == _ir.PADDING_OPTION.PAD_NAN:
            other = TensorHandle(np.full((1,), float("nan"), dtype=_get_np_dtype(dtype_tt)), dtype_tt)
        return self.create_masked_load(ptrs, TensorHandle(mask, tl.int1), other, cache_modifier, eviction_policy, False)

    def create_descriptor_store(self, desc, value, indices):
        self._one_program_only("a tensor descriptor")
        ptrs, mask = desc.materialize_pointers(indices)
        ptrs = TensorHandle(ptrs.data.reshape((1, *ptrs.data.shape)), ptrs.dtype)
        return self.create_masked_store(ptrs, value, TensorHandle(mask.reshape((1, *mask.shape)), tl.int1), None, None)

    def create_descriptor_gather(self, *args, **kwargs):
        raise NotImplementedError("tensor descriptor gather is not supported by the flagos host executor")

    def create_descriptor_scatter(self, *args, **kwargs):
        raise NotImplementedError("tensor descriptor scatter is not supported by the flagos host executor")

    # -- elementwise fixes -------------------------------------------------------
    # LLVM's minnum/maxnum return the non-NaN operand (numpy's fmin/fmax); the
    # interpreter uses np.minimum/np.maximum, which propagate NaN.
    def create_minnumf(self, lhs, rhs):
        return self.binary_op(lhs, rhs, np.fmin)

    def create_maxnumf(self, lhs, rhs):
        return self.binary_op(lhs, rhs, np.fmax)

    def create_ashr(self, lhs, rhs):
        from ._triton_adapter import get_signed_np_dtype as _get_signed_np_dtype

        lhs_d = lhs.data.astype(_get_signed_np_dtype(lhs.data.dtype), copy=False)
        rhs_d = rhs.data.astype(_get_signed_np_dtype(rhs.data.dtype), copy=False)
        return TensorHandle(np.right_shift(lhs_d, rhs_d).astype(lhs.data.dtype, copy=False), lhs.dtype.scalar)

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        out_dtype = _get_np_dtype(retType)
        data = libdevice_impl.call(symbol, [a.data for a in argList], out_dtype)
        return TensorHandle(np.asarray(data).astype(out_dtype, copy=False), retType.scalar)

    def create_inline_asm(self, inlineAsm, constraints, values, type, isPure, pack):
        raise NotImplementedError("inline_asm_elementwise is not supported by the flagos host executor")

    def create_print(self, prefix, hex, values, isSigned):
        batch = max([v.data.shape[0] for v in values] + [1])
        for b in range(batch):
            pid = tuple(int(p[b] if p.shape[0] > 1 else p[0]) for p in self.pids)
            msg = f"pid ({pid[0]}, {pid[1]}, {pid[2]})"
            if prefix:
                msg += f" {prefix}"
            for value in values:
                v = value.data[b if value.data.shape[0] > 1 else 0]
                print(msg + (f" {np.vectorize(hex_fmt)(v)}" if hex else f" {v}"))

    def create_assert(self, condition, message):
        if not bool(np.all(condition.data)):
            raise AssertionError(message)

    def create_assume(self, condition):
        if not bool(np.all(condition.data)):
            raise AssertionError("Assume failed")


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(values):
    """Round to nearest even, as the CUDA conversion does; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    out = ((bits + rounding) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), out)


def _to_compute(data, dtype):
    """Values of a dot operand as numpy numbers (bf16 and fp8 are stored as bits)."""
    from ._triton_adapter import convert_float as _convert_float

    if dtype == tl.bfloat16 and data.dtype == np.uint16:
        return bf16_to_f32(data)
    if dtype.is_fp8():
        return _convert_float(data, dtype, tl.float16, None).view(np.float16).reshape(data.shape)
    return data


def hex_fmt(x):
    return f"0x{int(x):02x}"
