"""Helpers for the plugin's own tests: pytest runs in subprocesses via pytester.

Every run is a subprocess: the plugin's session state, dynamo's caches and inductor's
worker pool are per process, and a run with a device imports torch.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from pathlib import Path

import pytest

from pytest_flagos.options import OPTIONS
from tests import helpers

REPO = Path(__file__).resolve().parents[2]
# the plugin's settings (from its one table of options) and what a flagos parent passes its children
FLAGOS_ENV = (*(opt.env for opt in OPTIONS), "FLAGOS_AUTOLOAD")


def pytest_configure(config: pytest.Config) -> None:
    # `pytest_plugins` is only allowed in the rootdir's conftest; load pytester here instead
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


def _load_args() -> list[str]:
    """`-p flagos` once the entry point is installed; the module path before that."""
    installed = any(ep.name == "flagos" for ep in importlib.metadata.entry_points(group="pytest11"))
    return ["-p", "flagos"] if installed else ["-p", "pytest_flagos.plugin"]


LOAD_ARGS = _load_args()


@pytest.fixture
def flagos_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment of a subprocess run: this checkout first on the path, no FLAGOS_*."""
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
    )
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    for name in FLAGOS_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def run_pytest(pytester: pytest.Pytester, flagos_env: None):
    """Run pytest with the plugin in a subprocess in pytester's directory."""

    def run(*args: str, timeout: float = 300) -> pytest.RunResult:
        return pytester.runpytest_subprocess(*LOAD_ARGS, "-p", "no:cacheprovider", *args, timeout=timeout)

    return run


@pytest.fixture
def run_python(pytester: pytest.Pytester, flagos_env: None):
    """Run a Python script in a subprocess (repro scripts)."""

    def run(script: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return helpers.run_python(script, env=env, cwd=script.parent, timeout=timeout)

    return run
