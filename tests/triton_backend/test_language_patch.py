"""Host launches leave ``triton.language`` as they found it.

Triton's own interpreter patches ``triton.language`` to run kernels in Python
and does not undo the patch after a helper call, which breaks the next real
compile in the process. The flagos launcher scopes its adaptation to the
launch and to the launching thread.
"""

import threading

import pytest
import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
from triton.runtime.jit import JITFunction

from flagos_triton import lang_adapter, launcher
from tests.helpers import run_python


@triton.jit
def _helper(x):
    return triton_helpers.maximum(x, tl.zeros_like(x))


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = _helper(tl.load(x_ptr + offs, mask=m))
    tl.device_assert(tl.sum(y, 0) >= 0, "negative sum")
    tl.store(out_ptr + offs, tl.cumsum(y, 0), mask=m)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3, mask=m)


SIG = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


def _snapshot():
    import triton.language.extra.cuda.libdevice as cuda_libdevice
    import triton.language.extra.libdevice as generic_libdevice

    owners = [
        tl,
        tl.core,
        tl.math,
        tl.standard,
        cuda_libdevice,
        generic_libdevice,
        tl.core.tensor,
        tl.core.dtype,
        JITFunction,
    ]
    return {(id(o), k): v for o in owners for k, v in list(vars(o).items())}


def _assert_unchanged(before):
    after = _snapshot()
    changed = [k for k in before.keys() | after.keys() if before.get(k, "<missing>") is not after.get(k, "<missing>")]
    assert not changed, f"triton.language changed by a launch: {changed[:10]}"


def _cuda_target_compiles():
    """A real GPU compile (TTIR -> PTX -> cubin with the bundled ptxas)."""
    try:
        k = triton.compile(ASTSource(scale_kernel, SIG, {"BLOCK": 128}), target=GPUTarget("cuda", 80, 32))
    except Exception as exc:  # no usable ptxas on this machine
        if "ptxas" in str(exc).lower() or isinstance(exc, (FileNotFoundError, PermissionError)):
            pytest.skip(f"cannot run ptxas here: {exc}")
        raise
    assert "cubin" in k.asm


def test_launch_restores_language_and_compiles_still_work(compile_kernel, rng):
    before = _snapshot()
    k = compile_kernel(relu_kernel, SIG, {"BLOCK": 64})
    x = torch.randn(64, generator=rng)
    out = torch.empty(64)
    k[(1, 1, 1)](x, out, 64, 64)
    torch.testing.assert_close(out, x.clamp(min=0).cumsum(0))
    assert not lang_adapter.is_installed()
    _assert_unchanged(before)
    # the builtins still demand the code generator's semantic outside a launch
    with pytest.raises(ValueError, match="_semantic"):
        tl.full([4], 0, tl.float32)
    with pytest.raises(RuntimeError, match="outside of the scope of a kernel"):
        _helper(1.0)
    # a second, real compile in the same process: a new kernel for the flagos target, then a GPU target
    k2 = compile_kernel(scale_kernel, SIG, {"BLOCK": 64})
    k2[(1, 1, 1)](x, out, 64, 64)
    torch.testing.assert_close(out, x * 3)
    _cuda_target_compiles()
    _assert_unchanged(before)


@triton.jit
def failing_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = _helper(tl.load(x_ptr + offs, mask=offs < n))
    tl.device_assert(x > 100, "boom")


def test_failed_launch_restores_language(compile_kernel):
    before = _snapshot()
    k = compile_kernel(failing_kernel, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 16}, debug=True)
    with pytest.raises(AssertionError, match="boom"):  # raised inside the launch
        k[(4, 1, 1)](torch.zeros(16), 16, 16)
    assert not lang_adapter.is_installed()
    _assert_unchanged(before)
    k3 = compile_kernel(scale_kernel, SIG, {"BLOCK": 32})
    assert k3.metadata.name == "scale_kernel"


def test_other_threads_see_unpatched_triton_during_a_launch(compile_kernel, rng):
    """While a thread is inside a launch, another thread's compile is unaffected."""
    entered, release = threading.Event(), threading.Event()

    def hold_launch_scope():
        with lang_adapter.launch_scope(launcher._semantic):
            entered.set()
            release.wait(60)

    holder = threading.Thread(target=hold_launch_scope)
    holder.start()
    try:
        assert entered.wait(60)
        assert lang_adapter.is_installed()
        k = compile_kernel(scale_kernel, SIG, {"BLOCK": 16})  # real code generation in this thread
        assert k.metadata.name == "scale_kernel"
        with pytest.raises(ValueError, match="_semantic"):
            tl.full([4], 0, tl.float32)
        _cuda_target_compiles()
    finally:
        release.set()
        holder.join(60)
    assert not lang_adapter.is_installed()


def test_import_order(tmp_path):
    """Any import order works (Triton discovers the back end while it initialises)."""
    for first in ("flagos_triton.driver", "flagos_triton.compiler", "flagos_triton.presence", "triton"):
        code = (
            f"import {first}\nimport triton.backends\n"
            "b = triton.backends.backends.get('flagos')\n"
            "assert b is None or b.driver.__name__ == 'FlagosDriver', b\n"
        )
        proc = run_python(code)
        assert proc.returncode == 0, f"import {first} first:\n{proc.stderr}"
