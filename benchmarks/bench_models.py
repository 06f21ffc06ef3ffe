"""The workloads of bench_compile.py: models built on CPU in fp32, with a fixed seed, and their inputs.

Workloads (the project's benchmark set):
    qwen3        Qwen3-0.6B-shaped causal LM forward (logits), batch 1 x 512 tokens
    qwen3-short  the same model on batch 1 x 32 tokens (launch-bound: where CUDA graphs pay)
    elementwise  a chain of pointwise ops on a 4096x4096 matrix (fuses into one kernel)
    transformer  one pre-norm transformer block (attention + MLP)
    mlp          a matmul-bound MLP
    small-mlp    the 64x512 MLP of the first A100 measurements (launch-bound)
    conv         a small conv net (conv+BN+ReLU twice, pool, linear)

qwen3 uses transformers' Qwen3ForCausalLM with random weights where transformers
is importable, and otherwise the self-contained implementation below, which
mirrors transformers' modeling_qwen3 (same module names, so a transformers
state dict loads into it).
"""

import dataclasses
import inspect
import math
from dataclasses import dataclass

import torch
from torch import nn

WORKLOADS = ("qwen3", "qwen3-short", "elementwise", "transformer", "mlp", "small-mlp", "conv")


@dataclass(frozen=True)
class Qwen3Sizes:
    vocab_size: int = 151936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    max_position_embeddings: int = 40960
    initializer_range: float = 0.02


QWEN3_0_6B = Qwen3Sizes()
QWEN3_SMALL = dataclasses.replace(
    QWEN3_0_6B,
    vocab_size=1024,
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
)

# Per workload: (full sizes, for a real accelerator; --small sizes, for the host and CI-sized machines).
SIZES = {
    "qwen3": ({"sizes": QWEN3_0_6B, "batch": 1, "seq": 512}, {"sizes": QWEN3_SMALL, "batch": 1, "seq": 32}),
    "qwen3-short": ({"sizes": QWEN3_0_6B, "batch": 1, "seq": 32}, {"sizes": QWEN3_SMALL, "batch": 1, "seq": 8}),
    "elementwise": ({"side": 4096}, {"side": 512}),
    "transformer": (
        {"dim": 1024, "heads": 16, "batch": 4, "seq": 512},
        {"dim": 128, "heads": 8, "batch": 4, "seq": 32},
    ),
    "mlp": ({"hidden": 1024, "tokens": 8192}, {"hidden": 256, "tokens": 256}),
    "small-mlp": ({"hidden": 512, "tokens": 64}, {"hidden": 512, "tokens": 64}),  # the first A100 measurements' size
    "conv": ({"batch": 64, "image": 32}, {"batch": 8, "image": 32}),
}


@dataclass
class Workload:
    name: str
    description: str
    model: nn.Module  # on CPU, fp32, eval mode
    example_input: torch.Tensor  # on CPU; floating inputs are cast to the run's dtype
    # Elements a perfectly fused kernel must read plus write per call (None: not memory-bound by design).
    elements_moved: int | None = None
    implementation: str = "torch.nn"


# --- Qwen3 (self-contained, mirrors transformers' modeling_qwen3) ---


class Qwen3RMSNorm(nn.Module):
    """Normalises in fp32, scales in the input dtype (as transformers does)."""

    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x):
        input_dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(input_dtype)


