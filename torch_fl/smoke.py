"""A quick end-to-end check of the flagos device: ``python -m torch_fl.smoke``.

Creates tensors on every flagos device, trains a two-Linear MLP for a few steps
on flagos and on the CPU from the same initial weights, and prints a device
summary. Exits non-zero if flagos and the CPU disagree.
"""

import sys

import torch


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))


def train(device: str, steps: int = 5):
    torch.manual_seed(0)
    model = _mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(16, 32, generator=torch.Generator().manual_seed(1)).to(device)
    target = torch.randn(16, 8, generator=torch.Generator().manual_seed(2)).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def main() -> int:
    import torch_fl  # noqa: F401  (autoload does this too; explicit for TORCH_DEVICE_BACKEND_AUTOLOAD=0)

    fl = torch.flagos
    print(f"torch {torch.__version__}, flagos accelerator '{fl.accelerator_name()}', {fl.device_count()} device(s)")
    for i in range(fl.device_count()):
        p = fl.get_device_properties(i)
        x = torch.arange(4.0, device=f"flagos:{i}") * 2
        assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0], x
        print(
            f"  flagos:{i}: {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} units, "
            f"warp {p.warp_size}, L2 {p.L2_cache_size // 1024} KiB"
        )
    cpu_losses, cpu_params = train("cpu")
    fl_losses, fl_params = train("flagos")
    print(f"  MLP losses cpu    {[round(v, 5) for v in cpu_losses]}")
    print(f"  MLP losses flagos {[round(v, 5) for v in fl_losses]}")
    for a, b in zip(cpu_params, fl_params, strict=False):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    print(f"  {fl.memory_summary(0)}")
    print("smoke: flagos matches the CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
