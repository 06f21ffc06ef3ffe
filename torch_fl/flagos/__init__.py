"""torch.flagos: the device API, shaped like torch.cuda.

This module *is* ``torch.flagos`` (the same object). Everything that takes a
``device`` accepts an index, ``"flagos:N"``, a ``torch.device`` or ``None``
(the current device).
"""

from ._device import (
    DeviceIndexError,
    _DeviceGuard,
    _lazy_init,
    accelerator_name,
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    set_device,
    synchronize,
)
from .amp import get_amp_supported_dtype
from .memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
)
from .random import (
    _is_in_bad_fork,
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

# Read by the pytest_flagos plugin (the capability manifest): each
# accelerator's capacity can be limited through the environment, which the
# allocator conformance tests use to provoke out-of-memory safely.
_MEMORY_LIMIT_ENV = {"host": "FLAGOS_HOST_MEMORY_LIMIT", "cuda": "FLAGOS_CUDA_MEMORY_LIMIT"}
flagos_capabilities = {
    "memory_limit": accelerator_name() in _MEMORY_LIMIT_ENV,
    "extra": {"memory_limit_env": _MEMORY_LIMIT_ENV.get(accelerator_name())},
}

__all__ = [name for name in dir() if not name.startswith("_")]


def __getattr__(name):
    # inductor's init_backend_registration() asks the privateuse1 device
    # module for "Scheduling" when it lowers its first graph: the backstop
    # that registers flagos with inductor if the import hook has not yet.
    if name == "Scheduling":
        from ..compile import register

        register()
        from ..compile.scheduling import FlagosScheduling

        return FlagosScheduling
    if name in ("PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen"):
        return None  # registered explicitly by torch_fl.compile.register
    raise AttributeError(f"module 'torch.flagos' has no attribute {name!r}")
