"""What every fault plugin shares: when to patch, and inductor's per-device registries."""

from __future__ import annotations

from typing import Any, Callable

import pytest


def device_under_test() -> Any:
    """The flagos plugin's resolved torch.device, or None when it is inert."""
    from pytest_flagos import session

    current = session.current()
    return None if current is None or not current.device.available else current.device.device


def apply_on(device_types: tuple[str, ...], patch: Callable[[Any], None]) -> Callable[[pytest.Config], None]:
    """A pytest_configure hook that runs patch(device) after the flagos plugin resolved the
    device (trylast), only when the device under test is one of `device_types`."""

    @pytest.hookimpl(trylast=True)
    def pytest_configure(config: pytest.Config) -> None:
        device = device_under_test()
        if device is not None and device.type in device_types:
            patch(device)

    return pytest_configure


def interface(device_type: str) -> Any:
    """The DeviceInterface inductor has registered for the device (after torch_fl's own
    registration, which waits for torch._dynamo to be imported)."""
    import torch._dynamo  # noqa: F401
    from torch._dynamo.device_interface import get_interface_for_device

    _ensure_registered(device_type)
    return get_interface_for_device(device_type)


def _ensure_registered(device_type: str) -> None:
    if device_type == "flagos":
        import torch_fl.compile

        torch_fl.compile.register()  # idempotent; the import hook may not have run yet


def register_interface(device_type: str, cls: type) -> None:
    """Register `cls` as the DeviceInterface of `device_type` and each `device_type:i`."""
    import torch
    from torch._dynamo.device_interface import register_interface_for_device

    register_interface_for_device(device_type, cls)
    for index in range(getattr(torch, device_type).device_count()):
        register_interface_for_device(f"{device_type}:{index}", cls)


def device_op_overrides(device_type: str) -> Any:
    from torch._inductor.codegen.common import get_device_op_overrides

    _ensure_registered(device_type)
    return get_device_op_overrides(device_type)


def register_device_op_overrides(device_type: str, overrides: Any) -> None:
    from torch._inductor.codegen.common import register_device_op_overrides as register

    register(device_type, overrides)


def scheduling(device_type: str) -> type:
    """The inductor Scheduling class registered for the device."""
    from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration

    _ensure_registered(device_type)
    init_backend_registration()
    return get_scheduling_for_device(device_type)


def register_wrapper_codegen(device_type: str, wrapper_cls: type) -> None:
    """Replace the device's Python wrapper codegen, keeping its Scheduling, pass and config."""
    from torch._inductor.codegen import common

    scheduling(device_type)  # the device's backend registered first
    current = common.device_codegens[device_type]
    common.register_backend_for_device(
        device_type,
        current.scheduling,
        wrapper_cls,
        current.cpp_wrapper_codegen,
        current.fx_wrapper_codegen,
        common.get_custom_backend_pass_for_device(device_type),
        common.get_custom_backend_config_for_device(device_type),
    )


def register_scheduling(device_type: str, scheduling_cls: type) -> None:
    """Replace the device's Scheduling, keeping its wrapper codegens, pass and config."""
    from torch._inductor.codegen import common

    current = common.device_codegens[device_type]
    common.register_backend_for_device(
        device_type,
        scheduling_cls,
        current.wrapper_codegen,
        current.cpp_wrapper_codegen,
        current.fx_wrapper_codegen,
        common.get_custom_backend_pass_for_device(device_type),
        common.get_custom_backend_config_for_device(device_type),
    )
