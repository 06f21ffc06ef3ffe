"""Fault: a stale shared cache directory masks a codegen change.

Models a machine (a developer box, a CI runner restoring a cached directory) whose shared
``TORCHINDUCTOR_CACHE_DIR`` holds graphs compiled before the device's codegen changed.
inductor's FX graph cache key covers torch, inductor's config and the graph, not a
vendor's Scheduling or Triton back end: a run that compiles into the shared directory is
served the old kernels, and the change -- here ``reduction_tail``'s numerics regression --
is never compiled, so never tested.

The runner sets ``FLAGOS_FAULT_DIR`` (the shared cache is ``$FLAGOS_FAULT_DIR/shared-cache``)
and runs the phases in order (``FLAGOS_FAULT_PHASE``):

- ``warm``: healthy codegen; every compile, the kit's per-test caches included, goes to the
  shared directory (what earlier runs without per-test isolation leave behind);
- ``masked``: the codegen change, compiles still in the shared directory: passes, which
  proves the stale cache really masks the change;
- ``fault``: the codegen change with the shared directory as ``TORCHINDUCTOR_CACHE_DIR``
  and the kit as it is: its fresh per-test caches must compile the new code and fail.

Applies to flagos.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator

from tests.faults import _hooks, reduction_tail

PHASES = ("warm", "masked", "fault")


def shared_cache() -> Path:
    return Path(os.environ["FLAGOS_FAULT_DIR"]) / "shared-cache"


def _set_cache_env(inductor: Path) -> None:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
    os.environ["TRITON_CACHE_DIR"] = str(inductor / "triton")


def _compile_into_shared_cache() -> None:
    """The kit's per-test cache fixture keeps its resets but uses the shared directory."""
    from pytest_flagos import cache

    isolated = cache.fresh_compile_state

    @contextlib.contextmanager
    def shared_compile_state(parent: Path) -> Iterator[Any]:
        with isolated(parent):  # resets dynamo and in-memory caches; restores the env after
            _set_cache_env(shared_cache())
            yield cache.CacheDirs(inductor=shared_cache(), triton=shared_cache() / "triton")

    cache.fresh_compile_state = shared_compile_state


def _patch(device: Any) -> None:
    phase = os.environ.get("FLAGOS_FAULT_PHASE", "fault")
    if phase not in PHASES:
        raise ValueError(f"FLAGOS_FAULT_PHASE={phase!r}: expected one of {', '.join(PHASES)}")
    shared_cache().mkdir(parents=True, exist_ok=True)
    _set_cache_env(shared_cache())
    if phase in ("warm", "masked"):
        _compile_into_shared_cache()
    if phase in ("masked", "fault"):
        reduction_tail.apply(device)


pytest_configure = _hooks.apply_on(("flagos",), _patch)
