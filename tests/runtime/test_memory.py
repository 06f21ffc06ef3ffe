"""The caching allocator: statistics, cache, out-of-memory."""

import gc

import pytest
import torch

from tests.requirements import accelerator, host_only, two_devices


def _stats():
    gc.collect()
    return torch.flagos.memory_allocated(0), torch.flagos.memory_reserved(0)


def test_stats_return_to_baseline_after_frees():
    base_allocated, _ = _stats()
    tensors = [torch.empty(1000 + i, device="flagos") for i in range(10)]
    allocated, reserved = _stats()
    assert allocated >= base_allocated + sum(t.numel() * 4 for t in tensors)
    assert reserved >= allocated
    del tensors
    assert _stats()[0] == base_allocated


def test_outputs_of_eager_kernels_are_counted_and_released():
    base, _ = _stats()
    x = torch.randn(1 << 16, device="flagos")
    y = torch.sort(x).values  # allocated by the compute device's kernel, adopted without a copy
    assert torch.flagos.memory_allocated() >= base + 2 * x.numel() * 4
    del x, y
    assert _stats()[0] == base


STRUCTURED_OPS = {
    "add": lambda a, b: a + b,
    "mm": lambda a, b: a @ b,
    "cat": lambda a, b: torch.cat([a, b]),
    "softmax": lambda a, b: torch.softmax(a, dim=-1),
    "mean": lambda a, b: a.mean(dim=0),
}


@pytest.mark.parametrize("name", sorted(STRUCTURED_OPS))
def test_structured_op_output_memory(name):
    # Structured ops: on the cuda accelerator, the compute device's own kernel
    # runs and its output memory is adopted (one dispatch, one meta function);
    # on the host, aten's composite kernel allocates the output from the flagos
    # cache, which beats the CPU allocator on large outputs.
    op = STRUCTURED_OPS[name]
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    fa, fb = a.to("flagos"), b.to("flagos")
    adopted = torch.flagos.memory_stats()["adopted_bytes.all.current"]
    out = op(fa, fb)
    grew = torch.flagos.memory_stats()["adopted_bytes.all.current"] - adopted
    if accelerator == "cuda":
        assert grew >= out.numel() * out.element_size()
    else:
        assert grew == 0
    torch.testing.assert_close(out.cpu(), op(a, b))


def test_peak_and_reset():
    torch.flagos.reset_peak_memory_stats()
    base = torch.flagos.max_memory_allocated()
    x = torch.empty(1 << 18, device="flagos")
    peak = torch.flagos.max_memory_allocated()
    assert peak >= base + (1 << 20)
    del x
    gc.collect()
    assert torch.flagos.max_memory_allocated() == peak
    torch.flagos.reset_peak_memory_stats()
    assert torch.flagos.max_memory_allocated() < peak


def test_cache_is_reused_and_emptied():
    x = torch.empty(1 << 18, device="flagos")
    ptr = x.data_ptr()
    del x
    y = torch.empty(1 << 18, device="flagos")
    assert y.data_ptr() == ptr, "a freed block of the same size should be reused"
    del y
    gc.collect()
    cached = torch.flagos.memory_reserved() - torch.flagos.memory_allocated()
    assert cached >= 1 << 20
    torch.flagos.empty_cache()
    assert torch.flagos.memory_reserved() - torch.flagos.memory_allocated() < cached


def test_memory_stats_keys_follow_torch_cuda():
    stats = torch.flagos.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current", "num_ooms"):
        assert key in stats
    free, total = torch.flagos.mem_get_info()
    assert 0 < free <= total


def test_the_generic_accelerator_memory_api_reaches_the_caching_allocator():
    # torch.accelerator.memory_* asks the device's c10::DeviceAllocator: code written for any
    # accelerator reads flagos's pool through it, with the same numbers as torch.flagos.
    assert torch.accelerator.current_accelerator().type == "flagos"
    gc.collect()
    base = torch.accelerator.memory_allocated(0)
    assert base == torch.flagos.memory_allocated(0)
    torch.accelerator.reset_peak_memory_stats(0)
    x = torch.empty(1 << 18, device="flagos:0")
    assert torch.accelerator.memory_allocated(0) == torch.flagos.memory_allocated(0) >= base + (1 << 20)
    assert torch.accelerator.max_memory_allocated(0) >= base + (1 << 20)
    assert torch.accelerator.memory_reserved(0) == torch.flagos.memory_reserved(0)
    stats = torch.accelerator.memory_stats(0)
    own = torch.flagos.memory_stats(0)
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.current", "num_ooms", "allocation.all.allocated"):
        assert stats[key] == own[key], key
    del x
    gc.collect()
    assert torch.accelerator.memory_allocated(0) == base
    torch.accelerator.empty_cache()
    assert torch.flagos.memory_reserved(0) - torch.flagos.memory_allocated(0) == 0
    if hasattr(torch.accelerator, "get_memory_info"):
        assert torch.accelerator.get_memory_info(0) == torch.flagos.mem_get_info(0)
    # an index out of range is the same error on both, not a row of zeros
    for ask in (torch.accelerator.memory_allocated, torch.accelerator.reset_peak_memory_stats):
        with pytest.raises(IndexError, match="out of range"):
            ask(torch.flagos.device_count())


