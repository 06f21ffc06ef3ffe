#!/usr/bin/env python3
"""The accelerator manifests of CI: ``.github/configs/<name>.yml``, one per accelerator.

Every workflow job that runs the conformance suite reads its manifest through this script,
and so does a developer who wants to run exactly what CI runs::

    python3 .github/scripts/accelerators.py validate [FILE ...]     # all configs by default
    python3 .github/scripts/accelerators.py list
    python3 .github/scripts/accelerators.py matrix [all | NAME[,NAME ...]] [--shards N]
    python3 .github/scripts/accelerators.py env NAME                # KEY=VALUE lines
    python3 .github/scripts/accelerators.py setup NAME              # the set-up script
    python3 .github/scripts/accelerators.py pytest NAME [--shard K/N] [ARG ...]   # the suite

``validate`` prints one line per problem (``FILE: KEY: what is wrong``) and exits 1 if there
is any; the other commands refuse an invalid config the same way. ``pytest`` runs the
config's command from the repository root, with the config's ``env``, and with
``$VENV/bin`` (default ``.venv``, the Makefile's) first on ``PATH``; extra arguments are
appended (``-x``, ``-k conv``).

Shards: ``matrix --shards N`` gives N entries per config, each with ``shard`` (``K/N``), its own
``report`` (``NAME.shard-K-of-N.json``, which matrix_summary.py merges back into one row) and
``artifact`` name; ``pytest NAME --shard K/N`` runs shard K of N with pytest-split
(``--splits N --group K``) and writes that shard's report.

Schema (class Manifest below; unknown keys are errors)::

    name: "flagos (host accelerator)"      # display name                          required
    runs-on: [ubuntu-latest]                 # runner labels (a list or one label)  required
    python: "3.11"                           # actions/setup-python version         optional
    container: "nvcr.io/nvidia/pytorch:..."  # job container image                  optional
    container-options: "--gpus all"          # docker options; needs container      optional
    setup: .github/scripts/setup/host.sh     # run with bash before the build       required
    env:                                     # for set-up, build and suite          optional
      FLAGOS_ACCELERATOR: host
    pytest: pytest -p flagos --flagos-device=flagos conformance/ --flagos-strict ...
                                             # one line; see check_pytest()         required
    timeout-minutes: 90                      # 1 .. 1440                            required

The files are read with PyYAML's safe loader (Python 3.10+ and PyYAML). Duplicate keys, and
plain scalars that YAML 1.1 reads as something other than the string they look like (``on``,
``yes``, ``3.10``, ``010``, dates), are refused: quote such values.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import shlex
import subprocess
import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import yaml
except ImportError:  # a bare runner's python3 may lack it: one line, not a traceback
    sys.exit("accelerators.py needs PyYAML: pip install pyyaml")

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = Path(".github/configs")

TIMEOUT_RANGE = (1, 1440)
# docker run options for a container without any: an empty `options:` is rejected by some
# runner versions (actions/runner#4204), and --init reaps the compile workers' children.
DEFAULT_CONTAINER_OPTIONS = "--init"

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEVICE_RE = re.compile(r"^[a-z_][a-z0-9_]*(:[0-9]+)?$")
PYTHON_RE = re.compile(r"^3\.[0-9]+(\.[0-9]+)?$")
SUITE = "conformance"

# --flagos-* options of the plugin (pytest_flagos/options.py): which take a value
FLAGOS_VALUE_OPTIONS = {
    "--flagos-device",
    "--flagos-device-module",
    "--flagos-expectations",
    "--flagos-report",
    "--flagos-repro-dir",
    "--flagos-compile-threads",
    "--flagos-worker-start",
}
FLAGOS_BOOL_OPTIONS = {"--flagos-strict"}
SHELL_TOKENS = {";", "&&", "||", "|", "&", ">", ">>", "<", "2>", "2>&1", "(", ")"}


class ConfigError(Exception):
    """A problem found while reading a config; `line` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


