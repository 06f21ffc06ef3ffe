"""What a flagos graph in inductor's FX graph cache was compiled by, beyond torch itself.

Inductor keys its cache by the graph, its inputs, inductor's config and torch's own sources, not by
the code of a device that plugs into it. A graph cached by an older torch_fl would come back with
that version's decisions (a CUDA graph that version declined to record, code that version
generated), and one compiled for the host accelerator would come back on the cuda accelerator.
torch_fl's compile code, its Triton back end and the accelerator name therefore go into the key,
and whether the generated code may call flagos's matmul kernels directly (it may not where a kernel
was registered over one of them: that kernel must run).
"""

import functools
import hashlib
import importlib.util
from pathlib import Path

import torch

from .. import _C


def _packages() -> list[Path]:
    triton_back_end = importlib.util.find_spec("flagos_triton")
    found = [Path(triton_back_end.origin).parent] if triton_back_end and triton_back_end.origin else []
    return [Path(__file__).resolve().parent, *found]


def compile_identity() -> str:
    """A digest of the accelerator's name and every Python source of torch_fl.compile and flagos_triton,
    and whether compiled code's extern matmuls may call flagos's kernels directly; asked per cache key."""
    matmuls = "direct matmuls" if _C._compiled_matmul_kernels_unchanged() else "dispatched matmuls"
    return f"{_sources_digest(torch.flagos.accelerator_name())}:{matmuls}"


@functools.cache
def _sources_digest(accelerator_name: str) -> str:
    digest = hashlib.sha256(accelerator_name.encode())
    for package in _packages():
        for source in sorted(package.rglob("*.py")):
            digest.update(source.relative_to(package.parent).as_posix().encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()