class Qwen3RotaryEmbedding(nn.Module):
    def __init__(self, sizes: Qwen3Sizes):
        super().__init__()
        exponents = torch.arange(0, sizes.head_dim, 2, dtype=torch.float) / sizes.head_dim
        self.register_buffer("inv_freq", 1.0 / (sizes.rope_theta**exponents), persistent=False)

    def forward(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Qwen3Attention(nn.Module):
    """Grouped-query attention with per-head q/k RMSNorm before RoPE; causal SDPA."""

    def __init__(self, sizes: Qwen3Sizes):
        super().__init__()
        self.head_dim = sizes.head_dim
        self.q_proj = nn.Linear(sizes.hidden_size, sizes.num_attention_heads * sizes.head_dim, bias=False)
        self.k_proj = nn.Linear(sizes.hidden_size, sizes.num_key_value_heads * sizes.head_dim, bias=False)
        self.v_proj = nn.Linear(sizes.hidden_size, sizes.num_key_value_heads * sizes.head_dim, bias=False)
        self.o_proj = nn.Linear(sizes.num_attention_heads * sizes.head_dim, sizes.hidden_size, bias=False)
        self.q_norm = Qwen3RMSNorm(sizes.head_dim, sizes.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(sizes.head_dim, sizes.rms_norm_eps)

    def forward(self, x, cos, sin):
        heads_shape = (*x.shape[:-1], -1, self.head_dim)
        q = self.q_norm(self.q_proj(x).view(heads_shape)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(heads_shape)).transpose(1, 2)
        v = self.v_proj(x).view(heads_shape).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # transformers' SDPA path without a padding mask: is_causal and native GQA.
        out = nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.head_dim**-0.5, enable_gqa=True
        )
        return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:-1], -1))


