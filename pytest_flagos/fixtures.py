"""The plugin's fixtures. Each skips when no device was given (the plugin is inert).

They read the run's state from request.config (session.current(request.config))."""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterator

import pytest

from . import session


def _require_session(request: pytest.FixtureRequest) -> session.FlagosSession:
    current = session.current(request.config)
    if current is None:
        pytest.skip("flagos: no device selected (pass --flagos-device=DEVICE or set FLAGOS_DEVICE)")
    if not current.device.available:  # every test is marked skip already; belt and braces
        pytest.skip(f"flagos: {current.device.unavailable_reason}")
    return current


@pytest.fixture(scope="session")
def flagos_device(request: pytest.FixtureRequest) -> Any:
    """The torch.device under test, e.g. torch.device('cuda', 0)."""
    return _require_session(request).device.device


@pytest.fixture(scope="session")
def flagos_capabilities(request: pytest.FixtureRequest) -> Any:
    """The device's capability manifest (pytest_flagos.capabilities.Capabilities)."""
    return _require_session(request).capabilities()


@pytest.fixture
def fresh_inductor_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """New TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR for this test (under this xdist
    worker's basetemp), in-memory caches cleared, dynamo reset, counters cleared;
    environment restored afterwards. Yields cache.CacheDirs(inductor, triton)."""
    _require_session(request)
    from .cache import fresh_compile_state

    with fresh_compile_state(tmp_path_factory.mktemp("inductor-cache")) as dirs:
        yield dirs


@pytest.fixture
def compile_workers(
    request: pytest.FixtureRequest,
    fresh_inductor_cache: Any,
    flagos_device: Any,
    flagos_capabilities: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Any:
    """Inductor's compile worker pool, started now (after the fresh cache directory is set),
    ready, and proven to serve compiles (skipped, naming the capability, on a device
    inductor has no code generator for). Yields workers.CompileWorkers."""
    from .requirements import require
    from .workers import WorkerPoolError, ensure_compile_workers

    require("inductor", config=request.config)

    try:
        return ensure_compile_workers(
            flagos_device, flagos_capabilities.codegen, tmp_path_factory.getbasetemp() / "compile-workers"
        )
    except WorkerPoolError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)  # outside `except`: the message alone, no chain


@pytest.fixture(scope="session")
def assert_compiles_like_eager(request: pytest.FixtureRequest, flagos_device: Any) -> Callable[..., Any]:
    """pytest_flagos.oracle.assert_compiles_like_eager bound to the device under test (and this run)."""
    from .oracle import assert_compiles_like_eager as oracle

    return functools.partial(oracle, device=flagos_device, config=request.config)
