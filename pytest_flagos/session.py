"""The plugin's state for one pytest run, reachable from fixtures and plain helpers.

Exists only while a device is given (the plugin is "active"); `current()` returns None
otherwise, and helpers such as assert_compiles_like_eager then need explicit arguments.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .options import Settings


@dataclasses.dataclass
class FlagosSession:
    settings: Settings
    device: Any  # device.ResolvedDevice
    hypothesis_profile: str | None = None
    expectations: Any = None  # expectations.Expectations
    current_nodeid: str | None = None  # the test being run, for repro file names
    _capabilities: Any = None

    def capabilities(self) -> Any:
        """The device's capabilities.Capabilities (computed on first use)."""
        if self._capabilities is None:
            from .capabilities import capabilities_for

            self._capabilities = capabilities_for(self.device.device, self.settings.device_module)
        return self._capabilities


_current: FlagosSession | None = None


def current() -> FlagosSession | None:
    return _current


def start(session: FlagosSession) -> None:
    global _current
    _current = session


def stop() -> None:
    global _current
    _current = None
