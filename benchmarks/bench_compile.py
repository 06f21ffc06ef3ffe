"""Compiled vs eager on a device, and compile wall time by worker start method.

    python benchmarks/bench_compile.py --model mlp --device flagos
    python benchmarks/bench_compile.py --model qwen3 --device cuda --dtype bfloat16
    python benchmarks/bench_compile.py --model mlp --compile-times   # forked / subprocess / serial

Models: mlp (matmul-bound MLP), small-mlp (the change request's 64x512 MLP),
elementwise (a chain on a square matrix), transformer (one block), conv (a
small conv net), qwen3 (a Qwen3-0.6B-shaped model from a transformers config,
random weights; needs `pip install transformers`).

Timing: device events after warm-up, median of --iters runs; compiled and
eager run on fresh copies of the same model. Prints compiled/eager ratios and
the numerics of compiled vs eager. A benchmark: nothing asserts.
"""

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def _mlp(hidden, layers=2):
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(), torch.nn.Linear(4 * hidden, hidden)]
    return torch.nn.Sequential(*blocks)


class Elementwise(torch.nn.Module):
    def forward(self, x):
        for _ in range(8):
            x = torch.sigmoid(x) * x + 0.5 * torch.tanh(x)
        return x


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def _conv():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    )


def _qwen3(args):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(  # Qwen3-0.6B's sizes
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_theta=1000000,
        tie_word_embeddings=True,
    )
    config._attn_implementation = "sdpa"

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Qwen3ForCausalLM(config)

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).logits

    return Logits().eval(), lambda: torch.randint(0, config.vocab_size, (args.batch, args.seq))


def build(args):
    """(model, make_input) for --model."""
    if args.model == "mlp":
        return _mlp(args.hidden), lambda: torch.randn(args.batch, args.hidden)
    if args.model == "small-mlp":
        return _mlp(512, layers=1), lambda: torch.randn(64, 512)
    if args.model == "elementwise":
        return Elementwise(), lambda: torch.randn(args.size, args.size)
    if args.model == "transformer":
        return Block(args.hidden, 8), lambda: torch.randn(args.batch, args.seq, args.hidden)
    if args.model == "conv":
        return _conv(), lambda: torch.randn(args.batch, 3, 32, 32)
    if args.model == "qwen3":
        return _qwen3(args)
    raise SystemExit(f"unknown --model {args.model}")


def device_time_ms(fn, device, iters, warmup=3):
    """Median milliseconds of fn() measured with the device's events (wall clock on cpu)."""
    for _ in range(warmup):
        fn()
    if device.type == "cpu":
        samples = []
        for _ in range(iters):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1000)
        return statistics.median(samples)
    module = getattr(torch, device.type)
    samples = []
    for _ in range(iters):
        start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def run(args):
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    model, make_input = build(args)
    model = model.to(device=device, dtype=dtype if args.model != "qwen3" else dtype).eval()
    x = make_input().to(device)
    if x.is_floating_point():
        x = x.to(dtype)
    eager_model = copy.deepcopy(model)
    compiled_model = torch.compile(copy.deepcopy(model), backend=args.backend)
    with torch.no_grad():
        start = time.perf_counter()
        compiled_out = compiled_model(x)
        getattr(torch, device.type).synchronize() if device.type != "cpu" else None
        compile_s = time.perf_counter() - start
        eager_out = eager_model(x)
        eager_ms = device_time_ms(lambda: eager_model(x), device, args.iters)
        compiled_ms = device_time_ms(lambda: compiled_model(x), device, args.iters)
    error = (compiled_out.float() - eager_out.float()).abs().max().item()
    result = {
        "model": args.model,
        "device": str(device),
        "dtype": args.dtype,
        "backend": args.backend,
        "eager_ms": round(eager_ms, 4),
        "compiled_ms": round(compiled_ms, 4),
        "compiled_over_eager_speedup": round(eager_ms / compiled_ms, 3),
        "first_call_s": round(compile_s, 2),
        "max_abs_error": error,
        "matches_eager": bool(torch.allclose(compiled_out.float(), eager_out.float(), rtol=2e-2, atol=2e-2)),
    }
    print(json.dumps(result))
    return result


def compile_times(args):
    """Wall time of the first compiled call with forked, subprocess and serial workers, each fresh."""
    results = {}
    for label, env in (
        ("fork", {"TORCHINDUCTOR_WORKER_START": "fork"}),
        ("subprocess", {"TORCHINDUCTOR_WORKER_START": "subprocess"}),
        ("serial (compile_threads=1)", {"TORCHINDUCTOR_COMPILE_THREADS": "1"}),
    ):
        with tempfile.TemporaryDirectory() as cache:
            child = [
                sys.executable,
                __file__,
                "--model",
                args.model,
                "--device",
                args.device,
                "--dtype",
                args.dtype,
                "--hidden",
                str(args.hidden),
                "--batch",
                str(args.batch),
                "--seq",
                str(args.seq),
                "--size",
                str(args.size),
                "--iters",
                "1",
                "--backend",
                args.backend,
            ]
            if args.train:
                child.append("--train")
            full_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": cache + "/triton", **env}
            start = time.perf_counter()
            out = subprocess.run(child, env=full_env, capture_output=True, text=True)
            wall = time.perf_counter() - start
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{label}: the child failed")
            first_call = json.loads(out.stdout.strip().splitlines()[-1])["first_call_s"]
            results[label] = first_call
            print(f"{label:<28} first compiled call {first_call:7.2f} s   (process {wall:6.1f} s)")
    serial = results["serial (compile_threads=1)"]
    for label in ("fork", "subprocess"):
        print(f"serial / {label}: {serial / results[label]:.2f}x")
    return results


def train_step(args):
    """Forward+backward first call, compiled (for --compile-times --train)."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    model, make_input = build(args)
    model = model.to(device)
    x = make_input().to(device)
    compiled = torch.compile(model, backend=args.backend)
    start = time.perf_counter()
    compiled(x).sum().backward()
    first = time.perf_counter() - start
    print(json.dumps({"model": args.model, "device": str(device), "first_call_s": round(first, 2)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="mlp", choices=["mlp", "small-mlp", "elementwise", "transformer", "conv", "qwen3"]
    )
    parser.add_argument("--device", default="flagos")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--train", action="store_true", help="time forward+backward (compile times only)")
    parser.add_argument("--compile-times", action="store_true", help="first-call wall time per worker start method")
    args = parser.parse_args()
    if args.device.startswith("flagos"):
        import torch_fl  # noqa: F401  (works with TORCH_DEVICE_BACKEND_AUTOLOAD=0 too)
    if args.compile_times:
        compile_times(args)
    elif args.train:
        train_step(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
