"""Compile workers: the pool forced up and proven to serve compiles, every start method the
device claims (capability manifest: worker_start_methods), device property queries answered
inside a worker, and a compile whose kernels come back from the workers."""

from __future__ import annotations

import os

import pytest
import torch

from conformance_support import (
    PROPERTY_RULES,
    assert_close,
    bullet,
    device_index,
    fail,
    inductor_counters,
)

# inductor's worker pool compiles the kernels of a device it has a code generator for
pytestmark = [pytest.mark.flagos_area("workers"), pytest.mark.requires("inductor")]

ALL_START_METHODS = ("subprocess", "fork", "spawn")


def _property_probe(device_type, index):
    """Source for eval() in a worker (eval is picklable by reference, a test function is not
    importable there): what inductor's worker-side code asks, via DeviceInterface.Worker."""
    keys = tuple(PROPERTY_RULES)
    return (
        "(lambda di, os: (lambda p: dict({k: getattr(p, k, None) for k in %r}, pid=os.getpid()))"
        "(di.get_interface_for_device(%r).Worker.get_device_properties(%d)))"
        "(__import__('torch._dynamo.device_interface', fromlist=['x']), __import__('os'))" % (keys, device_type, index)
    )


def _check_worker_properties(workers, flagos_device, device_interface):
    index = device_index(flagos_device)
    error = None
    try:
        answer = workers.run_in_worker(eval, _property_probe(flagos_device.type, index))
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is not None:
        fail(
            f"DeviceInterface.Worker.get_device_properties({index}) failed inside a "
            f"{workers.start_method} compile worker: {error}",
            "workers",
            "properties",
        )
    parent = device_interface.Worker.get_device_properties(index)
    problems = []
    if answer.pop("pid") == os.getpid():
        problems.append("the property query ran in the test process, not a worker")
    for key, value in answer.items():
        expected = getattr(parent, key, None)
        if value != expected:
            problems.append(f"{key}: worker says {value!r}, the test process {expected!r}")
    if problems:
        fail(
            f"device properties inside a {workers.start_method} compile worker disagree:\n" + bullet(problems),
            "workers",
            "properties",
        )


def test_forced_pool_serves_compiles(flagos_capabilities, proven_workers):
    proof = proven_workers.proof
    problems = []
    if proven_workers.worker_pid == os.getpid():
        problems.append("a pool job ran in the test process")
    if flagos_capabilities.codegen == "triton":
        if proof.kernels_from_pool < 1:
            problems.append(f"no Triton kernel came back from a worker: {proof.note}")
        if proof.kernels_in_process:
            problems.append(
                f"{proof.kernels_in_process} kernel(s) were built in the test process although the pool was ready"
            )
    if problems:
        fail("the compile worker pool does not serve compiles:\n" + bullet(problems), "workers")


@pytest.mark.requires("triton_codegen", "device_interface")  # workers read properties for Triton kernels
def test_worker_side_property_queries(flagos_device, flagos_capabilities, device_interface, proven_workers):
    _check_worker_properties(proven_workers, flagos_device, device_interface)


@pytest.mark.requires("triton_codegen")  # C++ kernels compile on threads in the test process
def test_a_compile_is_served_by_the_workers(flagos_device, flagos_capabilities, proven_workers):
    """A multi-kernel graph compiled after the pool is up: its kernels come from workers."""
    from pytest_flagos import _torch_compat

    def f(x, y):
        a = torch.softmax(x * 1.7, dim=-1)
        return (a * y.cos()).sum(0), torch.layer_norm(x, (x.shape[-1],))

    x = torch.randn(32, 96, device=flagos_device)
    y = torch.randn(32, 96, device=flagos_device)
    with _torch_compat.record_pool_jobs(proven_workers.pool) as jobs:
        out = torch.compile(f, backend="inductor", fullgraph=True)(x, y)
    expected = f(x.cpu(), y.cpu())
    for got, want in zip(out, expected, strict=True):
        assert_close(got, want, "a graph compiled by the workers computes wrong results", "workers", "compiled")
    served = [name for name, _ in jobs if name == "_worker_compile_triton"]
    failed = [f"{name}: {fut.exception()}" for name, fut in jobs if fut.exception() is not None]
    if failed:
        fail("compile jobs failed in the workers:\n" + bullet(failed), "workers", "triton")
    built = (
        inductor_counters()["inductor"]["async_compile_cache_miss"]
        - inductor_counters()["inductor"]["async_compile_cache_hit"]
    )
    if not served:
        fail(
            f"inductor built {built} kernel(s) for a two-output graph but sent none to the ready worker pool", "workers"
        )


@pytest.mark.parametrize("method", ALL_START_METHODS)
def test_start_method(method, request, flagos_device, flagos_capabilities, fresh_inductor_cache):
    """A pool started with `method` comes up, serves the proof compile and answers device
    property queries from a worker."""
    if method not in flagos_capabilities.worker_start_methods:
        pytest.skip(
            f"flagos: requires the {method!r} worker start method: the capability manifest does not claim it "
            f"(worker_start_methods: {', '.join(flagos_capabilities.worker_start_methods)})"
        )
    from pytest_flagos import _torch_compat

    async_compile = _torch_compat.async_compile()
    inductor_config = _torch_compat.inductor_config()

    run_method = inductor_config.worker_start_method
    try:
        with inductor_config.patch(worker_start_method=method):
            workers = request.getfixturevalue("proven_workers")
            if workers.start_method != method:
                fail(
                    f"asked for a {method!r} pool, got {workers.start_method!r}: something "
                    "switched inductor's worker_start_method",
                    "workers",
                )
            if flagos_capabilities.codegen == "triton":
                device_interface = request.getfixturevalue("device_interface")
                _check_worker_properties(workers, flagos_device, device_interface)
    finally:
        if method != run_method:
            # later tests (and inductor's lazily used pool) get the run's own start method
            async_compile.shutdown_compile_workers()
