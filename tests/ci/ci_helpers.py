"""Helpers for the tests of .github/scripts (imported by module name): the scripts as
modules, running them as CI does, a scratch repository."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.helpers import run_python

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / ".github" / "scripts"


def load_script(name: str) -> ModuleType:
    module_name = f"_ci_script_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look the module up while it loads
    spec.loader.exec_module(module)
    return module


def run_script(
    name: str, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run a script as CI does: `python3 .github/scripts/NAME.py ARGS` (here: this Python);
    `env`, when given, is the whole environment."""
    return run_python(SCRIPTS / f"{name}.py", *args, base_env=env, cwd=cwd or REPO, timeout=60)


GOOD_CONFIG = """\
name: "test accelerator"
runs-on: [ubuntu-latest]
setup: setup.sh
env:
  FLAGOS_ACCELERATOR: host
pytest: pytest -p flagos --flagos-device=cpu conformance/ --flagos-expectations=conformance/expectations/cpu.toml --flagos-report=reports/acc.json --flagos-strict
timeout-minutes: 30
"""


class ScratchRepo:
    """A minimal repository layout the validator checks configs against."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / ".github" / "configs").mkdir(parents=True)
        (root / "conformance" / "expectations").mkdir(parents=True)
        (root / "setup.sh").write_text("#!/usr/bin/env bash\necho set-up ran\n")
        self.expectations("cpu", '[[xfail]]\nid = "conformance/test_x.py"\nreason = "bug 1"\n')

    def expectations(self, device: str, text: str = "") -> Path:
        path = self.root / "conformance" / "expectations" / f"{device}.toml"
        path.write_text(text)
        return path

    def config(self, name: str, text: str) -> Path:
        path = self.root / ".github" / "configs" / f"{name}.yml"
        path.write_text(text)
        return path

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return run_script("accelerators", "--root", str(self.root), *args, cwd=self.root, env=env)
