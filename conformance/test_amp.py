"""Automatic mixed precision: torch.autocast on the device casts matmuls down and losses up,
gradients stay in the parameters' dtype, torch.amp.GradScaler trains and skips steps with
non-finite gradients, and an autocast region inside torch.compile casts like eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_flagos import _torch_compat, device_api

from conformance_support import assert_close, bullet, fail

pytestmark = [pytest.mark.flagos_area("amp"), pytest.mark.requires("autocast")]

WHERE = (
    "  where to look: the device's autocast kernels (TORCH_LIBRARY_IMPL(aten, Autocast<Key>, m) with the "
    "op lists of ATen/autocast_mode.h; a PrivateUse1 device also needs get_amp_supported_dtype() on its "
    "device module) (flagos: csrc/aten/autocast.cpp, torch_fl/flagos/amp.py)"
)


def _low_precision_dtypes(device: torch.device) -> list[torch.dtype]:
    """The dtypes autocast accepts on the device (the capability "autocast" is checked first)."""
    module = device_api.device_module(device.type)
    if device.type == _torch_compat.privateuse1_backend_name():
        return list(module.get_amp_supported_dtype())
    dtypes = [torch.float16]
    if device.type == "cpu" or getattr(module, "is_bf16_supported", lambda: False)():
        dtypes.append(torch.bfloat16)
    return dtypes


@pytest.fixture
def low_dtypes(flagos_device):
    return _low_precision_dtypes(flagos_device)


def test_autocast_casts_matmuls_down_and_losses_up(flagos_device, low_dtypes):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(16, 16, generator=generator)
    b = torch.randn(16, 16, generator=generator)
    problems = []
    for dtype in low_dtypes:
        try:
            with torch.autocast(flagos_device.type, dtype=dtype):
                product = a.to(flagos_device) @ b.to(flagos_device)
                loss = F.mse_loss(product, torch.zeros_like(product))
        except Exception as exc:
            problems.append(f"{dtype}: autocast region raised {type(exc).__name__}: {exc}")
            continue
        if product.dtype != dtype:
            problems.append(
                f"{dtype}: mm under autocast returned {product.dtype} (mm is on every device's low-precision list)"
            )
        elif loss.dtype != torch.float32:
            problems.append(f"{dtype}: mse_loss under autocast returned {loss.dtype}, not float32 (an fp32-policy op)")
        else:
            try:
                torch.testing.assert_close(product.cpu(), a.to(dtype) @ b.to(dtype), rtol=2e-2, atol=2e-2)
            except AssertionError as exc:
                problems.append(f"{dtype}: mm under autocast differs from the cast done by hand: {exc}")
    if problems:
        fail("torch.autocast on the device does not apply autocast's policies:\n" + bullet(problems) + "\n" + WHERE)


def test_autocast_backward_keeps_gradients_in_the_parameter_dtype(flagos_device, low_dtypes):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(flagos_device)
    x = torch.randn(8, 16, device=flagos_device)
    dtype = low_dtypes[0]
    with torch.autocast(flagos_device.type, dtype=dtype):
        out = model(x)
        loss = F.mse_loss(out, torch.zeros_like(out))
    loss.backward()
    wrong = [
        f"{name}: {None if p.grad is None else p.grad.dtype}"
        for name, p in model.named_parameters()
        if p.grad is None or p.grad.dtype != p.dtype
    ]
    if out.dtype != dtype or wrong:
        fail(
            f"autocast({dtype}) forward returned {out.dtype}; gradients not in float32:\n{bullet(wrong) or '  (none)'}\n"
            + WHERE
        )


def test_grad_scaler_trains_and_skips_non_finite_steps(flagos_device, low_dtypes):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to(flagos_device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        scaler = torch.amp.GradScaler(flagos_device.type, init_scale=2.0**8)
    except Exception as exc:
        fail(f"torch.amp.GradScaler({flagos_device.type!r}) raised {type(exc).__name__}: {exc}\n" + WHERE)
    x = torch.randn(16, 8, device=flagos_device)
    y = torch.randn(16, 1, device=flagos_device)
    problems = []
    for step in range(3):
        before = [p.detach().clone() for p in model.parameters()]
        optimizer.zero_grad()
        with torch.autocast(flagos_device.type, dtype=low_dtypes[0]):
            loss = F.mse_loss(model(x).float(), y)
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        if step == 1:
            model.weight.grad[0, 0] = float("inf")  # this step must be skipped
        scaler.step(optimizer)
        scaler.update()
        changed = any(not torch.equal(p.detach(), q) for p, q in zip(model.parameters(), before, strict=False))
        if step == 1 and (changed or scaler.get_scale() != scale * 0.5):
            problems.append(
                f"step with an inf gradient: parameters changed={changed}, scale {scale} -> {scaler.get_scale()} "
                "(expected unchanged parameters and the scale halved)"
            )
        if step != 1 and not changed:
            problems.append(f"step {step} with finite gradients did not update the parameters")
    if problems:
        fail(
            "torch.amp.GradScaler on the device (its _amp_foreach_non_finite_check_and_unscale_ and "
            "_amp_update_scale_ kernels) is broken:\n" + bullet(problems) + "\n" + WHERE
        )


@pytest.mark.requires("inductor")
def test_autocast_inside_torch_compile_casts_like_eager(flagos_device, low_dtypes, fresh_inductor_cache):
    dtype = low_dtypes[0]

    def f(a, b):
        with torch.autocast(flagos_device.type, dtype=dtype):
            product = a @ b
            return product, F.mse_loss(product, torch.zeros_like(product))

    a = torch.randn(16, 32, device=flagos_device)
    b = torch.randn(32, 8, device=flagos_device)
    eager = f(a, b)
    compiled = torch.compile(f, backend="inductor", fullgraph=True)(a, b)
    dtypes = [t.dtype for t in compiled]
    if dtypes != [t.dtype for t in eager]:
        fail(f"compiled autocast region returned {dtypes}, eager {[t.dtype for t in eager]}\n" + WHERE)
    assert_close(compiled[0], eager[0], "compiled autocast matmul differs from eager", rtol=2e-2, atol=2e-2)
