"""Builds the fdev test device's extension, fdev._C, next to its Python package.

    python tests/foreign_device/build.py

torch.utils.cpp_extension with ninja; the object file stays in build/fdev/ at the
repository root, so a rebuild with unchanged sources costs only the up-to-date check.
One build at a time (a file lock). ``build()`` is what the tests call: the build in a
subprocess that loads neither fdev nor any other device.
"""

from __future__ import annotations

import fcntl
import glob
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PACKAGE = HERE / "fdev"
BUILD_TEMP = REPO / "build" / "fdev"


def built_extension() -> Path | None:
    found = sorted(glob.glob(str(PACKAGE / "_C*.so")))
    return Path(found[0]) if found else None


def build() -> Path:
    """Build (or find up to date) fdev._C; returns the directory to put on sys.path."""
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    proc = subprocess.run([sys.executable, str(Path(__file__))], capture_output=True, text=True, env=env)
    if proc.returncode != 0 or built_extension() is None:
        raise RuntimeError(
            f"building fdev._C failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return HERE


def main() -> None:
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # build against torch alone
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    os.chdir(HERE)
    BUILD_TEMP.mkdir(parents=True, exist_ok=True)
    lock = open(BUILD_TEMP / "lock", "w")  # one build at a time (pytest-xdist workers, shells)
    fcntl.flock(lock, fcntl.LOCK_EX)
    setup(
        name="fdev",
        ext_modules=[CppExtension("fdev._C", ["fdev/csrc/fdev.cpp"], extra_compile_args=["-O1"])],
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
        script_args=[
            "-q",
            "build_ext",
            "--inplace",
            "--build-temp",
            str(BUILD_TEMP),
            "--build-lib",
            str(BUILD_TEMP / "lib"),
        ],
    )


if __name__ == "__main__":
    main()
