"""Resolution of --flagos-device into a torch.device.

A name that is not a device is a usage error; a real device that this machine
lacks is "unavailable" (the plugin skips every test, or errors under
--flagos-strict). torch is imported here, so only call this when a device was
given.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import platform
from typing import Any

import pytest

BUILTIN_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps")
INDEXED_BUILTINS = ("cuda", "xpu")


@dataclasses.dataclass(frozen=True)
class ResolvedDevice:
    spec: str  # as the user wrote it
    device: Any  # torch.device
    available: bool
    unavailable_reason: str | None = None

    @property
    def type(self) -> str:
        return self.device.type

    @property
    def module(self) -> Any:
        """torch.<type> (torch.cuda, torch.flagos, ...), or None."""
        from .device_api import device_module

        return device_module(self.device.type)

    def properties(self) -> dict[str, Any]:
        """The device's properties as plain JSON-able values (empty when unavailable):
        torch.<device>.get_device_properties() where the module has it, completed by what
        the generic torch APIs tell (device count, name, capability, memory)."""
        if not self.available:
            return {}
        if self.type == "cpu":
            return _cpu_properties()
        index = self.device.index if self.device.index is not None else 0
        props: dict[str, Any] = {}
        get_props = getattr(self.module, "get_device_properties", None)
        if get_props is not None:
            try:
                props = _plain_attributes(get_props(index))
            except Exception as exc:  # a vendor module may not implement it yet
                props = {"error": f"{type(exc).__name__}: {exc}"}
        for key, value in _generic_properties(self.device, self.module, index).items():
            props.setdefault(key, value)
        return props

    def name(self) -> str:
        return str(self.properties().get("name") or self.type)


def _cpu_properties() -> dict[str, Any]:
    import torch

    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    props: dict[str, Any] = {
        "name": model or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    get_capability = getattr(torch.backends.cpu, "get_cpu_capability", None)
    if get_capability is not None:
        props["capability"] = get_capability()
    return props


def _accelerator_api(device_type: str) -> Any:
    """torch.accelerator (torch >= 2.6) when it speaks for this device type, else None."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    current = getattr(accelerator, "current_accelerator", None)
    try:
        active = current() if current is not None else None
    except Exception:
        return None
    return accelerator if active is not None and active.type == device_type else None


def _first_answer(calls: list[tuple[Any, str, tuple[Any, ...]]]) -> Any:
    """The result of the first `owner.name(*args)` that exists and answers; None otherwise."""
    for owner, name, args in calls:
        fn = getattr(owner, name, None) if owner is not None else None
        if fn is None:
            continue
        try:
            return fn(*args)
        except Exception:  # not supported by this backend ("is not a DeviceAllocator", ...)
            continue
    return None


def _generic_properties(device: Any, module: Any, index: int) -> dict[str, Any]:
    """What torch's device-generic APIs tell about a device: torch.accelerator first (for
    the process's accelerator), the torch.<device> module's cuda-shaped functions second.
    Every name is looked up: the set differs between torch 2.11 and 2.13 and between
    devices."""
    accelerator = _accelerator_api(device.type)
    out: dict[str, Any] = {}
    answers = {
        "device_count": _first_answer([(accelerator, "device_count", ()), (module, "device_count", ())]),
        "name": _first_answer([(module, "get_device_name", (index,))]),
        "capability": _first_answer(
            [(accelerator, "get_device_capability", (index,)), (module, "get_device_capability", (index,))]
        ),
        "memory_info": _first_answer([(accelerator, "get_memory_info", (index,)), (module, "mem_get_info", (index,))]),
        "memory_allocated": _first_answer(
            [(accelerator, "memory_allocated", (index,)), (module, "memory_allocated", (index,))]
        ),
        "memory_reserved": _first_answer(
            [(accelerator, "memory_reserved", (index,)), (module, "memory_reserved", (index,))]
        ),
    }
    memory_info = answers.pop("memory_info")
    if isinstance(memory_info, (tuple, list)) and len(memory_info) == 2:
        out["memory_free"], out["total_memory"] = (int(v) for v in memory_info)
    for key, value in answers.items():
        if value is None:
            continue
        if isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif isinstance(value, (tuple, list)):
            out[key] = [v if isinstance(v, (bool, int, float, str)) else str(v) for v in value]
        elif isinstance(value, dict):
            out[key] = {str(k): v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in value.items()}
        else:
            out[key] = str(value)
    return out


