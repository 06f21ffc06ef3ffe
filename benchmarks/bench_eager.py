"""Eager dispatch overhead of flagos (host accelerator) against the same op on CPU tensors.

    python benchmarks/bench_eager.py [--repeat N]

Prints, per op and size, the median time on CPU and on flagos and their ratio
(flagos / cpu). Targets: large tensors within 1.05x (zero-copy: no extra pass
over memory), small tensors within 2x. Also the allocator's alloc/free
round trip. A benchmark, not a test: nothing here asserts.
"""

import argparse
import statistics
import time

import torch

import torch_fl  # noqa: F401

OPS = {
    "add": lambda a, b: a + b,
    "mul_": lambda a, b: a.mul_(1.0001),
    "relu": lambda a, b: torch.relu(a),
    "sum": lambda a, b: a.sum(),
    "exp": lambda a, b: torch.exp(a),
    "view+slice": lambda a, b: a.view(-1)[1:],
}
SIZES = {"small (1k)": 1 << 10, "large (16M)": 1 << 24}


def median_time(fn, repeat: int, inner: int) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, flagos accelerator "
        f"'{torch.flagos.accelerator_name()}'"
    )
    print(f"{'op':<12}{'size':<13}{'cpu':>12}{'flagos':>12}{'flagos/cpu':>12}")
    for size_name, n in SIZES.items():
        inner = 2000 if n < 1 << 16 else 3
        for name, op in OPS.items():
            a_cpu, b_cpu = torch.randn(n), torch.randn(n)
            a_fl, b_fl = a_cpu.to("flagos"), b_cpu.to("flagos")
            t_cpu = median_time(lambda: op(a_cpu, b_cpu), args.repeat, inner)
            t_fl = median_time(lambda: op(a_fl, b_fl), args.repeat, inner)
            print(f"{name:<12}{size_name:<13}{t_cpu * 1e6:>10.1f}us{t_fl * 1e6:>10.1f}us{t_fl / t_cpu:>11.2f}x")
    for nbytes in (4 << 10, 64 << 20):
        t_cpu = median_time(lambda: torch.empty(nbytes, dtype=torch.uint8), args.repeat, 2000)
        t_fl = median_time(lambda: torch.empty(nbytes, dtype=torch.uint8, device="flagos"), args.repeat, 2000)
        label = f"{nbytes >> 10} KiB" if nbytes < 1 << 20 else f"{nbytes >> 20} MiB"
        print(f"{'alloc+free':<12}{label:<13}{t_cpu * 1e6:>10.1f}us{t_fl * 1e6:>10.1f}us{t_fl / t_cpu:>11.2f}x")


if __name__ == "__main__":
    main()