# --------------------------------------------------------------------------------------
# YAML
# --------------------------------------------------------------------------------------

# Plain scalars that PyYAML (YAML 1.1) resolves to something other than the string they look
# like: `on` is true, `3.10` is 3.1, `010` is 8. They are refused, so a config says what it means.
_SURPRISES = {
    "tag:yaml.org,2002:bool": "a YAML 1.1 boolean",
    "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:timestamp": "a date",
}
# what YAML 1.1 and 1.2 both read as written: decimal integers and true/false
_AS_WRITTEN_RE = re.compile(r"[-+]?(0|[1-9][0-9]*)|true|True|TRUE|false|False|FALSE")


class _Loader(yaml.SafeLoader):
    """The safe loader without aliases (*name): a value that appears twice, or inside itself."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            raise ConfigError(
                "aliases (*name) are not read here: write the value out", self.peek_event().start_mark.line + 1
            )
        return super().compose_node(parent, index)


def _check_nodes(node: yaml.Node) -> None:
    """Refuse duplicate keys (PyYAML keeps the last one silently) and surprising plain scalars."""
    if isinstance(node, yaml.ScalarNode):
        what = _SURPRISES.get(node.tag)
        if what and node.style is None and not _AS_WRITTEN_RE.fullmatch(node.value):
            raise ConfigError(f"{node.value!r} reads as {what} in YAML: quote it", node.start_mark.line + 1)
    elif isinstance(node, yaml.MappingNode):
        keys = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in keys:
                    raise ConfigError(f"duplicate key {key.value!r}", key.start_mark.line + 1)
                keys.add(key.value)
            _check_nodes(key)
            _check_nodes(value)
    else:
        for item in node.value:
            _check_nodes(item)


def parse_yaml(text: str) -> Any:
    """The one YAML document in `text`, read and checked as above; raise ConfigError."""
    try:
        loader = _Loader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        # the line where the broken construct begins (the one to fix), then where PyYAML gave up
        lines = [mark.line + 1 for mark in (exc.context_mark, exc.problem_mark) if mark]
        what = ", ".join(filter(None, (exc.context, exc.problem)))
        if len(set(lines)) > 1:
            what += f" (line {lines[1]})"
        raise ConfigError(f"not valid YAML: {what}", lines[0] if lines else None) from None
    except yaml.YAMLError as exc:  # unmarked: a character YAML does not allow
        raise ConfigError(f"not valid YAML: {' '.join(str(exc).split())}") from None


# --------------------------------------------------------------------------------------
# The schema
# --------------------------------------------------------------------------------------


def _key(message: str, *, required: bool = False, valid: Callable[[Any], Any] = lambda value: True) -> Any:
    """A field of Manifest. `message` (which may name the {value!r}) is the one problem line of a
    value of another type than the field's, or one that is not `valid`."""
    return dataclasses.field(default=None, metadata={"message": message, "required": required, "valid": valid})


