"""The compile tests run on the flagos device through the project's own pytest plugin:

    pytest -p flagos --flagos-device=flagos tests/integration

(`make test` does this). Without a device the plugin's fixtures skip.
"""

import pytest


@pytest.fixture
def compiled_on_workers(compile_workers, fresh_inductor_cache):
    """A fresh cache and a worker pool proven to serve Triton compiles, for one test."""
    assert compile_workers.proof.kernels_from_pool > 0, compile_workers.proof.note
    return compile_workers


@pytest.fixture
def kernel_sources(fresh_inductor_cache):
    """Reads back the Python modules inductor wrote into this test's cache directory."""
    return lambda: [p.read_text() for p in fresh_inductor_cache.inductor.rglob("*.py")]


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.flagos_area("compile"))
