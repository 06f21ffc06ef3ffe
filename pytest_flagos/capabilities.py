"""The capability manifest: what a device claims it can do.

Defaults are derived from the device type. A vendor overrides them with a
``flagos_capabilities`` attribute -- a dict, or a function returning a dict --
on its torch device module (``torch.<device>``) or on the module named by
``--flagos-device-module``; the device module wins when both have one. Keys
are the field names of :class:`Capabilities`; anything vendor-specific goes
under ``extra``.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Mapping

import pytest

ALL_WORKER_START_METHODS = ("subprocess", "fork", "spawn")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    device_type: str
    # inductor's code generator for this device: "triton" (GPU-like devices), "cpp" (cpu),
    # "metal" (mps), "halide", "pallas", or "none" when inductor has no back end for it.
    codegen: str
    # dtypes that work both eagerly and compiled, by torch name ("float32", "bfloat16")
    dtypes: tuple[str, ...]
    # start methods inductor's compile workers can use with this device
    worker_start_methods: tuple[str, ...] = ALL_WORKER_START_METHODS
    # whether a per-process memory limit can be set (set_per_process_memory_fraction)
    memory_limit: bool = False
    # vendor-specific facts, read by the vendor's own tests
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def supports(self, dtype: Any) -> bool:
        return _dtype_name(dtype) in self.dtypes

    def torch_dtypes(self) -> tuple[Any, ...]:
        import torch

        return tuple(getattr(torch, name) for name in self.dtypes)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["dtypes"] = list(self.dtypes)
        out["worker_start_methods"] = list(self.worker_start_methods)
        out["extra"] = dict(self.extra)
        return out


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _default_codegen(device_type: str) -> str:
    from . import _torch_compat as compat

    config = compat.inductor_config()
    if device_type == "cpu":
        return str(getattr(config, "cpu_backend", "cpp"))
    if device_type == "cuda":
        return str(getattr(config, "cuda_backend", "triton"))
    if device_type == "xpu":
        return "triton"
    if device_type == "mps":
        return "metal"
    # a PrivateUse1 device: ask inductor which scheduling the device registered
    scheduling = compat.scheduling_for_device(device_type)
    if scheduling is None:
        return "none"
    name = getattr(scheduling, "__name__", "").lower()
    for kind in ("triton", "cpp", "halide", "pallas", "metal"):
        if kind in name:
            return kind
    return "triton"  # a combined/wrapped scheduling: inductor GPU devices default to Triton


def _default_dtypes(device_type: str, module: Any, index: int | None) -> tuple[str, ...]:
    if device_type == "mps":
        return ("float32", "float16", "bfloat16")  # Metal has no float64
    dtypes = ["float32", "float64", "float16", "bfloat16"]
    if device_type == "cuda":
        try:
            if not module.is_bf16_supported():
                dtypes.remove("bfloat16")
        except Exception:
            pass
    if device_type == "xpu":
        try:
            if not getattr(module.get_device_properties(index or 0), "has_fp64", True):
                dtypes.remove("float64")
        except Exception:
            pass
    return tuple(dtypes)


def default_capabilities(device: Any, keep: Mapping[str, Any] | None = None) -> Capabilities:
    """Defaults from the device type; fields given in `keep` are taken as they are (so a
    vendor that declares its codegen spares the lookup in inductor's registry)."""
    from .device_api import device_module

    keep = keep or {}
    module = device_module(device.type)
    return Capabilities(
        device_type=device.type,
        codegen=keep["codegen"] if "codegen" in keep else _default_codegen(device.type),
        dtypes=keep["dtypes"] if "dtypes" in keep else _default_dtypes(device.type, module, device.index),
        memory_limit=device.type != "cpu" and hasattr(module, "set_per_process_memory_fraction"),
    )


def _vendor_overrides(device: Any, device_module: str | None) -> tuple[str, Mapping[str, Any]] | None:
    from . import device_api

    candidates = [(f"torch.{device.type}", device_api.device_module(device.type))]
    if device_module:
        candidates.append((device_module, importlib.import_module(device_module)))
    for where, module in candidates:
        provider = getattr(module, "flagos_capabilities", None)
        if provider is None:
            continue
        value = provider() if callable(provider) else provider
        if isinstance(value, Capabilities):
            value = value.as_dict()
        if not isinstance(value, Mapping):
            raise pytest.UsageError(
                f"flagos: {where}.flagos_capabilities must be a dict or return one, got {type(value).__name__}"
            )
        return where, value
    return None


def capabilities_for(device: Any, device_module: str | None = None) -> Capabilities:
    """The device's manifest: defaults from its type, updated by the vendor's overrides."""
    found = _vendor_overrides(device, device_module)
    if found is None:
        return default_capabilities(device)
    where, overrides = found
    fields = {f.name for f in dataclasses.fields(Capabilities)} - {"device_type"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise pytest.UsageError(
            f"flagos: {where}.flagos_capabilities has unknown field(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(fields))}; put vendor-specific keys under 'extra')"
        )
    values = dict(overrides)
    for key in ("dtypes", "worker_start_methods"):
        if key in values:
            values[key] = tuple(_dtype_name(v) for v in values[key])
    return dataclasses.replace(default_capabilities(device, values), **values)