def _labels(value: str | list[str]) -> bool:
    return all(label.strip() for label in ([value] if isinstance(value, str) else value))


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The keys of a config, one field each (`runs_on` is the key runs-on), the required ones first.
    check_manifest checks each value against the field's type and `_key`; a required key's value
    counts as missing when it is null, "" or []."""

    name: str = _key("must be a non-empty string", required=True, valid=str.strip)
    runs_on: str | list[str] = _key(  # noqa: RUF009 (_key is a dataclasses.field, evaluated once by design)
        "must be a runner label or a list of labels (strings)", required=True, valid=_labels
    )
    setup: str = _key("must be the path of a script", required=True)
    pytest: str = _key("a command is required (a string)", required=True)  # the command: check_pytest
    timeout_minutes: int = _key(
        "must be a whole number of minutes, {}..{}".format(*TIMEOUT_RANGE),
        required=True,
        valid=lambda value: TIMEOUT_RANGE[0] <= value <= TIMEOUT_RANGE[1],
    )
    python: str | None = _key('{value!r} is not a quoted Python version such as "3.11"', valid=PYTHON_RE.match)
    container: str | None = _key(
        "must be an image name (omit the key for no container)",
        valid=lambda value: value.strip() and " " not in value.strip(),
    )
    container_options: str | None = _key("must be a string of docker options", valid=str.strip)
    # Its entries: check_manifest.
    env: dict[str, Any] | None = _key("must be a mapping of VARIABLE: value")  # noqa: RUF009 (a field)


KEYS = tuple(field.name.replace("_", "-") for field in dataclasses.fields(Manifest))


def _has_type(value: Any, hint: Any) -> bool:
    """isinstance() for the annotations of Manifest: unions, list[X], dict[K, V], Any."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_has_type(value, arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_has_type(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _has_type(k, args[0]) and _has_type(v, args[1]) for k, v in value.items()
        )
    if hint is Any:
        return True
    # a bool is an int to Python, but `timeout-minutes: true` is no number of minutes
    return isinstance(value, hint) and not (hint is int and isinstance(value, bool))


