"""Shared helpers for the project's own tests."""

import os
import subprocess
import sys
import textwrap

import pytest

# The project's tests run on flagos: load it now (torch's entry point only arms it,
# flagos_autoload), so "flagos" device strings parse in every test module.
import torch_fl  # noqa: F401,E402


def run_python(code: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter (for start-up configuration and autoload)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


@pytest.fixture
def python_subprocess():
    return run_python
