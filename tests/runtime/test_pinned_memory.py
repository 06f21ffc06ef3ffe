"""Pinned (page-locked) host memory for flagos: Tensor.pin_memory(), is_pinned(), DataLoader
pinning, and non_blocking copies from pinned memory."""

import subprocess
import sys
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.requirements import cuda_accelerator


def test_pin_memory_returns_a_pinned_copy():
    x = torch.randn(1000)
    pinned = x.pin_memory()
    assert not x.is_pinned()
    assert pinned.is_pinned()
    assert pinned.device.type == "cpu" and pinned.data_ptr() != x.data_ptr()
    assert torch.equal(pinned, x)
    # A view of pinned memory is pinned; pinning it again is a no-op, as for cuda.
    assert pinned[10:].is_pinned()
    assert pinned.pin_memory().data_ptr() == pinned.data_ptr()


def test_factories_allocate_pinned_memory():
    assert torch.empty(64, pin_memory=True).is_pinned()
    assert torch.zeros(3, 4, pin_memory=True).is_pinned()
    assert not torch.empty(64).is_pinned()


def test_pinned_factories_in_a_fresh_process():
    # ATen's context asks flagos's hooks whether memory is pinned only once flagos is initialised
    # there; on a CUDA build the factory takes CUDA's pinned allocator, which is_pinned() must
    # recognise too, before the first flagos tensor (a DataLoader pins first) and after it.
    code = (
        "import torch, torch_fl\n"
        "first = torch.empty(8, pin_memory=True)\n"
        "print(first.is_pinned(), torch.empty(8).is_pinned())\n"
        "torch.zeros(1, device='flagos')\n"
        "print(first.is_pinned(), torch.empty(8, pin_memory=True).is_pinned(), torch.empty(8).is_pinned())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False", "True", "True", "False"]


def test_round_trips_through_pinned_memory():
    x = torch.randn(257, 3)
    on_device = x.pin_memory().to("flagos", non_blocking=True)
    back = torch.empty(x.shape, pin_memory=True)
    back.copy_(on_device, non_blocking=True)
    torch.flagos.synchronize()
    assert torch.equal(back, x)


@pytest.mark.parametrize("device_argument", [True, False])
def test_dataloader_pins_batches(device_argument):
    dataset = TensorDataset(torch.randn(10, 3), torch.arange(10))
    kwargs = {"pin_memory_device": "flagos"} if device_argument else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pin_memory_device is deprecated in torch 2.13
        warnings.filterwarnings("ignore", message=".*pin_memory_device is deprecated.*")
        loader = DataLoader(dataset, batch_size=4, pin_memory=True, **kwargs)
        batches = list(loader)
    assert len(batches) == 3
    for features, labels in batches:
        assert features.is_pinned() and labels.is_pinned()
    torch.testing.assert_close(torch.cat([f for f, _ in batches]), dataset.tensors[0])


@cuda_accelerator
def test_non_blocking_copy_from_pinned_memory_does_not_wait_for_the_stream():
    # Needs the cuda accelerator: pinned memory from cudaHostAlloc makes the copy asynchronous;
    # from pageable memory cudaMemcpyAsync waits for the stream's earlier work first.
    a = torch.randn(8192, 8192, device="flagos")
    source = torch.randn(1 << 22).pin_memory()
    target = torch.empty(1 << 22, device="flagos")
    torch.flagos.synchronize()
    for _ in range(20):  # seconds of queued work on the current stream
        a = a @ a / 8192
    target.copy_(source, non_blocking=True)
    assert not torch.flagos.current_stream().query(), "the host waited for the stream: the copy was not asynchronous"
    torch.flagos.synchronize()
    assert torch.equal(target.cpu(), source)
