"""Assertion helpers shared by the plugin's tests (imported by module name)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def usage_error_line(result: pytest.RunResult) -> str:
    """The single 'ERROR: flagos: ...' line of a usage error, checking there is no traceback."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    err = result.stderr.str()
    assert "Traceback" not in err and "INTERNALERROR" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("ERROR: flagos:")]
    assert len(lines) == 1, err
    return lines[0]


def load_report(path: Path) -> dict:
    return json.loads(path.read_text())