def _plain_attributes(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in dir(obj):
        if name.startswith("_"):
            continue
        try:
            value = getattr(obj, name)
        except Exception:
            continue
        if callable(value):
            continue
        if isinstance(value, (bool, int, float, str)) or value is None:
            out[name] = value
        elif isinstance(value, (tuple, list)):
            out[name] = [v if isinstance(v, (bool, int, float, str)) else str(v) for v in value]
        else:
            out[name] = str(value)
    return out


def import_device_module(module_name: str | None) -> None:
    if not module_name:
        return
    try:
        importlib.import_module(module_name)
    except BaseException as exc:  # SystemExit from a vendor package is a usage error too
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise pytest.UsageError(
            f"flagos: --flagos-device-module={module_name} does not import: {type(exc).__name__}: {exc}"
        ) from None


def _privateuse1_name() -> str | None:
    from ._torch_compat import privateuse1_backend_name

    name = privateuse1_backend_name()
    return None if name == "privateuseone" else name


def _load_flagos() -> str | None:
    """Load torch_fl for a run on flagos: torch's entry point only arms it (flagos_autoload),
    and from a source checkout it may not be installed at all. Returns the import error."""
    try:
        importlib.import_module("torch_fl")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _parse(spec: str) -> tuple[str, int | None]:
    name, sep, index_text = spec.strip().partition(":")
    if not sep:
        return name, None
    try:
        index = int(index_text)
    except ValueError:
        raise pytest.UsageError(
            f"flagos: --flagos-device={spec!r}: device index {index_text!r} is not an integer"
        ) from None
    if index < 0:
        raise pytest.UsageError(f"flagos: --flagos-device={spec!r}: device index must be >= 0")
    return name, index


def resolve_device(spec: str, device_module: str | None = None) -> ResolvedDevice:
    """Turn the user's device string into a ResolvedDevice, or raise UsageError."""
    import_device_module(device_module)
    name, index = _parse(spec)

    import torch

    autoload_error = None
    if name == "flagos":
        autoload_error = _load_flagos()
    known = set(BUILTIN_DEVICE_TYPES)
    private = _privateuse1_name()
    if private:
        known.add(private)
    if name not in known:
        hint = f"registered PrivateUse1 device: {private or 'none'}"
        if autoload_error:
            hint += f"; import torch_fl failed: {autoload_error}"
        raise pytest.UsageError(
            f"flagos: unknown device {name!r} (expected cpu, cuda[:i], xpu[:i], mps, "
            f"flagos[:i] or a registered PrivateUse1 name; {hint})"
        )

    if name == "cpu":
        if index not in (None, 0):
            raise pytest.UsageError(f"flagos: --flagos-device={spec!r}: device index {index} out of range (cpu has 1)")
        return ResolvedDevice(spec, torch.device("cpu"), True)

    # generic first: torch.accelerator speaks for the process's accelerator; the device
    # module (torch.cuda-shaped or not) second
    from . import device_api

    device = torch.device(name) if index is None else torch.device(name, index)
    module = device_api.device_module(name)
    checks = []
    if device_api.accelerator_is(device):
        checks.append(("torch.accelerator.is_available()", torch.accelerator.is_available))
    if callable(getattr(module, "is_available", None)):
        checks.append((f"torch.{name}.is_available()", module.is_available))
    if not checks:
        return ResolvedDevice(
            spec, device, False, f"torch.{name} has no is_available() and {name!r} is not torch.accelerator's device"
        )
    errors, available, answered = [], False, None
    for where, is_available in checks:
        try:
            available, answered = bool(is_available()), where
            break
        except Exception as exc:
            errors.append(f"{where} raised {type(exc).__name__}: {exc}")
    why = f"{answered} is False" if answered else "; ".join(errors)
    if not available:
        return ResolvedDevice(spec, device, False, f"device {spec!r} is not available on this machine ({why})")

    try:
        count = device_api.device_count(device)
    except device_api.MissingAPI:
        count = 1
    if index is not None and index >= count:
        source = (
            "torch.accelerator.device_count()"
            if device_api.accelerator_is(device) and not callable(getattr(module, "device_count", None))
            else f"torch.{name}.device_count()"
        )
        raise pytest.UsageError(
            f"flagos: --flagos-device={spec!r}: device index {index} out of range ({source} is {count})"
        )
    if index is None:
        try:
            index = device_api.current_device_index(device)
        except device_api.MissingAPI:
            index = 0
    return ResolvedDevice(spec, torch.device(name, index), True)
