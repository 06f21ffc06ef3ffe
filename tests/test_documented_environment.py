"""Every FLAGOS_* environment variable that the shipped code reads is named in the README.

The variables are found the way a reader would: a quoted "FLAGOS_..." literal in the packages,
the C++ sources, setup.py and the conformance areas. The C++ macros are bare words, so they are
not caught; the one quoted name that is not a variable is listed below with the reason.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["torch_fl", "flagos_autoload", "flagos_triton", "pytest_flagos", "csrc", "conformance", "setup.py"]
SUFFIXES = {".py", ".cpp", ".h"}
NOT_VARIABLES = {
    "FLAGOS_WITH_DISTRIBUTED": "a C++ macro that setup.py defines, not read from the environment",
}
QUOTED = re.compile(r"""["'](FLAGOS_[A-Z0-9_]+)["']""")


def _source_files():
    for name in SOURCES:
        path = ROOT / name
        if path.is_file():
            yield path
        else:
            yield from (p for p in sorted(path.rglob("*")) if p.suffix in SUFFIXES and "__pycache__" not in p.parts)


def variables_read_by_the_code() -> dict[str, str]:
    """{variable: first file that names it}."""
    found = {}
    for path in _source_files():
        for name in QUOTED.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return {name: where for name, where in found.items() if name not in NOT_VARIABLES}


def test_the_scan_finds_the_variables_of_every_layer():
    # One per layer: the C++ runtime, the Python runtime, the build, the plugin, the op area.
    found = variables_read_by_the_code()
    for name in ["FLAGOS_ACCELERATOR", "FLAGOS_AUTOLOAD", "FLAGOS_WITH_CUDA", "FLAGOS_DEVICE", "FLAGOS_OPS_TIER"]:
        assert name in found, name


def test_every_variable_the_code_reads_is_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`(FLAGOS_[A-Z0-9_]+)", readme))
    missing = {name: where for name, where in variables_read_by_the_code().items() if name not in documented}
    assert not missing, "README.md's Configuration section lacks: " + ", ".join(
        f"{name} (read in {where})" for name, where in sorted(missing.items())
    )


def test_the_readme_names_no_variable_the_code_does_not_read():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = set(re.findall(r"`(FLAGOS_[A-Z0-9_]+)", readme)) - set(variables_read_by_the_code())
    assert not stale, f"README.md documents variables nothing reads: {sorted(stale)}"