def check_manifest(data: dict[Any, Any], root: Path) -> tuple[Manifest, list[str]]:
    """(a Manifest of the keys that are valid, a 'KEY: message' line per problem)."""
    problems: list[str] = []
    for key in data:
        if key not in KEYS:
            close = difflib.get_close_matches(str(key), KEYS, n=1)
            problems.append(f"{key}: unknown key" + (f" (did you mean {close[0]}?)" if close else ""))
    hints = typing.get_type_hints(Manifest)
    valid: dict[str, Any] = {}
    for field in dataclasses.fields(Manifest):
        key = field.name.replace("_", "-")
        value = data.get(key)
        if value is None or (field.metadata["required"] and value in ("", [])):
            if field.metadata["required"]:
                problems.append(f"{key}: required")
        elif _has_type(value, hints[field.name]) and field.metadata["valid"](value):
            valid[field.name] = value
        else:
            problems.append(f"{key}: " + field.metadata["message"].format(value=value))
    manifest = Manifest(**valid)

    # what a value's type cannot tell
    if manifest.container_options is not None and data.get("container") is None:
        problems.append("container-options: given without a container")
    if manifest.setup is not None:
        path, why = _repo_file(manifest.setup, root)
        if path is None:
            problems.append(f"setup: {why}")
        elif not path.is_file():
            problems.append(f"setup: {manifest.setup} does not exist")
    for var, value in (manifest.env or {}).items():
        if not ENV_NAME_RE.match(var):
            problems.append(f"env: {var!r} is not a variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            problems.append(f"env: {var}: the value must be a string (quote it)")
        elif "\n" in str(value):
            problems.append(f"env: {var}: the value must be one line")
    return manifest, problems


# --------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Config:
    name: str  # the file stem: cpu, flagos-host, ...
    path: Path
    manifest: Manifest
    argv: list[str]  # the pytest command, split
    flagos: dict[str, str | bool]  # its --flagos-* options

    @property
    def runs_on(self) -> list[str]:
        labels = self.manifest.runs_on
        return [labels] if isinstance(labels, str) else list(labels)

    @property
    def env(self) -> dict[str, str]:
        return {k: str(v) for k, v in (self.manifest.env or {}).items()}

    @property
    def report(self) -> str:
        return str(self.flagos["--flagos-report"])

    @property
    def report_markdown(self) -> str:
        return str(Path(self.report).with_suffix(".md"))

    def shard_report(self, shard: tuple[int, int]) -> str:
        """The report of shard K of N (the config's own report when N is 1)."""
        k, n = shard
        if n == 1:
            return self.report
        path = Path(self.report)
        return str(path.with_name(f"{path.stem}.shard-{k}-of-{n}{path.suffix}"))

    def shard_argv(self, shard: tuple[int, int]) -> list[str]:
        """The command of shard K of N: pytest-split's options and the shard's report."""
        k, n = shard
        if n == 1:
            return list(self.argv)
        argv = [
            f"--flagos-report={self.shard_report(shard)}" if a.startswith("--flagos-report=") else a for a in self.argv
        ]
        return [*argv, "--splits", str(n), "--group", str(k)]

    def matrix_entries(self, shards: int) -> list[dict[str, Any]]:
        out = []
        for k in range(1, shards + 1):
            entry = self.matrix_entry()
            report = self.shard_report((k, shards))
            entry.update(
                shard=f"{k}/{shards}",
                report=report,
                report_md=str(Path(report).with_suffix(".md")),
                artifact=f"conformance-{self.name}" + (f"-shard-{k}-of-{shards}" if shards > 1 else ""),
            )
            out.append(entry)
        return out

    def matrix_entry(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "config": self.name,
            "name": m.name,
            "runs_on": self.runs_on,
            "python": m.python or "",
            "container": m.container or "",
            # never empty: see DEFAULT_CONTAINER_OPTIONS (unused when there is no container)
            "container_options": m.container_options or DEFAULT_CONTAINER_OPTIONS,
            "timeout_minutes": m.timeout_minutes,
            "device": self.flagos["--flagos-device"],
            "report": self.report,
            "report_md": self.report_markdown,
        }


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _repo_file(value: str, root: Path) -> tuple[Path | None, str | None]:
    """(the path inside the repository, or None with the reason)."""
    p = Path(value)
    if p.is_absolute() or ".." in p.parts:
        return None, f"{value} must be a path inside the repository, relative to its root"
    return root / p, None


def parse_flagos_options(argv: list[str]) -> tuple[dict[str, str | bool], list[str], list[str]]:
    """(--flagos-* options, other tokens, problems) of a split pytest command."""
    options: dict[str, str | bool] = {}
    rest: list[str] = []
    problems: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, eq, value = token.partition("=")
        if flag.startswith("--flagos-"):
            if flag in FLAGOS_BOOL_OPTIONS:
                if eq:
                    problems.append(f"{flag} takes no value")
                value_out: str | bool = True
            elif flag in FLAGOS_VALUE_OPTIONS:
                if not eq:
                    if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                        problems.append(f"{flag} needs a value ({flag}=...)")
                        i += 1
                        continue
                    i += 1
                    value = argv[i]
                if not value:
                    problems.append(f"{flag} has an empty value")
                value_out = value
            else:
                close = difflib.get_close_matches(flag, sorted(FLAGOS_VALUE_OPTIONS | FLAGOS_BOOL_OPTIONS), n=1)
                problems.append(f"unknown option {flag}" + (f" (did you mean {close[0]}?)" if close else ""))
                i += 1
                continue
            if flag in options:
                problems.append(f"{flag} is given twice")
            options[flag] = value_out
        else:
            rest.append(token)
        i += 1
    return options, rest, problems


def check_pytest(command: str, name: str, root: Path) -> tuple[list[str], dict[str, Any], list[str]]:
    """Check the `pytest` value; return (argv, --flagos-* options, problems).

    The command must be `pytest -p flagos --flagos-device=DEVICE conformance/
    --flagos-expectations=FILE --flagos-report=PATH.json --flagos-strict [more pytest
    options]`. It runs without a shell. The expectations file must exist, be TOML, and be
    the device's (its name is the device type or the config's name). --flagos-strict is
    required: without it a runner that lacks the device skips every test and passes.
    """
    if not command.strip():
        return [], {}, ["a command is required (a string)"]
    if "\n" in command:
        return [], {}, ["the command must be one line"]
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return [], {}, [f"cannot split the command: {exc}"]
    problems: list[str] = []
    for token in argv:
        if token in SHELL_TOKENS or "$(" in token or "`" in token or token.startswith("$"):
            problems.append(
                f"{token!r} is shell syntax, but the command runs without a shell "
                "(set-up goes in `setup`, variables in `env`)"
            )
    if argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
        problems.append(f"{argv[0]!r}: put environment variables in `env`")
    if not argv or argv[0] != "pytest":
        problems.append(f"the command must start with `pytest` (it starts with {argv[0] if argv else 'nothing'!r})")
        return argv, {}, problems
    args = argv[1:]
    if not any(args[i : i + 2] == ["-p", "flagos"] for i in range(len(args))) and "-pflagos" not in args:
        problems.append("`-p flagos` is missing (CI loads the plugin explicitly)")
    flagos, rest, option_problems = parse_flagos_options(args)
    problems += option_problems

    device = flagos.get("--flagos-device")
    device_type = None
    if device is None:
        problems.append("--flagos-device=DEVICE is missing")
    elif not isinstance(device, str) or not DEVICE_RE.match(device):
        problems.append(f"--flagos-device={device} is not a device (type or type:index, e.g. cpu, cuda:0, flagos)")
    else:
        device_type = device.split(":")[0]

    expectations = flagos.get("--flagos-expectations")
    if expectations is None:
        problems.append(
            "--flagos-expectations=FILE is missing (every accelerator has one; an empty file means no known failures)"
        )
    elif isinstance(expectations, str):
        path, why = _repo_file(expectations, root)
        if path is None:
            problems.append(f"--flagos-expectations: {why}")
        elif not path.is_file():
            problems.append(f"--flagos-expectations: {expectations} does not exist")
        elif path.suffix != ".toml":
            problems.append(f"--flagos-expectations: {expectations} is not a .toml file")
        else:
            if device_type and path.stem not in (device_type, name):
                problems.append(
                    f"--flagos-expectations: {expectations} is not the expectations file of "
                    f"device {device_type!r} (expected {path.parent.name}/{device_type}.toml "
                    f"or {path.parent.name}/{name}.toml)"
                )
            problems += [f"--flagos-expectations: {expectations}: {p}" for p in check_expectations_file(path)]

    report = flagos.get("--flagos-report")
    if report is None:
        problems.append("--flagos-report=PATH.json is missing (CI uploads the report)")
    elif isinstance(report, str):
        path, why = _repo_file(report, root)
        if path is None:
            problems.append(f"--flagos-report: {why}")
        elif path.suffix != ".json":
            problems.append(f"--flagos-report: {report} must end in .json (the Markdown summary is written beside it)")

    if "--flagos-strict" not in flagos:
        problems.append(
            "--flagos-strict is missing (without it a runner that lacks the device skips every test and the job passes)"
        )

    suite_args = []
    for token in rest:
        if token.startswith("-") or "=" in token:
            continue
        target = token.split("::", 1)[0]
        if target.rstrip("/") == SUITE or target.startswith(SUITE + "/"):
            suite_args.append(target)
            path, why = _repo_file(target, root)
            if path is None:
                problems.append(why or target)
            elif not path.exists():
                problems.append(f"{target} does not exist")
    if not suite_args:
        problems.append(f"the command does not run the suite: add {SUITE}/")
    return argv, flagos, problems


def check_expectations_file(path: Path) -> list[str]:
    """The expectations file parses as TOML with only [[xfail]]/[[skip]] tables of id +
    reason (pytest_flagos/expectations.py's format). Skipped where tomllib is missing."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the plugin checks it at run time
        return []
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return [f"does not parse as TOML: {exc}"]
    problems = []
    for key, entries in data.items():
        if key not in ("xfail", "skip"):
            problems.append(f"unknown table {key!r} (expected [[xfail]] or [[skip]])")
            continue
        if not isinstance(entries, list):
            problems.append(f"{key} must be an array of tables ([[{key}]])")
            continue
        for n, entry in enumerate(entries, 1):
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("id"), str)
                or not isinstance(entry.get("reason"), str)
                or not entry["reason"].strip()
            ):
                problems.append(f"[[{key}]] entry {n} needs an id and a reason")
    return problems


def load_config(path: Path, root: Path = ROOT) -> tuple[Config | None, list[str]]:
    """Read and check one config; return (config or None, problems as 'KEY: message')."""
    name = path.stem
    problems: list[str] = []
    if path.suffix != ".yml":
        problems.append(f"config files end in .yml (found {path.name})")
    if not NAME_RE.match(name):
        problems.append(
            f"the file name {name!r} must be lower-case letters, digits and "
            "dashes (it names the accelerator in the matrix)"
        )
    try:
        data = parse_yaml(path.read_text())
    except OSError as exc:
        return None, [f"cannot read: {exc.strerror}"]
    except ConfigError as exc:
        where = f"line {exc.line}: " if exc.line else ""
        return None, [f"{where}{exc}"]
    if not isinstance(data, dict):
        return None, [*problems, "the file must be a mapping of the keys " + ", ".join(KEYS)]

    manifest, found = check_manifest(data, root)
    problems += found
    argv, flagos = [], {}
    if manifest.pytest is not None:
        argv, flagos, pytest_problems = check_pytest(manifest.pytest, name, root)
        problems += [f"pytest: {p}" for p in pytest_problems]
    if problems:
        return None, problems
    return Config(name, path, manifest, argv, flagos), []


def config_paths(root: Path) -> list[Path]:
    return sorted((root / CONFIG_DIR).glob("*.yml"))


def load_all(root: Path, paths: list[Path] | None = None) -> tuple[list[Config], list[str]]:
    """Every config (or `paths`); problems as 'FILE: KEY: message' lines."""
    problems: list[str] = []
    configs: list[Config] = []
    if paths is None:
        paths = config_paths(root)
        stray = sorted(p for p in (root / CONFIG_DIR).glob("*.yaml"))
        problems += [f"{_rel(p, root)}: config files end in .yml" for p in stray]
        if not paths and not stray:
            problems.append(f"{CONFIG_DIR}: no accelerator configs (*.yml)")
    for path in paths:
        config, found = load_config(path, root)
        problems += [f"{_rel(path, root)}: {p}" for p in found]
        if config is not None:
            configs.append(config)
    reports: dict[str, str] = {}
    for config in configs:
        other = reports.setdefault(config.report, config.name)
        if other != config.name:
            problems.append(
                f"{_rel(config.path, root)}: pytest: --flagos-report={config.report} "
                f"is also the report of {other}.yml (each accelerator needs its own)"
            )
    return configs, problems


def select(configs: list[Config], which: str, root: Path) -> tuple[list[Config], list[str]]:
    """Configs named by `which`: 'all', or names separated by commas or spaces."""
    names = [n for n in re.split(r"[,\s]+", which.strip()) if n]
    if not names or names == ["all"]:
        return configs, []
    by_name = {c.name: c for c in configs}
    chosen, problems = [], []
    for n in names:
        if n in by_name:
            if by_name[n] not in chosen:
                chosen.append(by_name[n])
        else:
            path = root / CONFIG_DIR / f"{n}.yml"
            if not path.exists():
                known = ", ".join(sorted(by_name)) or "none"
                problems.append(f"{CONFIG_DIR / (n + '.yml')}: no such accelerator config (configs: {known})")
    return chosen, problems


def _one(root: Path, name: str) -> Config:
    path = root / CONFIG_DIR / f"{name}.yml"
    if not path.exists():
        known = ", ".join(p.stem for p in config_paths(root)) or "none"
        _die([f"{CONFIG_DIR / (name + '.yml')}: no such accelerator config (configs: {known})"])
    config, problems = load_config(path, root)
    if config is None:
        _die([f"{_rel(path, root)}: {p}" for p in problems])
    return config


def _shard_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"give a number of shards >= 1, not {text!r}")
    return int(text)


def _shard(text: str) -> tuple[int, int]:
    """'K/N' with 1 <= K <= N."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise argparse.ArgumentTypeError(f"give K/N, shard K of N (1 <= K <= N), not {text!r}")
    return int(k), int(n)


def _die(problems: list[str]) -> None:
    for p in problems:
        print(p, file=sys.stderr)
    raise SystemExit(1)


def run_env(config: Config, root: Path) -> dict[str, str]:
    """The process environment for set-up and suite: the config's env, $VENV/bin on PATH."""
    env = dict(os.environ)
    env.update(config.env)
    venv = Path(env.get("VENV", ".venv"))
    venv_bin = (venv if venv.is_absolute() else root / venv) / "bin"
    if venv_bin.is_dir():
        env["PATH"] = str(venv_bin) + os.pathsep + env.get("PATH", "")
    return env


def _echo(config: Config, argv: list[str]) -> None:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in config.env.items())
    print(f"+ {prefix + ' ' if prefix else ''}{shlex.join(argv)}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="repository root (default: the one holding this script)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="check configs; one line per problem")
    p.add_argument("files", nargs="*", type=Path)
    sub.add_parser("list", help="config names and display names")
    p = sub.add_parser("matrix", help="GitHub Actions matrix JSON")
    p.add_argument("which", nargs="?", default="all")
    p.add_argument("--shards", type=_shard_count, default=1, help="machines per accelerator (pytest-split)")
    p = sub.add_parser("env", help="the config's environment as KEY=VALUE lines")
    p.add_argument("name")
    p = sub.add_parser("setup", help="run the config's set-up script")
    p.add_argument("name")
    p = sub.add_parser("pytest", help="run the config's pytest command")
    p.add_argument("name")
    p.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()

    if args.command == "validate":
        files = [f if f.is_absolute() else Path.cwd() / f for f in args.files] or None
        configs, problems = load_all(root, files)
        for line in problems:
            print(line)
        if problems:
            return 1
        print(f"{len(configs)} accelerator config(s) valid: " + ", ".join(c.name for c in configs))
        return 0
    if args.command == "list":
        configs, problems = load_all(root)
        if problems:
            _die(problems)
        for c in configs:
            print(f"{c.name}\t{c.manifest.name}")
        return 0
    if args.command == "matrix":
        configs, problems = load_all(root)
        chosen, missing = select(configs, args.which, root)
        if problems or missing:
            _die(problems + missing)
        if not chosen:
            _die([f"no accelerator config selected by {args.which!r}"])
        include = [e for c in chosen for e in c.matrix_entries(args.shards)]
        print(json.dumps({"include": include}, separators=(",", ":")))
        return 0

    config = _one(root, args.name)
    if args.command == "env":
        for key, value in config.env.items():
            print(f"{key}={value}")
        return 0
    if args.command == "setup":
        cmd = ["bash", config.manifest.setup]
        _echo(config, cmd)
        return subprocess.run(cmd, cwd=root, env=run_env(config, root)).returncode
    if args.command == "pytest":
        # `--shard K/N` is ours; every other argument, unknown to this parser, is pytest's
        shard_parser = argparse.ArgumentParser(prog=f"{parser.prog} pytest NAME", add_help=False, allow_abbrev=False)
        shard_parser.add_argument("--shard", type=_shard, default=(1, 1), metavar="K/N")
        known, extra = shard_parser.parse_known_args(args.args)
        extra = extra[1:] if extra[:1] == ["--"] else extra
        cmd = config.shard_argv(known.shard) + extra
        _echo(config, cmd)
        try:
            return subprocess.run(cmd, cwd=root, env=run_env(config, root)).returncode
        except FileNotFoundError:
            _die([f"{cmd[0]}: not found (build first: `make build` creates .venv; or set VENV)"])
    return 2


if __name__ == "__main__":
    sys.exit(main())
