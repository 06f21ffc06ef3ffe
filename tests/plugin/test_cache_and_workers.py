"""fresh_inductor_cache and compile_workers."""

from __future__ import annotations

import os

import pytest

FRESH_CACHE_TESTS = """
import os
from pathlib import Path

ORIGINAL = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
SEEN = []


def test_a_fresh_dirs_set_and_empty(fresh_inductor_cache, tmp_path_factory):
    import torch
    from torch._dynamo.utils import counters

    dirs = fresh_inductor_cache
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(dirs.inductor)
    assert os.environ["TRITON_CACHE_DIR"] == str(dirs.triton)
    assert dirs.inductor.is_dir() and not any(dirs.inductor.iterdir())
    assert dirs.inductor.is_relative_to(tmp_path_factory.getbasetemp())
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        assert worker in str(tmp_path_factory.getbasetemp())  # never shared across workers
    assert not counters  # cleared
    torch.compile(lambda x: x.sin(), backend="eager")(torch.ones(2))
    assert counters["stats"]["unique_graphs"] == 1
    SEEN.append(dirs.inductor)


def test_b_another_test_gets_another_dir(fresh_inductor_cache):
    from torch._dynamo.utils import counters

    assert not counters  # dynamo reset and counters cleared between tests
    if SEEN:  # same process (not always so under xdist)
        assert fresh_inductor_cache.inductor != SEEN[0]
    SEEN.append(fresh_inductor_cache.inductor)


def test_c_environment_restored_afterwards():
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == ORIGINAL
"""

WORKER_TESTS = """
import os
import pytest
from pytest_flagos import _torch_compat

POOLS = []


def _sidecar_env(pid):
    raw = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\\0") if "=" in item)


def test_pool_starts_after_the_fresh_cache_and_serves(fresh_inductor_cache, compile_workers):
    from torch._inductor.async_compile import AsyncCompile

    cw = compile_workers
    fresh = {"TORCHINDUCTOR_CACHE_DIR": str(fresh_inductor_cache.inductor),
             "TRITON_CACHE_DIR": str(fresh_inductor_cache.triton)}
    # the pool's process was started with this test's fresh directories in its environment
    env = _sidecar_env(cw.sidecar_pid)
    assert {k: env[k] for k in fresh} == fresh
    assert cw.started_env == fresh
    assert cw.run_in_worker(os.getenv, "TORCHINDUCTOR_CACHE_DIR") == fresh["TORCHINDUCTOR_CACHE_DIR"]
    # a worker process, not this one and not the sidecar, answers jobs; inductor uses the pool
    assert cw.worker_pid not in (os.getpid(), cw.sidecar_pid)
    assert (cw.start_method, cw.threads) == ("subprocess", 2)
    assert AsyncCompile.use_process_pool()
    # inductor's C++ back end compiles on threads in this process, never in the pool
    assert cw.proof.codegen == "cpp"
    assert cw.proof.pool_jobs == () and cw.proof.kernels_from_pool == 0
    assert cw.log_path is not None and cw.log_path.exists()
    POOLS.append(cw.pool)


def test_pool_is_reused_only_when_jobs_carry_the_cache_dir(fresh_inductor_cache, compile_workers):
    assert POOLS, "runs after the first test"
    if _torch_compat.pool_receives_cache_env_per_task():
        assert compile_workers.pool is POOLS[0]  # torch sends the cache dirs with every job
        assert compile_workers.started_env["TORCHINDUCTOR_CACHE_DIR"] != str(
            fresh_inductor_cache.inductor)
    else:
        assert compile_workers.pool is not POOLS[0]  # restarted under this test's cache dir
        assert compile_workers.started_env["TORCHINDUCTOR_CACHE_DIR"] == str(
            fresh_inductor_cache.inductor)
    assert compile_workers.worker_pid != os.getpid()


def test_stale_pool_retired_when_jobs_do_not_carry_the_cache_dir(fresh_inductor_cache,
                                                                  monkeypatch):
    from pytest_flagos import cache, workers

    assert _torch_compat.live_pools()  # still up from the tests above
    monkeypatch.setattr(_torch_compat, "pool_receives_cache_env_per_task", lambda: False)
    with cache.fresh_compile_state(fresh_inductor_cache.inductor.parent / "next"):
        assert _torch_compat.live_pools() == []  # shut down: it had another cache dir
"""

