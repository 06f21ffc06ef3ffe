"""Compiled flagos kernels in torch's profiler: the Triton kernels appear by name, with sane times
(on the cuda accelerator: as CUDA device activity, which CUPTI records)."""

import time

import torch
from torch.autograd.profiler import profile as autograd_profile
from torch.profiler import ProfilerActivity, profile

from tests.requirements import cuda_accelerator


def _pointwise_and_reduction(x):
    return (torch.sin(x) * 2).sum(-1)


def _assert_sane(events, wall_us):
    for e in events:
        assert 0 <= e.cpu_time_total <= wall_us, f"{e.name}: cpu time {e.cpu_time_total} us"
        assert 0 <= e.device_time_total <= wall_us, f"{e.name}: device time {e.device_time_total} us"


def test_compiled_kernels_appear_in_the_profiler(compiled_on_workers, flagos_device):
    compiled = torch.compile(_pointwise_and_reduction)
    x = torch.randn(64, 256, device=flagos_device)
    compiled(x)  # compile outside the profile
    start = time.perf_counter()
    with autograd_profile(use_device="flagos") as prof:
        compiled(x)
        torch.flagos.synchronize()
    wall_us = (time.perf_counter() - start) * 1e6
    kernels = [e for e in prof.function_events if e.name.startswith("triton_")]
    assert kernels, f"no Triton kernel among {sorted({e.name for e in prof.function_events})}"
    _assert_sane(prof.function_events, wall_us)


@cuda_accelerator
def test_cuda_activity_shows_flagos_kernels_on_the_gpu(compiled_on_workers, flagos_device):
    # Needs the cuda accelerator: CUPTI records the CUDA kernels flagos launches (aten's through
    # the fallback, inductor's Triton kernels through the static launcher).
    compiled = torch.compile(_pointwise_and_reduction)
    x = torch.randn(1024, 1024, device=flagos_device)
    compiled(x)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        compiled(x)
        (x @ x).relu()
        torch.flagos.synchronize()
    # The profiler files GPU activity under the process's accelerator (flagos, PrivateUse1)
    # once a PrivateUse1 device is registered, under CUDA otherwise.
    gpu = (torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.PrivateUse1)
    device_events = [e for e in prof.events() if e.device_type in gpu]
    names = {e.name for e in device_events}
    assert any(n.startswith("triton_") for n in names), f"no Triton kernel among the CUDA activity: {names}"
    assert any(not n.startswith("triton_") for n in names), f"no kernel of the eager ops: {names}"
    assert all(e.device_time_total >= 0 for e in device_events)
    assert sum(e.self_device_time_total for e in prof.key_averages()) > 0
