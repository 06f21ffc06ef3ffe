"""scaled_dot_product_attention on flagos: the compute device's results, and on
the cuda accelerator the fused kernel CUDA itself picks (not the math path every
PrivateUse1 device gets by default)."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from tests.requirements import cuda_accelerator, host_only

# name -> (query shape, key/value shape, keyword arguments; `_inputs` makes the masks)
CASES = {
    "causal": ((2, 4, 64, 32), (2, 4, 64, 32), {"is_causal": True}),
    "gqa": ((1, 8, 48, 64), (1, 2, 48, 64), {"is_causal": True, "enable_gqa": True}),
    "float_mask": ((2, 2, 32, 16), (2, 2, 40, 16), {"attn_mask": "float"}),
    "bool_mask_odd_length": ((1, 2, 37, 16), (1, 2, 37, 16), {"attn_mask": "bool"}),
    "head_dim_not_multiple_of_8": ((1, 2, 16, 20), (1, 2, 16, 20), {}),
}


def _inputs(name, dtype, device, requires_grad=False):
    q_shape, kv_shape, kwargs = CASES[name]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g, dtype=dtype) for s in (q_shape, kv_shape, kv_shape))
    kwargs = dict(kwargs)
    if kwargs.get("attn_mask") == "float":
        kwargs["attn_mask"] = torch.randn(q_shape[-2], kv_shape[-2], generator=g, dtype=dtype).to(device)
    elif kwargs.get("attn_mask") == "bool":
        kwargs["attn_mask"] = (torch.rand(q_shape[-2], kv_shape[-2], generator=g) > 0.3).to(device)
    tensors = [t.to(device).requires_grad_(requires_grad) for t in (q, k, v)]
    return tensors, kwargs


def _dtypes():
    return [torch.float32, torch.bfloat16] if torch.flagos.accelerator_name() == "cuda" else [torch.float32]


# Against float64 math on the CPU: flagos may take another kernel than the compute
# device would (math where CUDA pads or aligns), and a CUDA backward cannot run in a
# process that has loaded torch_fl (pytorch/pytorch#161129, see flagos_autoload).
TOLERANCE = {torch.float32: {"atol": 2e-5, "rtol": 2e-5}, torch.bfloat16: {"atol": 5e-2, "rtol": 5e-2}}


@pytest.mark.parametrize("dtype", _dtypes(), ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_float64_math_with_grads(name, dtype):
    (fq, fk, fv), fkwargs = _inputs(name, dtype, "flagos", requires_grad=True)
    (q, k, v), kwargs = _inputs(name, dtype, "cpu")
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    if isinstance(kwargs.get("attn_mask"), torch.Tensor) and kwargs["attn_mask"].is_floating_point():
        kwargs["attn_mask"] = kwargs["attn_mask"].double()
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    got = F.scaled_dot_product_attention(fq, fk, fv, **fkwargs)
    assert got.device.type == "flagos" and got.dtype == dtype
    torch.testing.assert_close(got.cpu().double(), expected.detach(), **TOLERANCE[dtype])
    grad = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    expected.backward(grad)
    got.backward(grad.to(dtype).to("flagos"))
    for mine, reference in ((fq, q), (fk, k), (fv, v)):
        torch.testing.assert_close(mine.grad.cpu().double(), reference.grad, **TOLERANCE[dtype])


class _AttentionOps(TorchDispatchMode):
    """Records the attention ops that reach dispatch (math decomposes before it)."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "attention" in func.__name__:
            self.names.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def _attention_ops(name, dtype, device, **extra):
    (q, k, v), kwargs = _inputs(name, dtype, device)
    with _AttentionOps() as seen:
        F.scaled_dot_product_attention(q, k, v, **kwargs, **extra)
    return seen.names


# aten runs CUDA's flash kernel for CUDA tensors only; flagos reaches it
# through the `overrideable` hook.
AS_FLAGOS = {"_scaled_dot_product_flash_attention": "_scaled_dot_product_fused_attention_overrideable"}


@cuda_accelerator
@pytest.mark.parametrize(
    "name, dtype",
    [(n, torch.float32) for n in ("causal", "float_mask")] + [(n, torch.bfloat16) for n in ("causal", "gqa")],
    ids=str,
)
def test_picks_the_kernel_cuda_picks(name, dtype):
    on_cuda = _attention_ops(name, dtype, "cuda")
    assert on_cuda, "CUDA chose math here; the case no longer tests a fused kernel"
    assert _attention_ops(name, dtype, "flagos") == [AS_FLAGOS.get(op, op) for op in on_cuda]


@cuda_accelerator
def test_picks_math_where_the_fused_path_would_differ():
    # A head dim aten pads only for CUDA tensors, and a mask inductor aligns only for CUDA.
    assert _attention_ops("head_dim_not_multiple_of_8", torch.bfloat16, "flagos") == []
    assert _attention_ops("bool_mask_odd_length", torch.float32, "flagos") == []


@cuda_accelerator
def test_dropout_draws_from_the_flagos_generator():
    assert _attention_ops("causal", torch.float32, "flagos", dropout_p=0.5) == []  # math, not a fused kernel
    (q, k, v), _ = _inputs("causal", torch.float32, "flagos")
    outs = []
    for _ in range(2):
        torch.flagos.manual_seed(7)
        outs.append(F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).cpu())
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


@host_only
def test_fused_hook_off_cuda_says_why():
    (q, k, v), _ = _inputs("causal", torch.float32, "flagos")
    with pytest.raises(NotImplementedError, match=r"_scaled_dot_product_fused_attention_overrideable .*flagos:0.*cpu"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v)
