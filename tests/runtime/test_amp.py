"""Automatic mixed precision on flagos: torch.autocast("flagos") and torch.amp.GradScaler("flagos").

flagos follows cuda's autocast policy (the op lists and their cast policies), so code written for
cuda's AMP keeps its numerics on flagos.
"""

import pytest
import torch
import torch.nn.functional as F

LOW_PRECISION = [torch.float16, torch.bfloat16]


def _ops_with_kernel(key: str) -> set[str]:
    return {
        name
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    }


def test_autocast_is_available_with_cuda_default_dtype():
    assert torch.amp.is_autocast_available("flagos")
    assert torch.get_autocast_dtype("flagos") == torch.float16  # cuda's default
    assert set(torch.flagos.get_amp_supported_dtype()) == set(LOW_PRECISION)


def test_autocast_casts_every_op_that_cuda_casts():
    # cudnn_convolution* are cuda's own kernels: a flagos convolution never reaches them.
    cuda = {op for op in _ops_with_kernel("AutocastCUDA") if "cudnn" not in op}
    flagos = _ops_with_kernel("AutocastPrivateUse1")
    assert cuda, "torch registers no cuda autocast kernels: the comparison would be empty"
    assert cuda - flagos == set(), f"cuda autocasts these ops and flagos does not: {sorted(cuda - flagos)}"
    assert flagos - cuda == set(), f"flagos autocasts ops that cuda does not: {sorted(flagos - cuda)}"


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_autocast_follows_cuda_policies(dtype):
    a = torch.randn(8, 8, device="flagos")
    b = torch.randn(8, 8, device="flagos")
    low = torch.randn(8, 8, device="flagos").to(dtype)
    with torch.autocast("flagos", dtype=dtype):
        assert torch.get_autocast_dtype("flagos") == dtype
        mm = a @ b  # lower_precision_fp
        linear = F.linear(a, b)
        exp = torch.exp(low)  # fp32
        softmax = torch.softmax(low, dim=-1)  # fp32_set_opt_dtype
        norm = low.norm()  # fp32_append_dtype
        promoted = torch.addcmul(a, low, low)  # promote
        untouched = a + b  # on no list
    assert (mm.dtype, linear.dtype) == (dtype, dtype)
    assert (exp.dtype, softmax.dtype, norm.dtype) == (torch.float32,) * 3
    assert promoted.dtype == torch.float32
    assert untouched.dtype == torch.float32
    # Same numbers as the cast done by hand on the CPU.
    expected = a.cpu().to(dtype) @ b.cpu().to(dtype)
    torch.testing.assert_close(mm.cpu(), expected)
    torch.testing.assert_close(exp.cpu(), torch.exp(low.cpu().float()))


def test_autocast_off_outside_the_region_and_when_disabled():
    a = torch.randn(4, 4, device="flagos")
    with torch.autocast("flagos", enabled=False):
        assert (a @ a).dtype == torch.float32
    with torch.autocast("flagos"):
        pass
    assert (a @ a).dtype == torch.float32


def test_autocast_bans_binary_cross_entropy_like_cuda():
    p = torch.rand(4, device="flagos")
    with torch.autocast("flagos"), pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
        F.binary_cross_entropy(p, torch.ones(4, device="flagos"))


def test_autocast_forward_and_backward_of_a_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("flagos")
    x = torch.randn(8, 16, device="flagos")
    with torch.autocast("flagos", dtype=torch.bfloat16):
        out = model(x)
        loss = F.mse_loss(out, torch.zeros_like(out))
    assert out.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())


def _train(device: str, steps: int, poison_step: int | None = None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10)
    x = torch.randn(32, 8).to(device)
    y = torch.randn(32, 1).to(device)
    scales = []
    for step in range(steps):
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = F.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        if step == poison_step:
            next(model.parameters()).grad[0, 0] = float("inf")
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    return model, scales


def test_grad_scaler_trains_and_skips_steps_with_inf_gradients():
    model, scales = _train("flagos", steps=4, poison_step=1)
    # The poisoned step is skipped and the scale halves (backoff_factor 0.5) on the device.
    assert scales[1] == scales[0] * 0.5
    assert all(torch.isfinite(p).all() for p in model.parameters())
    reference, _ = _train("cpu", steps=4, poison_step=1)
    for p, q in zip(model.parameters(), reference.parameters(), strict=False):
        # float16 matmuls on both sides, same compute device kernels on the host.
        torch.testing.assert_close(p.cpu(), q, rtol=5e-3, atol=5e-3)
