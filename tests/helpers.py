"""Helpers shared by the project's own tests (imported as ``tests.helpers``)."""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
CONFORMANCE = REPO / "conformance"


def run_python(
    source: str | os.PathLike,
    *args: str,
    env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """Runs Python in a fresh interpreter (start-up configuration, autoload, scripts) and
    returns its text output: ``source`` is a script's path, or code (dedented, ``python -c``);
    ``args`` follow it on the command line. The environment is ``base_env`` (default: this
    process's) updated with ``env``."""
    code = ["-c", textwrap.dedent(source)] if isinstance(source, str) else [str(source)]
    return subprocess.run(
        [sys.executable, *code, *args],
        capture_output=True,
        text=True,
        env={**(os.environ if base_env is None else base_env), **(env or {})},
        cwd=cwd,
        timeout=timeout,
    )


def import_conformance(name: str) -> ModuleType:
    """A module of conformance/ (conformance_support, ops_support, a test module) imported the
    way pytest imports it there: with conformance/ on sys.path for the import, since its
    modules import each other by bare name. sys.path is restored afterwards."""
    sys.path.insert(0, str(CONFORMANCE))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(CONFORMANCE))


@contextlib.contextmanager
def kernel_over_flagos(op: str, kernel: Callable) -> Iterator[None]:
    """``kernel`` registered for ``aten::<op>`` on PrivateUse1, over flagos's own, for the block;
    flagos's kernel is the dispatcher's again after it."""
    import torch

    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that the kernel overrides flagos's
            library.impl(op, kernel, "PrivateUse1")
        yield
    finally:
        library._destroy()
