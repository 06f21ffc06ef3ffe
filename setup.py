"""Builds torch_fl._C against the torch that is installed (no pinned bindings).

torch.utils.cpp_extension's BuildExtension compiles with ninja; the object
files live in build/ so rebuilds only recompile what changed.
"""

import glob
import os

# Building torch_fl must not load torch_fl: an installed (editable) torch_fl
# whose extension is not built yet would make torch's backend autoload fail.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import torch  # noqa: E402
from setuptools import setup  # noqa: E402
from torch.utils import cpp_extension  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension  # noqa: E402

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


def sources(cuda: bool):
    # One accelerator directory per back end; host is always built.
    patterns = ["csrc/runtime/*.cpp", "csrc/aten/*.cpp", "csrc/python/*.cpp", "csrc/accelerator/host/*.cpp"]
    if cuda:
        patterns.append("csrc/accelerator/cuda/*.cpp")
    return sorted(f for p in patterns for f in glob.glob(os.path.join(ROOT, p)))


def extension():
    cuda = with_cuda()
    kind = CUDAExtension if cuda else CppExtension
    return kind(
        name="torch_fl._C",
        sources=[os.path.relpath(s, ROOT) for s in sources(cuda)],
        include_dirs=[os.path.join(ROOT, "csrc", "include"), os.path.join(ROOT, "csrc")],
        define_macros=[("FLAGOS_WITH_CUDA", "1")] if cuda else [],
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
