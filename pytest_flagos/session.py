"""The plugin's state for one pytest run, kept in that run's ``config.stash``.

The plugin's pytest_configure builds a FlagosSession when a device is given (the plugin is
"active") and stores it under SESSION_KEY; pytest_unconfigure removes it. So the state lives
and dies with its pytest.Config, and two runs in one process (pytester's in-process runs)
never see each other's.

Reach it through a pytest handle: ``current(config)`` -- fixtures pass ``request.config``,
hooks ``config`` / ``item.config``. It returns None when the run has no device; helpers such
as assert_compiles_like_eager then need explicit arguments.

The one fallback: helpers that a test calls without any pytest handle
(``assert_compiles_like_eager(fn, x)``, ``require("events")``, ``strategies.float_dtypes()``)
call ``current()`` with no config. That reads the config of the run in progress through
``_active_config``, a weak reference the plugin sets at pytest_configure and restores at
pytest_unconfigure (a nested in-process run hands the outer run's config back when it ends).
It is the only module-level pointer to run state; code that has a config should pass it.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import pytest

from .options import Settings


@dataclasses.dataclass
class FlagosSession:
    settings: Settings
    device: Any  # device.ResolvedDevice
    hypothesis_profile: str | None = None
    expectations: Any = None  # expectations.Expectations
    current_nodeid: str | None = None  # the test being run, for repro file names
    _capabilities: Any = None
    # requirements.missing_reason's answers: capability name -> why it is missing (None: present)
    missing_reasons: dict[str, str | None] = dataclasses.field(default_factory=dict)

    def capabilities(self) -> Any:
        """The device's capabilities.Capabilities (computed on first use)."""
        if self._capabilities is None:
            from .capabilities import capabilities_for

            self._capabilities = capabilities_for(self.device.device, self.settings.device_module)
        return self._capabilities


SESSION_KEY = pytest.StashKey[FlagosSession]()

# The config of the run in progress, for current() called without one (see the module
# docstring); set and restored by the plugin at pytest_configure / pytest_unconfigure.
_active_config: weakref.ReferenceType[pytest.Config] | None = None


def current(config: pytest.Config | None = None) -> FlagosSession | None:
    """The run's FlagosSession, or None when it has no device.

    config: the run's pytest.Config (``request.config``, ``item.config``); without it, the
    run in progress (the fallback described in the module docstring)."""
    if config is None:
        config = _active_config() if _active_config is not None else None
        if config is None:
            return None
    return config.stash.get(SESSION_KEY, None)


def start(config: pytest.Config, session: FlagosSession) -> None:
    """Store `session` as `config`'s run state."""
    config.stash[SESSION_KEY] = session


def stop(config: pytest.Config) -> None:
    """Drop `config`'s run state (at pytest_unconfigure)."""
    if SESSION_KEY in config.stash:
        del config.stash[SESSION_KEY]


def activate(config: pytest.Config) -> weakref.ReferenceType[pytest.Config] | None:
    """Make `config` the run current() falls back to; returns the one it replaces."""
    global _active_config
    previous = _active_config
    _active_config = weakref.ref(config)
    return previous


def deactivate(config: pytest.Config, previous: weakref.ReferenceType[pytest.Config] | None) -> None:
    """Hand the fallback back to `previous` (what activate(config) returned), if `config` still holds it."""
    global _active_config
    if _active_config is not None and _active_config() is config:
        _active_config = previous
