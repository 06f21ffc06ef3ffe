"""Fixtures for the tests of .github/scripts."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from ci_helpers import ScratchRepo, load_script


def pytest_configure(config: pytest.Config) -> None:
    # pytester for the report round trip (only the rootdir's conftest may use pytest_plugins)
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture(scope="session")
def accelerators() -> ModuleType:
    return load_script("accelerators")


@pytest.fixture(scope="session")
def matrix_summary() -> ModuleType:
    return load_script("matrix_summary")


@pytest.fixture
def scratch(tmp_path: Path) -> ScratchRepo:
    return ScratchRepo(tmp_path / "repo")
