"""The commands of docs/vendor-guide.md's walk-through on the fdev test device, as the
tests run them (tests/foreign_device/test_walkthrough.py checks the guide shows these)."""

from __future__ import annotations

import shlex
import subprocess
import sys

from tests.foreign_device.conftest import REPO, environment

BUILD = "python tests/foreign_device/build.py"
IMPORT = "PYTHONPATH=tests/foreign_device python -c \"import torch, fdev; print(torch.ones(2, device='fdev') + 1)\""
CONFORMANCE = (
    "PYTHONPATH=tests/foreign_device python -m pytest -p flagos --flagos-device=fdev --flagos-device-module=fdev "
    "conformance/ --flagos-expectations=conformance/expectations/fdev.toml --flagos-report=reports/fdev.json"
)
# one family of failures at a time, without the expectations file: the whole messages
FAILURES = (
    "PYTHONPATH=tests/foreign_device python -m pytest -p flagos --flagos-device=fdev --flagos-device-module=fdev "
    "conformance/test_layouts.py -k strides"
)
COMMANDS = (BUILD, IMPORT, CONFORMANCE, FAILURES)
REPORT = REPO / "reports" / "fdev.json"


def run(command: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`command` as a shell in the repository root runs it: leading VAR=value assignments
    are environment, `python` is this interpreter; the environment is a fresh shell's."""
    words = shlex.split(command)
    assignments = {}
    while "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        assignments[name] = value
    assert words[0] == "python", command
    paths = [REPO / p for p in assignments.pop("PYTHONPATH", "").split(":") if p]
    return subprocess.run(
        [sys.executable, *words[1:]],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=environment(*paths, **assignments),
        timeout=timeout,
    )
