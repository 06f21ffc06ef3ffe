"""Kernels compiled for the flagos target and run on the host, checked against torch.

Pointer arguments are CPU tensors: on the host accelerator flagos memory is
host RAM, so this is the memory the launcher works on (no copies).
"""

import pytest
import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice
from torch._inductor.runtime.triton_helpers import math as tl_math

from flagos_triton import binary, launcher


# ------------------------------------------------------------------ pointwise
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + 2 * y, mask=mask)


@triton.jit
def wrong_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x - 2 * y, mask=mask)  # deliberately wrong


ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


@pytest.mark.parametrize("n", [1, 1000, 4096 + 17])
def test_pointwise(compile_kernel, rng, n):
    k = compile_kernel(add_kernel, ADD_SIG, {"BLOCK": 1024})
    x, y = torch.randn(n, generator=rng), torch.randn(n, generator=rng)
    guard = torch.full((n + 64,), -7.0)
    out = guard[:n]
    k[(triton.cdiv(n, 1024), 1, 1)](x, y, out, n, 1024)
    torch.testing.assert_close(out, x + 2 * y)
    assert (guard[n:] == -7.0).all(), "masked lanes must not be written"


def test_wrong_kernel_gives_wrong_numbers(compile_kernel, rng):
    k = compile_kernel(wrong_add_kernel, ADD_SIG, {"BLOCK": 256})
    x, y = torch.randn(1000, generator=rng), torch.randn(1000, generator=rng)
    out = torch.empty(1000)
    k[(4, 1, 1)](x, y, out, 1000, 256)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(out, x + 2 * y)


