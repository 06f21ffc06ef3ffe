"""Fixtures shared by the project's own tests (helpers to import: tests/helpers.py)."""

import pytest

# The project's tests run on flagos: load it now (torch's entry point only arms it,
# flagos_autoload), so "flagos" device strings parse in every test module.
import torch_fl  # noqa: F401
from tests.helpers import run_python


@pytest.fixture
def python_subprocess():
    """tests.helpers.run_python: code in a fresh interpreter (start-up configuration, autoload)."""
    return run_python
