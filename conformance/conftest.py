"""Fixtures of the conformance suite, on top of the flagos plugin's.

Run as ``pytest -p flagos --flagos-device=DEVICE conformance/``: the plugin resolves the
device and provides ``flagos_device``, ``flagos_capabilities``, ``fresh_inductor_cache``,
``compile_workers`` and ``assert_compiles_like_eager``. Without ``--flagos-device`` every
test here skips (the plugin's fixtures do).
"""

from __future__ import annotations

from typing import Any

import pytest
from conformance_support import device_module as _device_module
from conformance_support import fail


@pytest.fixture(scope="session")
def device_module(flagos_device: Any) -> Any:
    """torch.<device type>: torch.cuda, torch.flagos, torch.cpu, ..."""
    return _device_module(flagos_device)


@pytest.fixture(scope="session")
def device_interface(flagos_device: Any) -> Any:
    """The inductor DeviceInterface registered for the device type."""
    import torch._dynamo  # noqa: F401  (devices may register their interface on this import)
    from torch._dynamo.device_interface import get_interface_for_device

    try:
        return get_interface_for_device(flagos_device.type)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    fail(
        f"inductor has no DeviceInterface for {flagos_device.type!r}: get_interface_for_device raised {error}",
        "interface",
    )


@pytest.fixture(scope="session")
def device_count(flagos_device: Any, device_module: Any) -> int:
    count = getattr(device_module, "device_count", None)
    if count is None:
        fail(f"torch.{flagos_device.type} has no device_count()", "module")
    return int(count())


def pytest_configure(config: pytest.Config) -> None:
    # torch's own import-time deprecation noise, not a finding about the device
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
    # torch's structured-trace logger ("torch.__trace") logs at DEBUG on every compile;
    # pytest would print thousands of those lines under each failure. Keep WARNING and up
    # unless the run asked for a level.
    if not config.pluginmanager.has_plugin("logging"):  # -p no:logging: nothing captures logs
        return
    if getattr(config.option, "log_level", None) is None and not config.getini("log_level"):
        config.option.log_level = "WARNING"


@pytest.fixture
def proven_workers(request: pytest.FixtureRequest) -> Any:
    """The plugin's compile_workers (pool forced up, proven to serve compiles), with
    'where to look' added when it cannot be started or proven."""
    try:
        return request.getfixturevalue("compile_workers")
    except pytest.fail.Exception as exc:
        message = str(exc)
    fail(message, "workers", "triton")


@pytest.fixture
def assert_compiles_like_eager(assert_compiles_like_eager: Any) -> Any:
    """The plugin's compiled-vs-eager oracle; a failure gets a 'where to look' note."""
    from conformance_support import hint

    def check(*args: Any, **kwargs: Any) -> Any:
        try:
            return assert_compiles_like_eager(*args, **kwargs)
        except Exception as exc:
            if hasattr(exc, "add_note"):
                exc.add_note(hint("compiled"))
            raise

    return check