@triton.jit
def mixed_dtype_kernel(x_ptr, y_ptr, out_ptr, out2_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=m)
    z = tl.sigmoid(x) * y / 3 + (offs % 7 == 0) + (y // 3) * scale
    tl.store(out_ptr + offs, z.to(tl.bfloat16), mask=m)
    tl.store(out2_ptr + offs, (y % 5) - (y >> 1) + (offs.to(tl.int64) << 33), mask=m)


def test_mixed_dtypes(compile_kernel, rng):
    n = 1000
    k = compile_kernel(
        mixed_dtype_kernel,
        {
            "x_ptr": "*fp16",
            "y_ptr": "*i32",
            "out_ptr": "*bf16",
            "out2_ptr": "*i64",
            "n": "i32",
            "scale": "fp32",
            "BLOCK": "constexpr",
        },
        {"BLOCK": 256},
    )
    x = torch.randn(n, generator=rng).half()
    y = torch.randint(-50, 50, (n,), generator=rng, dtype=torch.int32)
    out = torch.empty(n, dtype=torch.bfloat16)
    out2 = torch.empty(n, dtype=torch.int64)
    k[(4, 1, 1)](x, y, out, out2, n, 0.5, 256)
    ar = torch.arange(n)
    ref = torch.sigmoid(x.float()) * y / 3 + (ar % 7 == 0) + torch.div(y, 3, rounding_mode="trunc") * 0.5
    assert torch.equal(out, ref.bfloat16())
    ref2 = torch.fmod(y, 5).long() - (y >> 1).long() + (ar << 33)
    assert torch.equal(out2, ref2)


# ------------------------------------------------------------------ reductions (inductor style)
@triton.jit
def red_kernel(in_ptr0, out_ptr0, out_ptr1, out_ptr2, xnumel, r0_numel, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    _tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    _tmp4 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    _tmp6 = tl.full([XBLOCK, R0_BLOCK], float("inf"), tl.float32)
    _tmp6_index = tl.full([XBLOCK, R0_BLOCK], 2147483647, tl.int32)
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        tmp0 = tl.load(in_ptr0 + (r0_index + r0_numel * x0), r0_mask & xmask, eviction_policy="evict_first", other=0.0)
        tmp1 = libdevice.exp(tmp0)
        tmp3 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
        tmp5 = _tmp2 + tmp3
        _tmp2 = tl.where(r0_mask & xmask, tmp5, _tmp2)
        tmp7 = triton_helpers.maximum(_tmp4, tl_math.abs(tmp0))
        _tmp4 = tl.where(r0_mask & xmask, tmp7, _tmp4)
        _tmp6_next, _tmp6_index_next = triton_helpers.minimum_with_index(_tmp6, _tmp6_index, tmp0, r0_index)
        _tmp6 = tl.where(r0_mask & xmask, _tmp6_next, _tmp6)
        _tmp6_index = tl.where(r0_mask & xmask, _tmp6_index_next, _tmp6_index)
    tmp2 = tl.sum(_tmp2, 1)[:, None]
    tmp4 = triton_helpers.max2(_tmp4, 1)[:, None]
    _, tmp6_tmp = triton_helpers.min_with_index(_tmp6, _tmp6_index, 1)
    tmp6 = tmp6_tmp[:, None]
    tl.store(out_ptr0 + x0, tmp2, xmask)
    tl.store(out_ptr1 + x0, tmp4, xmask)
    tl.store(out_ptr2 + x0, tmp6, xmask)


RED_SIG = {
    "in_ptr0": "*fp32",
    "out_ptr0": "*fp32",
    "out_ptr1": "*fp32",
    "out_ptr2": "*i64",
    "xnumel": "i32",
    "r0_numel": "i32",
    "XBLOCK": "constexpr",
    "R0_BLOCK": "constexpr",
}


@pytest.mark.parametrize("xblock, rblock", [(1, 512), (8, 64), (32, 16)])
def test_looped_reduction_with_helpers(compile_kernel, rng, xblock, rblock):
    X, R = 70, 300
    k = compile_kernel(red_kernel, RED_SIG, {"XBLOCK": xblock, "R0_BLOCK": rblock})
    x = torch.randn(X, R, generator=rng)
    x[3, 17] = float("nan")  # maximum() propagates NaN, like torch.amax
    o0, o1, o2 = torch.empty(X), torch.empty(X), torch.empty(X, dtype=torch.int64)
    k[(triton.cdiv(X, xblock), 1, 1)](x, o0, o1, o2, X, R, xblock, rblock)
    torch.testing.assert_close(o0, x.exp().sum(1), equal_nan=True)
    torch.testing.assert_close(o1, x.abs().amax(1), equal_nan=True)
    ref_idx = x.argmin(1)
    mask = ~x.isnan().any(1)
    assert torch.equal(o2[mask], ref_idx[mask])


@triton.jit
def persistent_norm_kernel(in_ptr, w_ptr, out_ptr, mean_ptr, xnumel, r0_numel: tl.constexpr, XBLOCK: tl.constexpr):
    R0_BLOCK: tl.constexpr = 64
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0 = tl.arange(0, R0_BLOCK)[None, :]
    rmask = r0 < r0_numel
    v = tl.load(in_ptr + (r0 + r0_numel * xindex), rmask & xmask, other=0.0)
    w = tl.load(w_ptr + r0, rmask, other=0.0)
    vb = tl.broadcast_to(v, [XBLOCK, R0_BLOCK])
    mean, m2, weight = triton_helpers.welford(  # noqa: RUF059 (mirrors inductor's generated kernel)
        tl.where(rmask & xmask, vb, 0.0), tl.zeros_like(vb), tl.where(rmask & xmask, 1.0, 0.0), 1
    )
    mean = mean[:, None]
    var = (m2 / r0_numel)[:, None]
    y = (v - mean) * libdevice.rsqrt(var + 1e-5) * w
    tl.store(out_ptr + (r0 + r0_numel * xindex), y, rmask & xmask)
    tl.store(mean_ptr + xindex, mean, xmask)


def test_persistent_welford_layernorm(compile_kernel, rng):
    X, R = 33, 50
    k = compile_kernel(
        persistent_norm_kernel,
        {
            "in_ptr": "*fp32",
            "w_ptr": "*fp32",
            "out_ptr": "*fp32",
            "mean_ptr": "*fp32",
            "xnumel": "i32",
            "r0_numel": "constexpr",
            "XBLOCK": "constexpr",
        },
        {"r0_numel": R, "XBLOCK": 4},
    )
    x, w = torch.randn(X, R, generator=rng), torch.randn(R, generator=rng)
    out, mean = torch.empty(X, R), torch.empty(X)
    k[(triton.cdiv(X, 4), 1, 1)](x, w, out, mean, X, R, 4)
    torch.testing.assert_close(out, torch.nn.functional.layer_norm(x, (R,), eps=1e-5) * w, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mean, x.mean(1))


# ------------------------------------------------------------------ @triton.jit helpers
@triton.jit
def _scaled_softplus(x, beta: tl.constexpr):
    return tl.where(x * beta > 20.0, x, _log1p_exp(x * beta) / beta)


@triton.jit
def _log1p_exp(x):
    return libdevice.log1p(tl.exp(x))


@triton.jit
def helper_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = _scaled_softplus(x, 2.0)
    y = triton_helpers.minimum(y, triton_helpers.promote_to_tensor(3.0))
    tl.store(out_ptr + offs, y, mask=m)


def test_kernel_calling_jit_helpers(compile_kernel, rng):
    n = 777
    k = compile_kernel(
        helper_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}
    )
    x = torch.randn(n, generator=rng) * 15
    out = torch.empty(n)
    k[(triton.cdiv(n, 128), 1, 1)](x, out, n, 128)
    torch.testing.assert_close(out, torch.nn.functional.softplus(x, beta=2.0).clamp(max=3.0))


# ------------------------------------------------------------------ libdevice / tl_math externs
# name -> torch reference; the @triton.jit helper for each is in _UNARY_HELPERS below
UNARY = {
    "exp": torch.exp,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "log": lambda x: torch.log(x.abs() + 1),
    "log1p": lambda x: torch.log1p(x.abs()),
    "log2": lambda x: torch.log2(x.abs() + 1),
    "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 1),
    "tanh": torch.tanh,
    "erf": torch.erf,
    "erfinv": lambda x: torch.erfinv(x * 0.3),
    "sin": torch.sin,
    "atan2": lambda x: torch.atan2(x, x + 1),
    "pow": lambda x: torch.pow(x.abs(), x),
    "floor": lambda x: torch.floor(x * 3),
    "nearbyint": lambda x: torch.round(x * 3),
    "isnan": lambda x: torch.log(x).isnan().to(x.dtype),
    "lgamma": lambda x: torch.lgamma(x.abs() + 0.1),
    "tl_math.exp": torch.exp,
    "tl_math.cos": torch.cos,
    "tl_math.log": lambda x: torch.log(x.abs() + 1),
    "tl.sqrt_rn": lambda x: torch.sqrt(x.abs()),
    "tl.extra.cuda": torch.tanh,
}


@triton.jit
def unary_kernel(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, FN(x), mask=m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_libdevice_externs(compile_kernel, rng, dtype):
    sig_ty = {torch.float32: "fp32", torch.float64: "fp64"}[dtype]
    n = 300
    x = torch.randn(n, generator=rng, dtype=dtype)
    for name, ref_fn in UNARY.items():
        if name == "tl.sqrt_rn" and dtype == torch.float64:
            continue
        helper = _UNARY_HELPERS[name]
        k = compile_kernel(
            unary_kernel,
            {"x_ptr": f"*{sig_ty}", "out_ptr": f"*{sig_ty}", "n": "i32", "FN": "constexpr", "BLOCK": "constexpr"},
            {"FN": helper, "BLOCK": 128},
        )
        out = torch.empty(n, dtype=dtype)
        k[(triton.cdiv(n, 128), 1, 1)](x, out, n, helper, 128)
        tol = dict(rtol=2e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(out, ref_fn(x), equal_nan=True, msg=lambda m, name=name: f"{name}: {m}", **tol)


# jit helpers must come from source in a file; one per extern
@triton.jit
def _h_exp(x):
    return libdevice.exp(x)


@triton.jit
def _h_exp2(x):
    return libdevice.exp2(x)


@triton.jit
def _h_expm1(x):
    return libdevice.expm1(x)


@triton.jit
def _h_log(x):
    return libdevice.log(tl.abs(x) + 1)


@triton.jit
def _h_log1p(x):
    return libdevice.log1p(tl.abs(x))


@triton.jit
def _h_log2(x):
    return libdevice.log2(tl.abs(x) + 1)


@triton.jit
def _h_sqrt(x):
    return libdevice.sqrt(tl.abs(x))


@triton.jit
def _h_rsqrt(x):
    return libdevice.rsqrt(tl.abs(x) + 1)


@triton.jit
def _h_tanh(x):
    return libdevice.tanh(x)


@triton.jit
def _h_erf(x):
    return libdevice.erf(x)


@triton.jit
def _h_erfinv(x):
    return libdevice.erfinv(x * 0.3)


@triton.jit
def _h_sin(x):
    return libdevice.sin(x)


@triton.jit
def _h_atan2(x):
    return libdevice.atan2(x, x + 1)


@triton.jit
def _h_pow(x):
    return libdevice.pow(tl.abs(x), x)


@triton.jit
def _h_floor(x):
    return libdevice.floor(x * 3)


@triton.jit
def _h_nearbyint(x):
    return libdevice.nearbyint(x * 3)


@triton.jit
def _h_isnan(x):
    return libdevice.isnan(tl.log(x)).to(x.dtype)


@triton.jit
def _h_lgamma(x):
    return libdevice.lgamma(tl.abs(x) + 0.1)


@triton.jit
def _h_tl_math_exp(x):
    return tl_math.exp(x)


@triton.jit
def _h_tl_math_cos(x):
    return tl_math.cos(x)


@triton.jit
def _h_tl_math_log(x):
    return tl_math.log(tl_math.abs(x) + 1)


@triton.jit
def _h_sqrt_rn(x):
    return tl.sqrt_rn(tl.abs(x))


@triton.jit
def _h_cuda_tanh(x):
    return tl.extra.cuda.libdevice.tanh(x)


_UNARY_HELPERS = {
    "exp": _h_exp,
    "exp2": _h_exp2,
    "expm1": _h_expm1,
    "log": _h_log,
    "log1p": _h_log1p,
    "log2": _h_log2,
    "sqrt": _h_sqrt,
    "rsqrt": _h_rsqrt,
    "tanh": _h_tanh,
    "erf": _h_erf,
    "erfinv": _h_erfinv,
    "sin": _h_sin,
    "atan2": _h_atan2,
    "pow": _h_pow,
    "floor": _h_floor,
    "nearbyint": _h_nearbyint,
    "isnan": _h_isnan,
    "lgamma": _h_lgamma,
    "tl_math.exp": _h_tl_math_exp,
    "tl_math.cos": _h_tl_math_cos,
    "tl_math.log": _h_tl_math_log,
    "tl.sqrt_rn": _h_sqrt_rn,
    "tl.extra.cuda": _h_cuda_tanh,
}


def test_libdevice_type_errors_surface_at_compile(compile_kernel):
    # libdevice.exp has no int32 overload: the TTIR stage rejects it, as for a GPU.
    from triton.compiler.errors import CompilationError

    with pytest.raises(CompilationError):
        compile_kernel(
            unary_kernel,
            {"x_ptr": "*i32", "out_ptr": "*i32", "n": "i32", "FN": "constexpr", "BLOCK": "constexpr"},
            {"FN": _h_exp, "BLOCK": 128},
        )


# ------------------------------------------------------------------ scans, dot, atomics, control flow
@triton.jit
def scan_kernel(x_ptr, o1, o2, o3, R: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, R)
    x = tl.load(x_ptr + pid * R + offs)
    tl.store(o1 + pid * R + offs, tl.cumsum(x, 0))
    v, i = tl.associative_scan((x, offs), 0, triton_helpers.maximum_with_index)  # noqa: RUF059 (a Triton kernel)
    tl.store(o2 + pid * R + offs, v)
    tl.store(o3 + pid, tl.argmax(x, 0))


def test_scans_and_argmax(compile_kernel, rng):
    k = compile_kernel(
        scan_kernel, {"x_ptr": "*fp32", "o1": "*fp32", "o2": "*fp32", "o3": "*i32", "R": "constexpr"}, {"R": 64}
    )
    x = torch.randn(16, 64, generator=rng)
    o1, o2, o3 = torch.empty(16, 64), torch.empty(16, 64), torch.empty(16, dtype=torch.int32)
    k[(16, 1, 1)](x, o1, o2, o3, 64)
    torch.testing.assert_close(o1, x.cumsum(1))
    assert torch.equal(o2, x.cummax(1).values)
    assert torch.equal(o3.long(), x.argmax(1))


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(
            a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0
        )
        b = tl.load(
            b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        acc += tl.dot(a, b)
    tl.store(
        c_ptr + rm[:, None] * N + rn[None, :],
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dot(compile_kernel, rng, dtype):
    M, N, K = 100, 70, 50
    ty = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    k = compile_kernel(
        matmul_kernel,
        {
            "a_ptr": f"*{ty}",
            "b_ptr": f"*{ty}",
            "c_ptr": "*fp32",
            "M": "i32",
            "N": "i32",
            "K": "i32",
            "BM": "constexpr",
            "BN": "constexpr",
            "BK": "constexpr",
        },
        {"BM": 32, "BN": 32, "BK": 16},
    )
    a, b = torch.randn(M, K, generator=rng).to(dtype), torch.randn(K, N, generator=rng).to(dtype)
    c = torch.empty(M, N)
    k[(4, 3, 1)](a, b, c, M, N, K, 32, 32, 16)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-4)


@triton.jit
def histogram_atomic_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m)
    tl.atomic_add(out_ptr + v, 1, mask=m)


def test_atomics(compile_kernel, rng):
    x = torch.randint(0, 10, (5000,), generator=rng, dtype=torch.int32)
    out = torch.zeros(10, dtype=torch.int32)
    k = compile_kernel(
        histogram_atomic_kernel, {"x_ptr": "*i32", "out_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}
    )
    k[(triton.cdiv(5000, 128), 1, 1)](x, out, 5000, 128)
    assert torch.equal(out, torch.bincount(x, minlength=10).int())


@triton.jit
def data_dependent_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    s = tl.load(x_ptr + pid)
    offs = tl.arange(0, BLOCK)
    if s > 0:
        tl.store(out_ptr + pid * BLOCK + offs, tl.full([BLOCK], 1.0, tl.float32))
    else:
        tl.store(out_ptr + pid * BLOCK + offs, tl.full([BLOCK], -1.0, tl.float32))
    for i in range(pid):
        tl.store(out_ptr + pid * BLOCK + i, i * 1.0)


def test_data_dependent_control_flow(compile_kernel, rng):
    k = compile_kernel(
        data_dependent_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 16}
    )
    program = binary.load(k.kernel)
    assert not program.batch_ok  # one program at a time
    x = torch.randn(8, generator=rng)
    out = torch.empty(8, 16)
    k[(8, 1, 1)](x, out, 16)
    ref = torch.where(x[:, None] > 0, 1.0, -1.0).expand(8, 16).clone()
    for p in range(8):
        ref[p, :p] = torch.arange(p, dtype=torch.float32)
    assert torch.equal(out, ref)


@triton.jit
def grid3d_kernel(out_ptr, BLOCK: tl.constexpr):
    x, y, z = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    nx, ny = tl.num_programs(0), tl.num_programs(1)
    flat = (z * ny + y) * nx + x
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + flat * BLOCK + offs, flat * 1000 + offs)


@pytest.mark.parametrize("batch_elements", [1, 64, 1 << 16])
def test_batched_and_sequential_agree(compile_kernel, batch_elements):
    k = compile_kernel(grid3d_kernel, {"out_ptr": "*i32", "BLOCK": "constexpr"}, {"BLOCK": 8})
    program = binary.load(k.kernel)
    assert program.batch_ok
    grid = (5, 3, 2)
    out = torch.full((30, 8), -1, dtype=torch.int32)
    launcher.run(program, grid, (out, 8), batch_elements=batch_elements)
    ref = torch.arange(30)[:, None] * 1000 + torch.arange(8)[None, :]
    assert torch.equal(out, ref.int())


@triton.jit
def block_ptr_kernel(x_ptr, out_ptr, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, (M, N), (stride_m, 1), (pid * BM, 0), (BM, BN), (1, 0))
    dst = tl.make_block_ptr(out_ptr, (M, N), (stride_m, 1), (pid * BM, 0), (BM, BN), (1, 0))
    for _ in range(0, N, BN):
        v = tl.load(src, boundary_check=(0, 1), padding_option="zero")
        tl.store(dst, v * 2, boundary_check=(0, 1))
        src = tl.advance(src, (0, BN))
        dst = tl.advance(dst, (0, BN))


def test_block_pointers(compile_kernel, rng):
    M, N = 37, 45
    k = compile_kernel(
        block_ptr_kernel,
        {
            "x_ptr": "*fp32",
            "out_ptr": "*fp32",
            "M": "i32",
            "N": "i32",
            "stride_m": "i32",
            "BM": "constexpr",
            "BN": "constexpr",
        },
        {"BM": 8, "BN": 16},
    )
    x = torch.randn(M, N, generator=rng)
    out = torch.zeros(M, N)
    k[(triton.cdiv(M, 8), 1, 1)](x, out, M, N, N, 8, 16)
    assert torch.equal(out, x * 2)


@triton.jit
def device_assert_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.device_assert((v >= 0) & (v < 10), "index out of bounds")


def test_device_assert(compile_kernel):
    k = compile_kernel(
        device_assert_kernel, {"x_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 16}, debug=True
    )
    k[(1, 1, 1)](torch.arange(10, dtype=torch.int32), 10, 16)
    with pytest.raises(AssertionError, match="index out of bounds"):
        k[(1, 1, 1)](torch.arange(10, dtype=torch.int32) + 5, 10, 16)


# ------------------------------------------------------------------ Triton's own JIT launch path
@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256})], key=["n"])
@triton.jit
def autotuned_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 2 * tl.load(y_ptr + offs, mask=mask), mask=mask)


def test_jit_launch_and_autotune(host_backend, rng):
    """``kernel[grid](...)`` compiles for the active driver's target and launches
    through ``CompiledKernel.run``; ``triton.autotune`` times configs with the
    driver's benchmarker."""
    n = 1000
    x, y = torch.randn(n, generator=rng), torch.randn(n, generator=rng)
    out = torch.empty(n)
    add_kernel[(triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128)
    torch.testing.assert_close(out, x + 2 * y)
    out.zero_()
    autotuned_add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    torch.testing.assert_close(out, x + 2 * y)
    assert autotuned_add_kernel.best_config.kwargs["BLOCK"] in (64, 256)
    assert len(autotuned_add_kernel.configs_timings) == 2
