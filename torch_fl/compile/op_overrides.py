"""The source snippets inductor's Python wrapper emits for flagos (device, stream, sync)."""

from ._inductor_adapter import device_op_overrides_base

# Imported only by register(), so asking for inductor's base class here keeps `import torch_fl` cheap.
DeviceOpOverrides = device_op_overrides_base()


class FlagosDeviceOpOverrides(DeviceOpOverrides):  # type: ignore[misc, valid-type]  # a base known at run time
    def import_get_raw_stream_as(self, name: str) -> str:
        # The current flagos stream, read at every launch: never a cached constant. The C function
        # itself, as cuda's wrapper imports torch._C._cuda_getCurrentRawStream (no Python frame).
        return f"from torch_fl._C import _current_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.flagos.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.flagos.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.flagos._DeviceGuard({device_idx})"

    def current_stream(self) -> str:
        return "torch.flagos.current_stream()"