@two_devices
def test_devices_have_separate_stats():
    before = torch.flagos.memory_allocated(1)
    x = torch.empty(1 << 16, device="flagos:1")
    assert torch.flagos.memory_allocated(1) >= before + (1 << 18)
    del x


OOM_SCRIPT = """
import torch
x = torch.empty(6 << 20, dtype=torch.uint8, device="flagos")
try:
    torch.empty(8 << 20, dtype=torch.uint8, device="flagos")
except torch.OutOfMemoryError as e:
    print("OOM:", str(e).splitlines()[0])
try:
    torch.randn(3 << 20, device="flagos").sort()
except torch.OutOfMemoryError as e:
    print("OOM2:", str(e).splitlines()[0])
del x
y = torch.empty(8 << 20, dtype=torch.uint8, device="flagos")
print("usable:", y.numel(), torch.flagos.memory_stats()["num_ooms"])
"""


@host_only
def test_out_of_memory_is_torch_oom_with_sizes_and_recoverable(python_subprocess):
    r = python_subprocess(OOM_SCRIPT, env={"FLAGOS_HOST_MEMORY_LIMIT": "10M"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("OOM: flagos: out of memory on flagos:0: tried to allocate 8.00 MiB; 6.00 MiB")
    assert "device capacity 10.00 MiB" in lines[0]
    assert lines[1].startswith("OOM2: flagos: out of memory on flagos:0")
    assert lines[2] == f"usable: {8 << 20} 2"


@host_only
def test_memory_limit_is_the_device_capacity(python_subprocess):
    r = python_subprocess(
        "import torch; print(torch.flagos.get_device_properties(0).total_memory, torch.flagos.mem_get_info()[1])",
        env={"FLAGOS_HOST_MEMORY_LIMIT": "512M"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(512 << 20)] * 2


# Stream order: a freed block is reused only on the stream it was allocated
# on, where the stream itself orders the old work before the new.
def _block_of(nbytes, stream):
    with torch.flagos.stream(stream):
        t = torch.empty(nbytes, dtype=torch.uint8, device="flagos")
        ptr = t.data_ptr()
    del t
    gc.collect()
    return ptr


def test_freed_block_is_reused_on_its_own_stream_only():
    torch.flagos.empty_cache()
    mine, other = torch.flagos.Stream(), torch.flagos.Stream()
    nbytes = 3 << 20  # a size nothing else in the process is likely to hold
    freed = _block_of(nbytes, mine)
    with torch.flagos.stream(other):
        elsewhere = torch.empty(nbytes, dtype=torch.uint8, device="flagos")
    assert elsewhere.data_ptr() != freed
    with torch.flagos.stream(mine):
        again = torch.empty(nbytes, dtype=torch.uint8, device="flagos")
    assert again.data_ptr() == freed


def test_record_stream_keeps_a_block_until_the_other_streams_work_is_done():
    torch.flagos.empty_cache()
    user = torch.flagos.Stream()
    nbytes = 5 << 20
    t = torch.empty(nbytes, dtype=torch.uint8, device="flagos")
    ptr = t.data_ptr()
    t.record_stream(user)
    del t
    gc.collect()
    user.synchronize()  # the other stream's work is done: the block comes back
    again = torch.empty(nbytes, dtype=torch.uint8, device="flagos")
    assert again.data_ptr() == ptr


@pytest.mark.skipif(
    torch.flagos.accelerator_name() == "host",
    reason="the host accelerator finishes work at submission, so no stream is ever busy",
)
def test_block_used_by_a_busy_stream_is_not_reused_before_its_work_is_done():
    user = torch.flagos.Stream()
    nbytes = 7 << 20
    a = torch.randn(4096, 4096, device="flagos")
    t = torch.empty(nbytes, dtype=torch.uint8, device="flagos")
    ptr = t.data_ptr()
    user.wait_stream(torch.flagos.current_stream())  # inputs are made on the default stream
    with torch.flagos.stream(user):
        for _ in range(200):  # about a second of work queued on `user`
            a = a @ a / 4096
        t.fill_(1)
    t.record_stream(user)
    del t  # freed here (reference counting), while `user` is still busy
    again = torch.empty(nbytes, dtype=torch.uint8, device="flagos")
    assert again.data_ptr() != ptr
    user.synchronize()


@pytest.mark.skipif(
    torch.flagos.accelerator_name() == "host",
    reason="the host accelerator finishes work at submission, so no stream is ever busy",
)
def test_record_stream_on_a_kernels_output_holds_the_compute_devices_block():
    # A kernel's output is memory of the compute device's allocator (adopted by
    # flagos): record_stream must reach that allocator, or the block is handed
    # out again while `user` still writes it.
    user = torch.flagos.Stream()
    a = torch.randn(4096, 4096, device="flagos")
    x = torch.randn(3, 1 << 20, device="flagos")
    t = torch.relu(x)
    ptr = t.data_ptr()
    user.wait_stream(torch.flagos.current_stream())
    with torch.flagos.stream(user):
        for _ in range(200):  # about a second of work queued on `user`
            a = a @ a / 4096
        t.add_(1)
    t.record_stream(user)
    del t
    again = torch.relu(x)  # same size, same stream
    assert again.data_ptr() != ptr
    user.synchronize()


def test_record_stream_rejects_a_stream_of_another_device_type():
    t = torch.empty(4, device="flagos")
    with pytest.raises(RuntimeError, match="expects a flagos stream"):
        t.record_stream(torch.Stream(device="cpu"))