PLANTED_WORKER_FAILURE = """
import os, sys
if sys.argv and "compile_worker" in sys.argv[0]:
    sys.stderr.write("planted: this compile worker cannot see the device\\n")
    sys.stderr.flush()
    os._exit(3)
"""

TRITON_PROOF_TESTS = """
import torch
from pytest_flagos import _torch_compat


def test_pool_serves_triton_compiles(flagos_capabilities, compile_workers, flagos_device):
    proof = compile_workers.proof
    assert proof.codegen == "triton"
    assert proof.kernels_from_pool >= 1 and "_worker_compile_triton" in proof.pool_jobs
    assert proof.kernels_in_process == 0
    # and it keeps serving: a later compile's kernels also come from the workers
    with _torch_compat.record_pool_jobs(compile_workers.pool) as jobs:
        out = torch.compile(lambda x: (x.cos() * 3).sum(0))(torch.ones(16, 32, device=flagos_device))
    assert out.shape == (32,)
    assert "_worker_compile_triton" in [name for name, _ in jobs]
"""


def test_fresh_inductor_cache(run_pytest, pytester):
    pytester.makepyfile(FRESH_CACHE_TESTS)
    run_pytest("--flagos-device=cpu").assert_outcomes(passed=3)


def test_fresh_inductor_cache_per_xdist_worker(run_pytest, pytester):
    pytester.makepyfile(FRESH_CACHE_TESTS)
    run_pytest("--flagos-device=cpu", "-n", "2").assert_outcomes(passed=3)


def test_compile_workers_on_cpu(run_pytest, pytester):
    pytester.makepyfile(WORKER_TESTS)
    run_pytest("--flagos-device=cpu", "--flagos-compile-threads=2", "-v").assert_outcomes(passed=3)


def test_compile_workers_that_cannot_start_fail_with_the_workers_message(run_pytest, pytester, monkeypatch):
    plant = pytester.mkdir("plant")
    (plant / "sitecustomize.py").write_text(PLANTED_WORKER_FAILURE)
    # inductor starts its sidecar with PYTHONPATH=$TORCH_CUSTOM_PYTHONPATH when set
    monkeypatch.setenv("TORCH_CUSTOM_PYTHONPATH", os.pathsep.join([str(plant), os.environ["PYTHONPATH"]]))
    pytester.makepyfile("def test_needs_workers(compile_workers):\n    pass\n")
    result = run_pytest("--flagos-device=cpu", "--flagos-compile-threads=2")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_needs_workers*",
            "flagos: inductor's compile worker pool (subprocess, 2 workers) did not start:",
            "RuntimeError: the compile worker process exited with status 3",
            "worker output (*compile-workers-*.log):",
            "planted: this compile worker cannot see the device",
        ],
        consecutive=True,
    )


def test_compile_workers_need_more_than_one_thread(run_pytest, pytester):
    pytester.makepyfile("def test_needs_workers(compile_workers):\n    pass\n")
    result = run_pytest("--flagos-device=cpu", "--flagos-compile-threads=1")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*flagos: inductor's compile_threads is 1, so inductor compiles in-process and starts no worker pool*"]
    )


def test_compile_workers_serve_triton_compiles(run_pytest, pytester):
    """Needs a device whose inductor codegen is Triton: FLAGOS_PLUGIN_TEST_TRITON_DEVICE
    (e.g. cuda on a GPU machine), else flagos when torch_fl's compile support works."""
    device = os.environ.get("FLAGOS_PLUGIN_TEST_TRITON_DEVICE", "flagos")
    pytester.makepyfile(TRITON_PROOF_TESTS)
    pytester.makeconftest("""
        import pytest

        @pytest.fixture(autouse=True)
        def _triton_only(flagos_capabilities):
            if flagos_capabilities.codegen != "triton":
                pytest.skip(f"inductor codegen for this device is {flagos_capabilities.codegen!r}")
    """)
    result = run_pytest(f"--flagos-device={device}", "--flagos-compile-threads=2", "-rs", timeout=600)
    outcomes = result.parseoutcomes()
    if result.ret == pytest.ExitCode.USAGE_ERROR or outcomes.get("skipped"):
        pytest.skip(
            f"no Triton-codegen device {device!r} here: " + (result.stderr.str().strip() or result.stdout.lines[-2])
        )
    result.assert_outcomes(passed=1)
