"""The caching allocator's statistics and controls (shaped like torch.cuda's)."""

from collections import OrderedDict

from .. import _C
from ._device import _checked


def _raw(device=None) -> dict:
    return _C._memory_stats(_checked(device))


def memory_stats(device=None) -> "OrderedDict[str, int]":
    """Allocator statistics under torch.cuda.memory_stats's key names (pool "all")."""
    s = _raw(device)
    stats = {
        "allocated_bytes.all.current": s["allocated"],
        "allocated_bytes.all.peak": s["allocated_peak"],
        "reserved_bytes.all.current": s["reserved"],
        "reserved_bytes.all.peak": s["reserved_peak"],
        "active.all.current": s["active_blocks"],
        "inactive_split.all.current": s["cached_blocks"],
        "allocation.all.allocated": s["num_allocs"],
        "allocation.all.freed": s["num_frees"],
        "num_alloc_retries": s["num_alloc_retries"],
        "num_ooms": s["num_ooms"],
        "num_device_alloc": s["num_device_mallocs"],
        "adopted_bytes.all.current": s["adopted"],
    }
    return OrderedDict(sorted(stats.items()))


def memory_allocated(device=None) -> int:
    """Bytes held by live flagos tensors."""
    return _raw(device)["allocated"]


def max_memory_allocated(device=None) -> int:
    return _raw(device)["allocated_peak"]


def memory_reserved(device=None) -> int:
    """Bytes the allocator holds from the accelerator (live + cached)."""
    return _raw(device)["reserved"]


def max_memory_reserved(device=None) -> int:
    return _raw(device)["reserved_peak"]


def reset_peak_memory_stats(device=None) -> None:
    _C._reset_peak_memory_stats(_checked(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None) -> None:
    _C._reset_accumulated_memory_stats(_checked(device))


def empty_cache() -> None:
    """Returns cached, unused blocks of every device to the accelerator."""
    _C._empty_cache()


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes of the device as the accelerator sees them."""
    return tuple(_C._mem_get_info(_checked(device)))


def memory_summary(device=None, abbreviated=False) -> str:
    index = _checked(device)
    s = _raw(index)
    mib = 1 << 20
    return (
        f"flagos:{index} memory: allocated {s['allocated'] / mib:.2f} MiB (peak {s['allocated_peak'] / mib:.2f}), "
        f"reserved {s['reserved'] / mib:.2f} MiB (peak {s['reserved_peak'] / mib:.2f}), "
        f"{s['active_blocks']} live / {s['cached_blocks']} cached blocks, {s['num_ooms']} OOMs"
    )
