"""The fdev test device: built once per run, used only in subprocesses.

PrivateUse1 is one slot per process and this test process runs flagos (tests/conftest.py),
so fdev is never imported here: every test starts a fresh interpreter whose environment
(``fdev_env``) puts the fdev package on the path and drops what a flagos parent passes on
(``FLAGOS_AUTOLOAD=1`` and the plugin's FLAGOS_* settings).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.foreign_device import build
from tests.helpers import run_python

REPO = build.REPO


@pytest.fixture(scope="session")
def fdev_path() -> Path:
    """The directory to put on PYTHONPATH for `import fdev` (fdev._C built, up to date)."""
    return build.build()


def environment(*paths: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGOS_")}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(p) for p in paths] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env.update(extra)
    return env


@pytest.fixture
def fdev_env(fdev_path: Path):
    """environment(**extra) with fdev importable, as a fresh shell would have it."""
    return lambda *paths, **extra: environment(*paths, fdev_path, **extra)


@pytest.fixture(scope="session")
def fdev_site(tmp_path_factory: pytest.TempPathFactory, fdev_path: Path) -> Path:
    """A site directory in which fdev is installed with its own torch.backends entry point
    (the dist-info an installer writes), for PYTHONPATH: the shared venv stays untouched."""
    site = tmp_path_factory.mktemp("fdev-site")
    info = site / "fdev-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fdev\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[torch.backends]\nfdev = fdev:_autoload\n")
    return site


def run(code: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter in the repository root, with `env` as its whole environment."""
    return run_python(code, base_env=env, cwd=REPO, timeout=timeout)
