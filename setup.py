"""Builds torch_fl._C against the torch that is installed (no pinned bindings).

torch.utils.cpp_extension's BuildExtension compiles with ninja; the object
files live in build/ so rebuilds only recompile what changed.
"""

import glob
import os
import shutil
import subprocess
import tempfile

# Building torch_fl must not load torch_fl: an installed (editable) torch_fl
# whose extension is not built yet would make torch's backend autoload fail.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import torch
from setuptools import setup
from torch.utils import cpp_extension
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def with_cuda() -> bool:
    """The cuda accelerator builds where torch is a CUDA build and a CUDA toolkit is found.

    FLAGOS_WITH_CUDA=0 forces a host-only build, =1 insists on cuda.
    """
    wanted = os.environ.get("FLAGOS_WITH_CUDA")
    possible = torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None
    if wanted == "1" and not possible:
        raise SystemExit(
            "FLAGOS_WITH_CUDA=1 but this torch is not a CUDA build or no CUDA toolkit was found (set CUDA_HOME)."
        )
    return possible and wanted != "0"


def links_libstdcxx_dynamically(cxx: str) -> bool:
    """Does `cxx` link libstdc++ as a shared library into a shared object?

    Some toolchain wrappers link it statically. An extension with its own copy
    of libstdc++ crashes on the first exception it throws into torch (seen
    with a gcc 13 wrapper on the GPU machine: every TORCH_CHECK was a segfault).
    """
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = os.path.join(tmp, "probe.cpp"), os.path.join(tmp, "probe.so")
        with open(src, "w") as f:
            f.write('#include <string>\nstd::string probe() { throw std::string("x"); }\n')
        try:
            subprocess.run([cxx, "-shared", "-fPIC", src, "-o", lib], check=True, capture_output=True)
            dynamic = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return True  # cannot tell: leave the choice to the build
        return "libstdc++" in dynamic


def choose_cxx() -> None:
    """Replaces a CXX that links libstdc++ statically by the system's g++, or stops with why."""
    cxx = os.environ.get("CXX")
    if not cxx or links_libstdcxx_dynamically(cxx):
        return
    fallback = shutil.which("g++") if os.path.realpath(shutil.which("g++") or "") != os.path.realpath(cxx) else None
    for candidate in (fallback, "/usr/bin/g++"):
        if candidate and os.path.exists(candidate) and links_libstdcxx_dynamically(candidate):
            print(f"flagos: CXX={cxx} links libstdc++ statically; building with {candidate} instead")
            os.environ["CXX"] = candidate
            os.environ["CC"] = os.path.join(os.path.dirname(candidate), "gcc")
            return
    raise SystemExit(
        f"flagos: CXX={cxx} links libstdc++ statically, which makes every error the extension raises "
        "crash the process; set CXX to a compiler that links it as a shared library (e.g. /usr/bin/g++)."
    )


def with_distributed() -> bool:
    """The c10d backend (csrc/distributed/) builds where this torch has torch.distributed."""
    return torch.distributed.is_available()


def sources(cuda: bool):
    # One accelerator directory per back end; host is always built.
    patterns = ["csrc/runtime/*.cpp", "csrc/aten/*.cpp", "csrc/python/*.cpp", "csrc/accelerator/host/*.cpp"]
    if cuda:
        patterns.append("csrc/accelerator/cuda/*.cpp")
    if with_distributed():
        patterns.append("csrc/distributed/*.cpp")
    return sorted(f for p in patterns for f in glob.glob(os.path.join(ROOT, p)))


def extension():
    choose_cxx()
    cuda = with_cuda()
    kind = CUDAExtension if cuda else CppExtension
    return kind(
        name="torch_fl._C",
        sources=[os.path.relpath(s, ROOT) for s in sources(cuda)],
        include_dirs=[os.path.join(ROOT, "csrc", "include"), os.path.join(ROOT, "csrc")],
        define_macros=([("FLAGOS_WITH_CUDA", "1")] if cuda else [])
        + ([("FLAGOS_WITH_DISTRIBUTED", "1")] if with_distributed() else []),
        extra_compile_args={"cxx": ["-O2", "-Wall", "-Wno-unused-parameter"]},
    )


# `make` registers the package (entry points) with FLAGOS_SKIP_EXT=1 and then
# builds the extension in place, which ninja keeps incremental; a plain
# `pip install .` builds it here.
SKIP_EXT = os.environ.get("FLAGOS_SKIP_EXT") == "1"

setup(
    ext_modules=[] if SKIP_EXT else [extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
