"""pytest_flagos: a pytest plugin for testing torch.compile on any inductor device.

Load with ``pytest -p flagos --flagos-device=DEVICE``; see docs/plugin.md. Importing this
package does not import torch: the helpers below are loaded on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "assert_compiles_like_eager": ("pytest_flagos.oracle", "assert_compiles_like_eager"),
    "OracleResult": ("pytest_flagos.oracle", "OracleResult"),
    "NotCompiledError": ("pytest_flagos.oracle", "NotCompiledError"),
    "CompiledMismatch": ("pytest_flagos.check", "CompiledMismatch"),
    "Capabilities": ("pytest_flagos.capabilities", "Capabilities"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attr = _LAZY[name]
        return getattr(importlib.import_module(module_name), attr)
    raise AttributeError(f"module 'pytest_flagos' has no attribute {name!r}")
