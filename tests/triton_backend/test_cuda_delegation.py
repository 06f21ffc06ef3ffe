"""On the cuda accelerator the ``flagos`` target is compiled by Triton's NVIDIA back end.

Inductor asks Triton for target ``flagos`` (the device's name) with the
device's compute capability. On the cuda accelerator the result must be an
ordinary CUDA kernel (PTX + cubin for that arch): the NVIDIA driver loads and
launches it on the flagos stream. No GPU is needed to compile, so this runs
here with the cuda accelerator stood in for by ``presence``.
"""

import pytest
import triton
import triton.language as tl
from triton.backends import backends
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource, make_backend

from flagos_triton import presence
from flagos_triton.compiler import FlagosBackend

nvidia = backends.get("nvidia")
pytestmark = pytest.mark.skipif(nvidia is None, reason="this Triton has no NVIDIA back end")


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@pytest.fixture
def on_cuda_accelerator(monkeypatch, tmp_path):
    monkeypatch.setattr(presence, "accelerator_name", lambda: "cuda")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))


def test_host_accelerator_keeps_the_flagos_back_end(monkeypatch):
    monkeypatch.setattr(presence, "accelerator_name", lambda: "host")
    assert type(make_backend(GPUTarget("flagos", "host", 32))) is FlagosBackend


def test_a_process_without_torch_fl_refuses_to_guess_the_accelerator(monkeypatch):
    # A subprocess compile worker with autoload off: compiling a host binary
    # there for a GPU parent ended as "device kernel image is invalid".
    monkeypatch.setattr(presence, "accelerator_name", lambda: None)
    with pytest.raises(RuntimeError, match="has not loaded torch_fl"):
        make_backend(GPUTarget("flagos", 90, 32))


def test_flagos_target_becomes_the_nvidia_back_end_for_the_same_arch(on_cuda_accelerator):
    backend = make_backend(GPUTarget("flagos", 90, 32))
    assert type(backend) is nvidia.compiler
    assert backend.target == GPUTarget("cuda", 90, 32)
    assert backend.binary_ext == "cubin"


def test_flagos_target_compiles_to_a_cubin_for_the_gpu(on_cuda_accelerator):
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
    kernel = triton.compile(ASTSource(add_kernel, signature, {"BLOCK": 128}), target=GPUTarget("flagos", 90, 32))
    assert ".target sm_90" in kernel.asm["ptx"]
    assert kernel.asm["cubin"][:4] == b"\x7fELF"
    # What the parent does with a kernel compiled in a worker: metadata naming
    # target flagos must map back to the NVIDIA back end's binary.
    assert kernel.metadata.target.backend == "flagos"
    assert kernel.kernel == kernel.asm["cubin"]
