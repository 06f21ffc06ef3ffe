"""flagos's DeviceInterface: what dynamo and inductor ask a GPU device.

Registered for "flagos" and "flagos:N" by ``torch_fl.compile.register``.
"""

from typing import Any

import torch

from flagos_autoload.device_type import DEVICE_TYPE

from .. import _C
from ..flagos import streams
from ..flagos._device import _index
from ._inductor_adapter import device_interface_base, worker_device_caches

# Imported only by register() (and by compiled code, after it), so asking for dynamo's
# classes here keeps `import torch_fl` cheap.
DeviceInterface = device_interface_base()
caching_worker_current_devices, caching_worker_device_properties = worker_device_caches()


def get_raw_stream(device_index: int) -> int:
    """The handle of the current flagos stream of a device: compiled code launches on it."""
    return _C._current_raw_stream(device_index)


def _as_index(device) -> int:
    if device is None:
        return _C._current_device()
    return _index(device)


class FlagosInterface(DeviceInterface):  # type: ignore[misc, valid-type]  # a base known at run time
    device = torch.flagos.device
    Event = streams.Event
    Stream = streams.Stream

    class Worker:
        """Property queries that also work inside compile workers.

        The parent records the properties before the pool starts (inductor's
        pre_fork_setup); a worker then answers from that cache without
        touching the device.
        """

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices[DEVICE_TYPE] = device

        @staticmethod
        def current_device() -> int:
            if DEVICE_TYPE in caching_worker_current_devices:
                return caching_worker_current_devices[DEVICE_TYPE]
            return torch.flagos.current_device()

        @staticmethod
        def get_device_properties(device=None) -> Any:
            index = FlagosInterface.Worker.current_device() if device is None else _as_index(device)
            if DEVICE_TYPE not in caching_worker_device_properties:
                caching_worker_device_properties[DEVICE_TYPE] = [
                    torch.flagos.get_device_properties(i) for i in range(torch.flagos.device_count())
                ]
            return caching_worker_device_properties[DEVICE_TYPE][index]

    current_device = staticmethod(torch.flagos.current_device)
    set_device = staticmethod(torch.flagos.set_device)
    device_count = staticmethod(torch.flagos.device_count)
    stream = staticmethod(torch.flagos.stream)
    current_stream = staticmethod(torch.flagos.current_stream)
    set_stream = staticmethod(torch.flagos.set_stream)
    synchronize = staticmethod(torch.flagos.synchronize)
    get_raw_stream = staticmethod(get_raw_stream)
    memory_allocated = staticmethod(torch.flagos.memory_allocated)
    is_bf16_supported = staticmethod(torch.flagos.is_bf16_supported)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _C._set_stream(stream_id, device_index)

    @staticmethod
    def exchange_device(device: int) -> int:
        previous = _C._current_device()
        if device >= 0 and device != previous:
            _C._set_device(device)
        return previous

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return FlagosInterface.exchange_device(device)

    @staticmethod
    def is_available() -> bool:
        return torch.flagos.is_available()

    @staticmethod
    def get_device_properties(device=None) -> Any:
        return torch.flagos.get_device_properties(_as_index(device))

    @staticmethod
    def get_compute_capability(device=None) -> int:
        major, minor = torch.flagos.get_device_capability(_as_index(device))
        return major * 10 + minor

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return True

    @staticmethod
    def raise_if_triton_unavailable(device=None) -> None:
        import triton.backends

        if DEVICE_TYPE not in triton.backends.backends and torch.flagos.accelerator_name() == "host":
            raise RuntimeError(
                "flagos: triton has no 'flagos' back end; install torch_fl so that its triton.backends entry "
                "point is registered (pip install -e . or make build)"
            )
