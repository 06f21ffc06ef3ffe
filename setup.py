"""Builds torch_fl._C against the torch that is installed (no pinned bindings).

torch.utils.cpp_extension's BuildExtension compiles with ninja; the object
files live in build/ so rebuilds only recompile what changed.
"""

import glob
import os

# Building torch_fl must not load torch_fl: an installed (editable) torch_fl
# whose extension is not built yet would make torch's backend autoload fail.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))


def sources():
    # One accelerator directory per back end; only host is built here (the
    # cuda accelerator joins when a CUDA toolkit and a CUDA torch are present).
    patterns = ["csrc/runtime/*.cpp", "csrc/aten/*.cpp", "csrc/python/*.cpp", "csrc/accelerator/host/*.cpp"]
    return sorted(f for p in patterns for f in glob.glob(os.path.join(ROOT, p)))


# `make` registers the package (entry points) with FLAGOS_SKIP_EXT=1 and then
# builds the extension in place, which ninja keeps incremental; a plain
# `pip install .` builds it here.
SKIP_EXT = os.environ.get("FLAGOS_SKIP_EXT") == "1"

setup(
    ext_modules=[]
    if SKIP_EXT
    else [
        CppExtension(
            name="torch_fl._C",
            sources=[os.path.relpath(s, ROOT) for s in sources()],
            include_dirs=[os.path.join(ROOT, "csrc", "include"), os.path.join(ROOT, "csrc")],
            extra_compile_args={"cxx": ["-O2", "-Wall", "-Wno-unused-parameter"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
