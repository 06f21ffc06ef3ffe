"""torch.compile of scaled_dot_product_attention on flagos: right results, and on
the cuda accelerator the traced graph keeps the fused kernel CUDA's would."""

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.testing import AotEagerAndRecordGraphs

from tests.requirements import cuda_accelerator


class CausalAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


# Grouped-query shapes for the numerics; equal head counts where CUDA's kernel choice is
# compared (its memory-efficient kernel, the fp32 choice, takes no GQA: CUDA traces math).
GQA = [(1, 8, 64, 32), (1, 2, 64, 32), (1, 2, 64, 32)]
MHA = [(1, 8, 64, 32)] * 3


def _qkv(dtype=torch.float32, device="cpu", requires_grad=False, shapes=GQA):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g, dtype=dtype).to(device).requires_grad_(requires_grad) for s in shapes]


def test_compiled_attention_matches_eager_with_grads(compiled_on_workers, assert_compiles_like_eager):
    assert_compiles_like_eager(CausalAttention(), *_qkv(), grads=True)


def _traced_attention_ops(device, dtype, requires_grad=False):
    backend = AotEagerAndRecordGraphs()
    torch._dynamo.reset()
    inputs = _qkv(dtype, device, requires_grad, shapes=MHA)
    out = torch.compile(CausalAttention(), backend=backend, fullgraph=True)(*inputs)
    if requires_grad:
        out.sum().backward()  # AOT autograd compiles the backward graph at the first backward
    graphs = backend.fw_graphs + backend.bw_graphs
    return [str(n.target) for g in graphs for n in g.graph.nodes if "attention" in str(n.target)]


FLASH = "aten._scaled_dot_product_flash_attention"
HOOK = "aten._scaled_dot_product_fused_attention_overrideable"


@cuda_accelerator
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_compile_keeps_the_fused_kernel_cuda_picks(dtype):
    # Inference graphs: tracing a CUDA backward fails in a process that has loaded
    # torch_fl (pytorch/pytorch#161129, see flagos_autoload).
    on_cuda = _traced_attention_ops("cuda", dtype)
    assert on_cuda, "CUDA traced math here; the case no longer tests a fused kernel"
    assert _traced_attention_ops("flagos", dtype) == [op.replace(FLASH, HOOK) for op in on_cuda]


@cuda_accelerator
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_training_graph_pairs_the_fused_kernel_with_its_backward(dtype):
    forward, backward = _traced_attention_ops("flagos", dtype, requires_grad=True)
    assert forward != "aten._scaled_dot_product_attention_math.default"
    assert backward == forward.replace(".default", "_backward.default")
