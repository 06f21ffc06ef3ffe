"""A fresh inductor + Triton cache directory, with dynamo and its counters reset.

Compile bugs hide behind warm caches: a kernel loaded from TORCHINDUCTOR_CACHE_DIR is never
compiled, so its worker never runs. Each use gets a new directory (under the xdist
worker's own basetemp, so never shared between workers) that is set in the environment
before any compile worker pool starts -- the pool's sidecar copies the environment once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Iterator

from . import _torch_compat, workers


@dataclasses.dataclass(frozen=True)
class CacheDirs:
    inductor: Path  # TORCHINDUCTOR_CACHE_DIR
    triton: Path  # TRITON_CACHE_DIR


@contextlib.contextmanager
def fresh_compile_state(parent: Path) -> Iterator[CacheDirs]:
    """New cache directories under `parent`, in-memory caches cleared, dynamo reset and its
    counters cleared; environment and dynamo reset again on exit."""
    parent.mkdir(parents=True, exist_ok=True)
    _torch_compat.reset_dynamo()
    # fresh_cache clears inductor's in-memory caches, sets both variables, restores them
    with _torch_compat.fresh_cache(str(parent)):
        dirs = CacheDirs(
            inductor=Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]),
            triton=Path(os.environ["TRITON_CACHE_DIR"]),
        )
        # a pool started under an older directory must not serve this test unless torch
        # hands the current directory to the pool with every job
        workers.retire_pools_with_stale_cache_env()
        try:
            yield dirs
        finally:
            _torch_compat.reset_dynamo()
