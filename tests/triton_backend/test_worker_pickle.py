"""The compile-worker -> parent hop, as inductor does it.

A fresh interpreter (the "worker") compiles a kernel defined in a module that
only it can import, wraps the result in inductor's ``TritonCompileResult``,
strips the ``JITFunction`` like ``CachingAutotuner.prepare_for_pickle`` and
pickles it. This process (the "parent") unpickles it, builds inductor's
launcher with ``make_launcher`` and runs it: the binary alone must carry the
kernel, its ``@triton.jit`` helpers and their globals.
"""

import pickle
import sys

import pytest
import torch

from tests.helpers import run_python

KERNEL_MODULE = """
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math

SCALE: tl.constexpr = tl.constexpr(0.5)


@triton.jit
def local_helper(x, y):
    return triton_helpers.maximum(x, y) * SCALE + other_helper(x)


@triton.jit
def other_helper(x):
    return libdevice.tanh(x) + tl_math.abs(x)


@triton.jit
def triton_poi_worker_kernel(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tmp1 = tl.load(in_ptr1 + xindex, xmask)
    tmp2 = local_helper(tmp0, tmp1)
    tl.store(out_ptr0 + xindex, tmp2, xmask)
"""

WORKER = r"""
import pickle, sys
sys.path.insert(0, sys.argv[1])
from flagos_triton import presence, driver as flagos_driver
presence.host_accelerator_active = lambda: True
flagos_driver._flagos_module = lambda: None
import triton
from triton.compiler.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from torch._inductor.runtime.triton_heuristics import TritonCompileResult
import flagos_worker_kernels as m

signature = {"in_ptr0": "*fp32", "in_ptr1": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32", "XBLOCK": "constexpr"}
constants = {"XBLOCK": 128}
compile_meta = {"signature": signature, "constants": constants, "configs": [{}], "device": 0,
                "device_type": "flagos", "num_warps": 4, "num_stages": 1, "debug": True, "cc": "host"}
fn = m.triton_poi_worker_kernel
binary = triton.compile(ASTSource(fn, signature, constants, {}), target=GPUTarget("flagos", "host", 32),
                        options={"num_warps": 4, "num_stages": 1, "debug": True, "sanitize_overflow": False})
cfg = triton.Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
result = TritonCompileResult(binary, cfg, compile_meta, {"grid_type": "Grid1D", "kernel_name": fn.__name__})
# CachingAutotuner.prepare_for_pickle
fn.fn = None
fn.__globals__ = None
fn.used_global_vals = None
fn._hash_lock = None
with open(sys.argv[2], "wb") as f:
    pickle.dump(result, f)
"""


def _run_worker(tmp_path):
    (tmp_path / "flagos_worker_kernels.py").write_text(KERNEL_MODULE)
    (tmp_path / "worker.py").write_text(WORKER)
    out = tmp_path / "result.pkl"
    proc = run_python(
        tmp_path / "worker.py", str(tmp_path), str(out), env={"TRITON_CACHE_DIR": str(tmp_path / "worker-cache")}
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out.read_bytes()


def _reference(a, b):
    return torch.maximum(a, b) * 0.5 + torch.tanh(a) + a.abs()


def test_worker_compiled_kernel_runs_in_parent(host_backend, tmp_path, rng):
    try:
        from torch._inductor.runtime.triton_heuristics import TritonCompileResult  # noqa: F401
    except ImportError:
        pytest.skip("this torch has no TritonCompileResult")
    payload = _run_worker(tmp_path)
    assert "flagos_worker_kernels" not in sys.modules
    result = pickle.loads(payload)
    binary = result.kernel
    assert binary.src.fn.fn is None  # stripped: the parent cannot read the kernel from its function

    launcher = result.make_launcher()  # inductor's path: _init_handles + generated launcher
    n = 1000
    a, b = torch.randn(n, generator=rng), torch.randn(n, generator=rng)
    out = torch.empty(n)
    launcher(a, b, out, n, stream=0)
    torch.testing.assert_close(out, _reference(a, b))
    assert "flagos_worker_kernels" not in sys.modules

    # the same binary through Triton's own launch path
    out2 = torch.empty(n)
    binary[(triton_cdiv(n, 128), 1, 1)](a, b, out2, n, 128, stream=0)
    torch.testing.assert_close(out2, _reference(a, b))


def test_binary_is_self_contained(host_backend, tmp_path, rng, monkeypatch):
    """Even with the helpers' module unimportable, the carried sources run."""
    payload = _run_worker(tmp_path)
    result = pickle.loads(payload)
    import importlib

    from flagos_triton import binary as flagos_binary

    real_import = importlib.import_module

    def no_triton_helpers(name, *args, **kwargs):
        if name == "torch._inductor.runtime.triton_helpers":
            raise ImportError("simulated: module not importable where the kernel runs")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(flagos_binary.importlib, "import_module", no_triton_helpers)
    flagos_binary._loaded.clear()
    program = flagos_binary.load(result.kernel.kernel)
    # local_helper uses triton_helpers.maximum: it resolved to the carried copy
    assert not isinstance(program.fn.__globals__["local_helper"].__globals__["triton_helpers"], type(sys))
    n = 300
    a, b = torch.randn(n, generator=rng), torch.randn(n, generator=rng)
    out = torch.empty(n)
    from flagos_triton import launcher as flagos_launcher

    flagos_launcher.run(program, (triton_cdiv(n, 128), 1, 1), (a, b, out, n, 128))
    torch.testing.assert_close(out, _reference(a, b))
    flagos_binary._loaded.clear()


def triton_cdiv(a, b):
    return -(a // -b)
