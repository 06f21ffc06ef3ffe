"""The run's output paths (--flagos-report, --flagos-repro-dir), checked before any test runs.

A path that cannot be written, or that would overwrite an input of the run, is a usage error
at configure time (one line, exit status 4), not a traceback after the whole run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

import pytest

from .report import markdown_path

Inputs = Iterable[tuple[Path | None, str]]  # (path, what it is) of what the run reads


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def _unwritable_parent(path: Path) -> str | None:
    """Why `path` cannot be created, judged by its nearest existing ancestor, or None."""
    for parent in path.parents:
        if not parent.exists():
            continue
        if not parent.is_dir():
            return f"lies under {parent}, which is a file"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"cannot be created: {parent} is not writable"
        return None
    return None


def _is_report(path: Path, markdown: bool) -> bool:
    """Whether the existing file at `path` is a report this plugin wrote (safe to replace)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    if markdown:
        return head.startswith("# flagos conformance report")
    return re.match(r'\s*\{\s*"schema":\s*"pytest_flagos\.report/', head) is not None


def check_report_path(path: Path, inputs: Inputs) -> None:
    """PATH names the JSON report (not .md); it and PATH.md must be files this run may write
    and must not be an input of the run or a file that is not an earlier report."""
    flag = f"--flagos-report={path}"
    if path.suffix.lower() == ".md":
        raise pytest.UsageError(
            f"flagos: {flag}: PATH names the JSON report (the Markdown summary is written beside it "
            f"with .md); give a .json path such as {path.with_suffix('.json')}"
        )
    for target in (path, markdown_path(path)):
        if target.is_dir():
            raise pytest.UsageError(
                f"flagos: {flag}: {target} is a directory; give a file path such as {target}/report.json"
            )
        why = _unwritable_parent(target)
        if why is None and target.exists() and not os.access(target, os.W_OK):
            why = "exists and is not writable"
        if why:
            raise pytest.UsageError(f"flagos: {flag}: {target} {why}")
        for other, what in inputs:
            if other is not None and _same(target, Path(other)):
                raise pytest.UsageError(
                    f"flagos: {flag}: {target} is {what}; the report would overwrite it (choose another path)"
                )
        if target.is_file() and not _is_report(target, markdown=target != path):
            raise pytest.UsageError(
                f"flagos: {flag}: {target} exists and is not a flagos report; refusing to overwrite it "
                "(choose another path or remove the file)"
            )


def check_repro_dir(path: Path, inputs: Inputs) -> None:
    """The repro directory must be a directory this run may create or write into."""
    flag = f"--flagos-repro-dir={path}"
    if path.exists() and not path.is_dir():
        raise pytest.UsageError(f"flagos: {flag}: {path} is a file, not a directory")
    why = _unwritable_parent(path) if not path.exists() else None
    if why is None and path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        why = "is not writable"
    if why:
        raise pytest.UsageError(f"flagos: {flag}: {path} {why}")
    for other, what in inputs:
        if other is not None and _same(path, Path(other)):
            raise pytest.UsageError(f"flagos: {flag}: {path} is {what} (choose another directory)")


def run_inputs(config: pytest.Config, expectations: Path | None) -> list[tuple[Path | None, str]]:
    """What this run reads that an output path must never replace."""
    inputs: list[tuple[Path | None, str]] = [
        (expectations, "the expectations file (--flagos-expectations)"),
        (config.inipath, "the ini file"),
    ]
    base = Path(config.invocation_params.dir)
    for arg in config.args:
        path = (base / str(arg).split("::", 1)[0]).resolve()
        if path.is_file():
            inputs.append((path, "a test file given on the command line"))
    return inputs
