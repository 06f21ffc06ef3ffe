"""torch's profilers on flagos work: ops appear with sane CPU and device times."""

import time

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler import profile as autograd_profile
from torch.profiler import ProfilerActivity, profile

from tests.requirements import cuda_accelerator


def _work():
    x = torch.randn(128, 128, device="flagos")
    for _ in range(3):
        x = (x @ x).relu() / 128
    torch.flagos.synchronize()
    return x


def _assert_sane(events, wall_us: float):
    assert events, "the profiler recorded nothing"
    for e in events:
        for what, value in (("cpu", e.cpu_time_total), ("device", e.device_time_total)):
            # Not a speed check: a time outside [0, wall clock] is a broken timestamp.
            assert 0 <= value <= wall_us, f"{e.name}: {what} time {value} us outside [0, {wall_us:.0f}] us"


def test_autograd_profiler_times_flagos_ops_with_flagos_events(capfd):
    _work()  # warm-up outside the profile
    start = time.perf_counter()
    with autograd_profile(use_device="flagos") as prof:
        _work()
    wall_us = (time.perf_counter() - start) * 1e6
    _assert_sane(prof.function_events, wall_us)
    mm = [e for e in prof.function_events if e.name == "aten::mm"]
    assert mm and all(e.device_time_total > 0 for e in mm), "aten::mm got no device time"
    assert "used in profiler but not enabled" not in capfd.readouterr().err


@pytest.mark.parametrize("device_activity", [True, False])
def test_torch_profiler_records_flagos_ops(device_activity):
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.PrivateUse1] if device_activity else [])
    _work()
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        _work()
    wall_us = (time.perf_counter() - start) * 1e6
    events = prof.events()
    _assert_sane(events, wall_us)
    assert {"aten::mm", "aten::relu"} <= {e.name for e in events}


@cuda_accelerator
def test_flagos_kernels_are_device_activity_on_the_cuda_accelerator():
    # flagos launches CUDA kernels (eager: the compute device's; compiled: Triton cubins on
    # the flagos stream): the device activity of torch.profiler must show them with device time.
    compiled = torch.compile(lambda x: (torch.sin(x) * 2).sum(-1))
    x = torch.randn(64, 256, device="flagos")
    for _ in range(2):  # compile and warm up outside the profile
        compiled(x)
        _work()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        compiled(x)
        _work()
        torch.flagos.synchronize()
    # torch files Kineto's GPU activity under PrivateUse1 once a PrivateUse1 backend is named
    # (profiler_kineto.cpp, deviceTypeFromActivity), CUDA's own kernels too: either is device activity.
    kernels = [e for e in prof.events() if e.device_type in (DeviceType.CUDA, DeviceType.PrivateUse1)]
    triton = [e for e in kernels if e.name.startswith("triton_")]
    assert triton, f"no Triton kernel among the device activity: {sorted({e.name for e in kernels})}"
    assert len(kernels) > len(triton), "the eager matmuls' CUDA kernels are missing"
    assert all(e.device_time > 0 for e in kernels), [(e.name, e.device_time) for e in kernels]
