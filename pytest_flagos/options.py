"""Command-line options, ini keys and environment fallbacks of the plugin.

Each setting can come from three places; the first one that is set wins:
the command line, the environment variable, the ini key. This module never
imports torch: the plugin is auto-loaded by every pytest run and must stay
inert (and cheap) when no device is given.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable

import pytest

WORKER_START_METHODS = ("subprocess", "fork", "spawn")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclasses.dataclass(frozen=True)
class Option:
    flag: str  # --flagos-device
    env: str  # FLAGOS_DEVICE
    help: str
    kind: str = "string"  # string | path | bool | int | choice
    metavar: str | None = None

    @property
    def dest(self) -> str:  # flagos_device: the argparse dest and the ini key
        return self.flag.lstrip("-").replace("-", "_")


OPTIONS = (
    Option(
        "--flagos-device",
        "FLAGOS_DEVICE",
        "device under test: cpu, cuda[:i], xpu[:i], mps, flagos[:i] or a registered "
        "PrivateUse1 name. Without it the plugin does nothing.",
        metavar="DEVICE",
    ),
    Option(
        "--flagos-device-module",
        "FLAGOS_DEVICE_MODULE",
        "Python module to import before resolving the device (a vendor package that registers its PrivateUse1 device).",
        metavar="MODULE",
    ),
    Option(
        "--flagos-expectations",
        "FLAGOS_EXPECTATIONS",
        "TOML file of expected failures and skips for this device.",
        kind="path",
        metavar="FILE",
    ),
    Option(
        "--flagos-report",
        "FLAGOS_REPORT",
        "write a JSON conformance report to PATH (not .md) and a Markdown summary beside it (PATH with .md).",
        kind="path",
        metavar="PATH",
    ),
    Option(
        "--flagos-repro-dir",
        "FLAGOS_REPRO_DIR",
        "directory for standalone repro scripts of failing compiled-vs-eager checks.",
        kind="path",
        metavar="DIR",
    ),
    Option(
        "--flagos-strict",
        "FLAGOS_STRICT",
        "an unavailable device is an error instead of skipping everything, and "
        "expected failures that pass fail the run.",
        kind="bool",
    ),
    Option(
        "--flagos-compile-threads",
        "FLAGOS_COMPILE_THREADS",
        "inductor compile threads (size of the compile worker pool), 1 to max(32, 4 x CPU count); default: inductor's.",
        kind="int",
        metavar="N",
    ),
    Option(
        "--flagos-worker-start",
        "FLAGOS_WORKER_START",
        "start method of inductor's compile workers: " + ", ".join(WORKER_START_METHODS) + "; default: inductor's.",
        kind="choice",
        metavar="METHOD",
    ),
)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The plugin's settings after command line, environment and ini are merged."""

    device: str | None = None
    device_module: str | None = None
    expectations: Path | None = None
    report: Path | None = None
    repro_dir: Path | None = None
    strict: bool = False
    compile_threads: int | None = None
    worker_start: str | None = None
    # where each setting came from, for messages: {"device": "--flagos-device"}
    sources: dict[str, str] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def active(self) -> bool:
        return bool(self.device)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("flagos", "flagos: compile conformance for inductor devices")
    for opt in OPTIONS:
        help_text = f"{opt.help} [env {opt.env}, ini {opt.dest}]"
        if opt.kind == "bool":
            group.addoption(opt.flag, action="store_true", default=None, dest=opt.dest, help=help_text)
        else:
            group.addoption(opt.flag, action="store", default=None, dest=opt.dest, metavar=opt.metavar, help=help_text)
        parser.addini(opt.dest, help_text, type="string", default="")


def _lookup(config: pytest.Config, opt: Option, early: bool = False) -> tuple[Any, str, Path] | None:
    """(raw value, where it came from, directory relative paths are taken from).

    early: before pytest's full option parse (pytest_load_initial_conftests), when
    the command line is only in known_args_namespace."""
    invocation_dir = Path(config.invocation_params.dir)
    value = getattr(config.known_args_namespace, opt.dest, None) if early else config.getoption(opt.dest)
    if value is not None:
        return value, opt.flag, invocation_dir
    value = os.environ.get(opt.env)
    if value is not None and value != "":
        return value, opt.env, invocation_dir
    value = config.getini(opt.dest)
    if value not in (None, ""):
        ini_dir = config.inipath.parent if config.inipath else config.rootpath
        return value, f"ini {opt.dest}", ini_dir
    return None


def _as_bool(raw: Any, where: str) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise pytest.UsageError(f"flagos: {where}={raw!r} is not a boolean (use 1/0, true/false)")


def max_compile_threads() -> int:
    """The most compile workers a run may ask for. Each worker is a Python process with torch
    imported (hundreds of MiB): beyond a few per core they only cost memory, and compiles do
    not get faster. Never below 32 (inductor's own default ceiling), so a CI setting that
    is valid on one machine stays valid on a smaller one."""
    return max(32, 4 * (os.cpu_count() or 1))


def _as_int(raw: Any, where: str) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise pytest.UsageError(f"flagos: {where}={raw!r} is not an integer") from None
    if value < 1:
        raise pytest.UsageError(f"flagos: {where}={value} must be at least 1")
    cap = max_compile_threads()
    if value > cap:
        raise pytest.UsageError(
            f"flagos: {where}={value} is too many compile workers: at most {cap} "
            f"(max(32, 4 x {os.cpu_count() or 1} CPUs)) on this machine"
        )
    return value


def _as_string(raw: Any, where: str) -> str:
    value = str(raw).strip()
    if not value:
        raise pytest.UsageError(f"flagos: {where} is empty; give a value or leave the option out")
    return value


def _as_path(raw: Any, where: str, base: Path) -> Path:
    text = str(raw).strip()
    if not text:
        raise pytest.UsageError(f"flagos: {where} is empty; give a path or leave the option out")
    try:
        return (base / Path(text)).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, an embedded NUL
        raise pytest.UsageError(f"flagos: {where}={text!r} is not a usable path: {exc}") from None


def _as_choice(raw: Any, where: str) -> str:
    value = str(raw).strip()
    if value not in WORKER_START_METHODS:
        raise pytest.UsageError(
            f"flagos: {where}={value!r} is not a worker start method "
            f"(expected one of {', '.join(WORKER_START_METHODS)})"
        )
    return value


_CONVERTERS: dict[str, Callable[[Any, str, Path], Any]] = {
    "string": lambda raw, where, base: _as_string(raw, where),
    "path": _as_path,
    "bool": lambda raw, where, base: _as_bool(raw, where),
    "int": lambda raw, where, base: _as_int(raw, where),
    "choice": lambda raw, where, base: _as_choice(raw, where),
}


def read_settings(config: pytest.Config) -> Settings:
    """Merge command line, environment and ini; raise UsageError on a bad value."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        found = _lookup(config, opt)
        if found is None:
            continue
        raw, where, base = found
        field = opt.dest[len("flagos_") :]
        values[field] = _CONVERTERS[opt.kind](raw, where, base)
        sources[field] = where
    return Settings(**values, sources=sources)


def early_device_spec(config: pytest.Config) -> str | None:
    """--flagos-device (command line, environment or ini) before the full option parse."""
    found = _lookup(config, OPTIONS[0], early=True)
    return None if found is None else found[0]


def device_given(config: pytest.Config) -> bool:
    """Whether a device was given at all: the plugin stays inert (and validates nothing
    else) without one, so FLAGOS_* variables cannot break an unrelated project's run."""
    return _lookup(config, OPTIONS[0]) is not None
