"""Is the flagos *host* accelerator the one this process runs on?

Triton calls the driver's ``is_active()`` (and through it this function) in
every process that picks a driver, compile workers included. The answer is
yes only where the flagos runtime is already loaded: this package is a
top-level one precisely so that Triton's back-end discovery does not import
torch_fl (and torch) into every process that imports triton. A compile
worker sees flagos when torch autoloads torch_fl (the ``torch.backends``
entry point) or when it inherited it (fork). Tests monkeypatch
``host_accelerator_active``.

Triton allows one active GPU driver per process. Where a real GPU is
available (CUDA or ROCm through torch.cuda), its driver keeps the process: an
installed flagos must never break a machine's own Triton kernels. Compiling
for the flagos host accelerator on such a machine needs the GPU hidden
(``CUDA_VISIBLE_DEVICES=""``). On the cuda accelerator flagos kernels are
CUDA kernels: the ``flagos`` compiler hands them to Triton's NVIDIA back end
(``compiler.FlagosBackend.__new__``) and the NVIDIA driver launches them.
"""

import sys


def _gpu_available() -> bool:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_available())
    except Exception:
        return False


def accelerator_name():
    """The flagos accelerator of this process, or None where torch_fl is not loaded."""
    runtime = sys.modules.get("torch_fl._C")
    name_fn = getattr(runtime, "_accelerator_name", None)
    if name_fn is None:
        return None
    try:
        return name_fn()
    except Exception:
        return None


def cuda_accelerator_active() -> bool:
    """True when flagos runs on the cuda accelerator here: its kernels are CUDA kernels."""
    return accelerator_name() == "cuda"


def host_accelerator_active() -> bool:
    """True when ``torch_fl._C`` is loaded, reports the accelerator ``"host"``, and no GPU claims Triton."""
    return accelerator_name() == "host" and not _gpu_available()
