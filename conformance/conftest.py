"""Fixtures of the conformance suite, on top of the flagos plugin's.

Run as ``pytest -p flagos --flagos-device=DEVICE conformance/``: the plugin resolves the
device and provides ``flagos_device``, ``flagos_capabilities``, ``fresh_inductor_cache``,
``compile_workers`` and ``assert_compiles_like_eager``. Without ``--flagos-device`` every
test here skips (the plugin's fixtures do).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_flagos import device_api
from pytest_flagos.requirements import require

from conformance_support import blame, fail, hint
from conformance_support import device_module as _device_module


@pytest.fixture(scope="session")
def device_module(flagos_device: Any) -> Any:
    """torch.<device type> (torch.cuda, torch.flagos, ...), or None: its extras only."""
    return _device_module(flagos_device)


@pytest.fixture(scope="session")
def device_interface(flagos_device: Any) -> Any:
    """The inductor DeviceInterface registered for the device type (skips, naming the
    capability, where the device has none)."""
    require("device_interface")
    from pytest_flagos._torch_compat import get_device_interface

    return get_device_interface(flagos_device.type)


@pytest.fixture(scope="session")
def device_count(flagos_device: Any) -> int:
    """torch.accelerator.device_count() where the device is the accelerator, else the module's."""
    try:
        return device_api.device_count(flagos_device)
    except device_api.MissingAPI as exc:
        message = str(exc)
    fail(f"the device count cannot be read: {message}", "module", "guard")


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


# A worker pool failure names where it was raised (pytest_flagos.workers): in a compile
# worker, or in this process while compiling (the device's inductor registration), or the
# pool itself did not start.
_POOL_BLAME = (
    ("raised in a compile worker", ("workers", "triton")),
    ("raised in this process", ("codegen", "compiled")),
)


@pytest.fixture
def proven_workers(request: pytest.FixtureRequest) -> Any:
    """The plugin's compile_workers (pool forced up, proven to serve compiles), with
    'where to look' added when it cannot be started or proven."""
    require("inductor")
    try:
        return request.getfixturevalue("compile_workers")
    except pytest.fail.Exception as exc:
        message = str(exc)
    first_line = message.splitlines()[0] if message else ""
    topics = next((topics for marker, topics in _POOL_BLAME if marker in first_line), ("workers",))
    fail(message, *topics)


@pytest.fixture
def assert_compiles_like_eager(assert_compiles_like_eager: Any) -> Any:
    """The plugin's compiled-vs-eager oracle; a failure gets a 'where to look' note chosen
    from the evidence (conformance_support.blame)."""

    def check(*args: Any, **kwargs: Any) -> Any:
        try:
            return assert_compiles_like_eager(*args, **kwargs)
        except Exception as exc:
            if hasattr(exc, "add_note"):
                exc.add_note(hint(*blame(exc)))
            raise

    return check