class Qwen3MLP(nn.Module):
    def __init__(self, sizes: Qwen3Sizes):
        super().__init__()
        self.gate_proj = nn.Linear(sizes.hidden_size, sizes.intermediate_size, bias=False)
        self.up_proj = nn.Linear(sizes.hidden_size, sizes.intermediate_size, bias=False)
        self.down_proj = nn.Linear(sizes.intermediate_size, sizes.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, sizes: Qwen3Sizes):
        super().__init__()
        self.self_attn = Qwen3Attention(sizes)
        self.mlp = Qwen3MLP(sizes)
        self.input_layernorm = Qwen3RMSNorm(sizes.hidden_size, sizes.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(sizes.hidden_size, sizes.rms_norm_eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Model(nn.Module):
    def __init__(self, sizes: Qwen3Sizes):
        super().__init__()
        self.embed_tokens = nn.Embedding(sizes.vocab_size, sizes.hidden_size)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(sizes) for _ in range(sizes.num_hidden_layers))
        self.norm = Qwen3RMSNorm(sizes.hidden_size, sizes.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(sizes)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        cos, sin = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class Qwen3ForCausalLM(nn.Module):
    """Qwen3's causal LM without a KV cache: input ids -> logits for every position; tied embeddings."""

    def __init__(self, sizes: Qwen3Sizes):
        super().__init__()
        self.model = Qwen3Model(sizes)
        self.lm_head = nn.Linear(sizes.hidden_size, sizes.vocab_size, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight
        self._init_weights(sizes.initializer_range)

    def _init_weights(self, std):
        # transformers' random init: normal(0, initializer_range) for Linear and Embedding, norms at one.
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


class TransformersLogits(nn.Module):
    """transformers' Qwen3ForCausalLM, called like the self-contained one: ids -> logits."""

    def __init__(self, config):
        from transformers import Qwen3ForCausalLM as HFQwen3ForCausalLM

        super().__init__()
        self.model = HFQwen3ForCausalLM(config)

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def transformers_qwen3_config(sizes: Qwen3Sizes):
    """A Qwen3Config with these sizes, across transformers 4.x (rope_theta) and 5.x (rope_parameters)."""
    from transformers import Qwen3Config

    kwargs = {
        field.name: getattr(sizes, field.name) for field in dataclasses.fields(sizes) if field.name != "rope_theta"
    }
    kwargs.update(tie_word_embeddings=True, attention_bias=False, hidden_act="silu", use_sliding_window=False)
    if "rope_parameters" in inspect.signature(Qwen3Config.__init__).parameters:
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": sizes.rope_theta}
    else:
        kwargs["rope_theta"] = sizes.rope_theta
    config = Qwen3Config(**kwargs)
    config._attn_implementation = "sdpa"
    return config


def effective_rope_theta(config):
    parameters = getattr(config, "rope_parameters", None) or {}
    return parameters.get("rope_theta", getattr(config, "rope_theta", None))


def transformers_version():
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


def qwen3_model(sizes: Qwen3Sizes, implementation: str):
    """(model, label): transformers' model where asked for and importable, else the self-contained one."""
    version = transformers_version() if implementation in ("auto", "transformers") else None
    if implementation == "transformers" and version is None:
        raise ImportError("--qwen3-impl transformers: transformers is not importable")
    if version is not None:
        config = transformers_qwen3_config(sizes)
        # A transformers release that ignored our rope spelling would silently benchmark another model.
        if not math.isclose(effective_rope_theta(config), sizes.rope_theta):
            raise ValueError(
                f"transformers {version} built rope theta {effective_rope_theta(config)}; use --qwen3-impl self-contained"
            )
        return TransformersLogits(config), f"transformers {version} Qwen3ForCausalLM (sdpa)"
    return Qwen3ForCausalLM(sizes), "self-contained Qwen3 (benchmarks/bench_models.py)"


# --- the other workloads ---


def mlp(hidden, layers=2):
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden)]
    return nn.Sequential(*blocks)


class Elementwise(nn.Module):
    def forward(self, x):
        for _ in range(8):
            x = torch.sigmoid(x) * x + 0.5 * torch.tanh(x)
        return x


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def conv_net():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def _qwen3_workload(name, size, qwen3_impl):
    sizes = size["sizes"]
    model, implementation = qwen3_model(sizes, qwen3_impl)
    ids = torch.randint(0, sizes.vocab_size, (size["batch"], size["seq"]))
    shape = f"{sizes.num_hidden_layers} layers, hidden {sizes.hidden_size}, vocab {sizes.vocab_size}"
    description = f"Qwen3 forward, batch {size['batch']} x {size['seq']} tokens, {shape}"
    return Workload(name, description, model, ids, implementation=implementation)


def _elementwise_workload(size):
    side = size["side"]
    # Fused, the chain reads its input once and writes its output once.
    return Workload(
        "elementwise",
        f"8x sigmoid*x+tanh chain, {side}x{side}",
        Elementwise(),
        torch.randn(side, side),
        2 * side * side,
    )


def _transformer_workload(size):
    dim, batch, seq = size["dim"], size["batch"], size["seq"]
    description = f"pre-norm block, dim {dim}, {size['heads']} heads, batch {batch} x {seq}"
    return Workload("transformer", description, Block(dim, size["heads"]), torch.randn(batch, seq, dim))


def _mlp_workload(name, size):
    hidden, tokens = size["hidden"], size["tokens"]
    layers = 2 if name == "mlp" else 1
    description = f"{layers}x Linear({hidden},{4 * hidden})-GELU-Linear, {tokens} x {hidden}"
    return Workload(name, description, mlp(hidden, layers), torch.randn(tokens, hidden))


def _conv_workload(size):
    batch, image = size["batch"], size["image"]
    description = f"2x conv+BN+ReLU, pool, linear; batch {batch}, {image}x{image}"
    return Workload("conv", description, conv_net(), torch.randn(batch, 3, image, image))


def build_workload(name: str, small: bool = False, seed: int = 0, qwen3_impl: str = "auto") -> Workload:
    """The workload's model (eval mode) and input on CPU, fp32, from a fixed seed: every device gets the same."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")
    torch.manual_seed(seed)
    size = SIZES[name][1 if small else 0]
    if name in ("qwen3", "qwen3-short"):
        workload = _qwen3_workload(name, size, qwen3_impl)
    elif name == "elementwise":
        workload = _elementwise_workload(size)
    elif name == "transformer":
        workload = _transformer_workload(size)
    elif name in ("mlp", "small-mlp"):
        workload = _mlp_workload(name, size)
    else:
        workload = _conv_workload(size)
    workload.model.eval()
    return workload
