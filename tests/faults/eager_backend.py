"""Fault: the device's ``torch.compile`` backend silently returns the graph uncompiled.

Models a vendor backend (``torch.compile(model, backend="<device>")``) that wraps its
compiler in ``try: ... except Exception: return gm.forward`` -- or never calls it -- so
every model "compiles" and runs eagerly: right results, no speed-up, and dynamo's counters
show a captured graph and no fallback. Tests that only compare compiled with eager results
pass.

Patched: dynamo's backend registry entry named after the device (the one its
``torch_dynamo_backends`` entry point provides). Applies to flagos.
"""

from __future__ import annotations

from typing import Any

from tests.faults import _hooks


def uncompiled(graph_module: Any, example_inputs: Any, **kwargs: Any) -> Any:
    return graph_module.forward  # the bug: the FX graph runs op by op


def _patch(device: Any) -> None:
    from torch._dynamo.backends import registry

    registry.lookup_backend(device.type)  # load the real one first, then replace it
    registry._COMPILER_FNS.pop(device.type)
    registry.register_backend(compiler_fn=uncompiled, name=device.type)


pytest_configure = _hooks.apply_on(("flagos",), _patch)
