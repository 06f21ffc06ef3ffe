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

Schema (unknown keys are errors)::

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

The files are read by a small strict YAML reader (block mappings and lists, flow lists,
plain and quoted scalars, comments), so this script needs nothing but Python 3.10+: it runs
on a bare runner, in a vendor's container, before any set-up. Scalars that YAML 1.1 reads
as something surprising (``on``, ``yes``, ``3.10``, ``010``, dates) must be quoted.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = Path(".github/configs")

REQUIRED = ("name", "runs-on", "setup", "pytest", "timeout-minutes")
OPTIONAL = ("python", "container", "container-options", "env")
KEYS = REQUIRED + OPTIONAL
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
# The YAML subset
# --------------------------------------------------------------------------------------

_KEY_RE = re.compile(r"^(?P<key>[A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:(?:\s+(?P<rest>.*))?$")
_INT_RE = re.compile(r"^[-+]?(0|[1-9][0-9]*)$")
# plain scalars YAML (1.1 or 1.2) would not read as the string they look like
_AMBIGUOUS = [
    (re.compile(r"^(yes|no|on|off|y|n)$", re.I), "a YAML 1.1 boolean"),
    (re.compile(r"^[-+]?(\.[0-9]+|[0-9][0-9_]*\.[0-9_]*)([eE][-+]?[0-9]+)?$"), "a number"),
    (re.compile(r"^[-+]?\.(inf|nan)$", re.I), "a number"),
    (
        re.compile(r"^[-+]?0[0-9_]+$|^[-+]?0[xob][0-9a-fA-F_]+$|^[-+]?[0-9][0-9_]*_[0-9_]*$"),
        "a number",
    ),
    (re.compile(r"^[0-9]+:[0-5]?[0-9](:[0-5]?[0-9])*$"), "a sexagesimal number"),
    (re.compile(r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"), "a date"),
]
_PLAIN_START_FORBIDDEN = set("{}&*!|>%@`'\"[],#?")


@dataclasses.dataclass
class _Line:
    number: int
    indent: int
    text: str


def _strip_comment(text: str) -> str:
    """Drop a ` #` comment outside quotes."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"" and (i == 0 or text[i - 1] in " [,"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def _quoted(text: str, line: int) -> tuple[str, str]:
    """Parse a quoted scalar at the start of `text`; return (value, the rest)."""
    q = text[0]
    out = []
    i = 1
    while i < len(text):
        ch = text[i]
        if q == "'" and ch == "'":
            if text[i + 1 : i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out), text[i + 1 :]
        if q == '"' and ch == "\\":
            esc = text[i + 1 : i + 2]
            table = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "/": "/"}
            if esc not in table:
                raise ConfigError(f"unsupported escape \\{esc} in a double-quoted string", line)
            out.append(table[esc])
            i += 2
            continue
        if q == '"' and ch == '"':
            return "".join(out), text[i + 1 :]
        out.append(ch)
        i += 1
    raise ConfigError(f"unterminated {q}-quoted string", line)


def _scalar(text: str, line: int) -> Any:
    text = text.strip()
    if not text:
        return None
    if text[0] in "'\"":
        value, rest = _quoted(text, line)
        if rest.strip():
            raise ConfigError(f"unexpected text after a quoted string: {rest.strip()!r}", line)
        return value
    if text[0] in _PLAIN_START_FORBIDDEN or text.startswith(("- ", "-\t")) or text == "-":
        raise ConfigError(
            f"unsupported YAML (anchors, tags, block scalars, flow mappings are not read here): {text!r}",
            line,
        )
    if ": " in text or text.endswith(":"):
        raise ConfigError(f"a plain value cannot contain ': ' (quote it): {text!r}", line)
    if text in ("~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if _INT_RE.match(text):
        return int(text)
    for pattern, what in _AMBIGUOUS:
        if pattern.match(text):
            raise ConfigError(f"{text!r} reads as {what} in YAML: quote it", line)
    return text


def _flow_list(text: str, line: int) -> list[Any]:
    inner = text.strip()
    if not inner.endswith("]"):
        raise ConfigError(f"a flow list must end on the same line: {text!r}", line)
    inner = inner[1:-1].strip()
    if not inner:
        return []
    items, current, quote = [], [], None
    for ch in inner:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch in "[]{}":
            raise ConfigError("nested flow collections are not supported", line)
        elif ch == ",":
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    if items and not items[-1].strip():
        items.pop()  # trailing comma
    if any(not item.strip() for item in items):
        raise ConfigError(f"empty item in a flow list: {text!r}", line)
    return [_scalar(item, line) for item in items]


def _value(text: str, line: int) -> Any:
    return _flow_list(text, line) if text.startswith("[") else _scalar(text, line)


def _is_item(line: _Line) -> bool:
    return line.text == "-" or line.text.startswith(("- ", "-\t"))


def _block(lines: list[_Line], i: int, indent: int) -> tuple[Any, int]:
    return (_list if _is_item(lines[i]) else _mapping)(lines, i, indent)


def _nested(lines: list[_Line], i: int, indent: int, *, allow_same_indent_list: bool) -> tuple[Any, int]:
    """The value of a key or item with nothing after it: a nested block, or null."""
    if i < len(lines):
        nxt = lines[i]
        if nxt.indent > indent:
            return _block(lines, i, nxt.indent)
        if allow_same_indent_list and nxt.indent == indent and _is_item(nxt):
            return _list(lines, i, indent)
    return None, i


def _mapping(lines: list[_Line], i: int, indent: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while i < len(lines) and lines[i].indent == indent:
        line = lines[i]
        if _is_item(line):
            raise ConfigError("a list item where a 'key: value' line was expected", line.number)
        m = _KEY_RE.match(line.text)
        if not m:
            raise ConfigError(f"expected 'key: value', found {line.text!r}", line.number)
        key = m.group("key")
        if key in out:
            raise ConfigError(f"duplicate key {key!r}", line.number)
        rest = _strip_comment(m.group("rest") or "")
        if rest:
            out[key] = _value(rest, line.number)
            i += 1
        else:
            out[key], i = _nested(lines, i + 1, indent, allow_same_indent_list=True)
        if i < len(lines) and lines[i].indent > indent:
            raise ConfigError("unexpected indentation", lines[i].number)
    return out, i


def _list(lines: list[_Line], i: int, indent: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while i < len(lines) and lines[i].indent == indent and _is_item(lines[i]):
        line = lines[i]
        rest = _strip_comment(line.text[1:].strip())
        if rest and _KEY_RE.match(rest) and not rest.startswith(("'", '"')):
            raise ConfigError("mappings inside lists are not supported", line.number)
        if rest:
            out.append(_value(rest, line.number))
            i += 1
        else:
            value, i = _nested(lines, i + 1, indent, allow_same_indent_list=False)
            out.append(value)
        if i < len(lines) and lines[i].indent > indent:
            raise ConfigError("unexpected indentation", lines[i].number)
    return out, i


def parse_yaml(text: str) -> Any:
    """Parse the YAML subset described in the module docstring; raise ConfigError."""
    lines: list[_Line] = []
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.lstrip(" ")
        if not stripped.strip() or stripped.startswith("#"):
            continue
        if stripped.startswith("\t") or "\t" in raw[: len(raw) - len(stripped)]:
            raise ConfigError("tabs in indentation", number)
        if not lines and stripped.rstrip() == "---":
            continue  # a document start marker before any content
        if stripped.rstrip() in ("---", "..."):
            raise ConfigError("one document per file", number)
        lines.append(_Line(number, len(raw) - len(stripped), stripped.rstrip()))
    if not lines:
        return None
    if lines[0].indent != 0:
        raise ConfigError("the first line is indented", lines[0].number)
    value, i = _block(lines, 0, 0)
    if i < len(lines):
        raise ConfigError(f"unexpected line {lines[i].text!r}", lines[i].number)
    return value


# --------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Config:
    name: str  # the file stem: cpu, flagos-host, ...
    path: Path
    data: dict[str, Any]
    argv: list[str]  # the pytest command, split
    flagos: dict[str, str | bool]  # its --flagos-* options

    @property
    def display_name(self) -> str:
        return str(self.data["name"])

    @property
    def runs_on(self) -> list[str]:
        labels = self.data["runs-on"]
        return [labels] if isinstance(labels, str) else list(labels)

    @property
    def env(self) -> dict[str, str]:
        return {k: str(v) for k, v in (self.data.get("env") or {}).items()}

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
        return argv + ["--splits", str(n), "--group", str(k)]

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
        container = self.data.get("container") or ""
        return {
            "config": self.name,
            "name": self.display_name,
            "runs_on": self.runs_on,
            "python": self.data.get("python") or "",
            "container": container,
            # never empty: see DEFAULT_CONTAINER_OPTIONS (unused when there is no container)
            "container_options": self.data.get("container-options") or DEFAULT_CONTAINER_OPTIONS,
            "timeout_minutes": self.data["timeout-minutes"],
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


def check_pytest(command: Any, name: str, root: Path) -> tuple[list[str], dict[str, Any], list[str]]:
    """Check the `pytest` value; return (argv, --flagos-* options, problems).

    The command must be `pytest -p flagos --flagos-device=DEVICE conformance/
    --flagos-expectations=FILE --flagos-report=PATH.json --flagos-strict [more pytest
    options]`. It runs without a shell. The expectations file must exist, be TOML, and be
    the device's (its name is the device type or the config's name). --flagos-strict is
    required: without it a runner that lacks the device skips every test and passes.
    """
    if not isinstance(command, str) or not command.strip():
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
        return None, problems + ["the file must be a mapping of the keys " + ", ".join(KEYS)]

    for key in data:
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            problems.append(f"{key}: unknown key" + (f" (did you mean {close[0]}?)" if close else ""))
    for key in REQUIRED:
        if data.get(key) in (None, "", []):
            problems.append(f"{key}: required")

    display = data.get("name")
    if display is not None and not (isinstance(display, str) and display.strip()):
        problems.append("name: must be a non-empty string")

    labels = data.get("runs-on")
    if labels is not None:
        seq = [labels] if isinstance(labels, str) else labels
        if not isinstance(seq, list) or not all(isinstance(x, str) and x.strip() for x in seq):
            problems.append("runs-on: must be a runner label or a list of labels (strings)")

    python = data.get("python")
    if python is not None and not (isinstance(python, str) and PYTHON_RE.match(python)):
        problems.append(f'python: {python!r} is not a quoted Python version such as "3.11"')

    container = data.get("container")
    if container is not None and not (
        isinstance(container, str) and container.strip() and " " not in container.strip()
    ):
        problems.append("container: must be an image name (omit the key for no container)")
    options = data.get("container-options")
    if options is not None:
        if not isinstance(options, str) or not options.strip():
            problems.append("container-options: must be a string of docker options")
        elif container is None:
            problems.append("container-options: given without a container")

    setup = data.get("setup")
    if setup is not None:
        if not isinstance(setup, str):
            problems.append("setup: must be the path of a script")
        else:
            spath, why = _repo_file(setup, root)
            if spath is None:
                problems.append(f"setup: {why}")
            elif not spath.is_file():
                problems.append(f"setup: {setup} does not exist")

    env = data.get("env")
    if env is not None:
        if not isinstance(env, dict):
            problems.append("env: must be a mapping of VARIABLE: value")
        else:
            for key, value in env.items():
                if not ENV_NAME_RE.match(key):
                    problems.append(f"env: {key!r} is not a variable name")
                if isinstance(value, bool) or not isinstance(value, (str, int)):
                    problems.append(f"env: {key}: the value must be a string (quote it)")
                elif "\n" in str(value):
                    problems.append(f"env: {key}: the value must be one line")

    timeout = data.get("timeout-minutes")
    if timeout is not None:
        lo, hi = TIMEOUT_RANGE
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not lo <= timeout <= hi:
            problems.append(f"timeout-minutes: must be a whole number of minutes, {lo}..{hi}")

    argv, flagos = [], {}
    if data.get("pytest") not in (None, ""):
        argv, flagos, pytest_problems = check_pytest(data["pytest"], name, root)
        problems += [f"pytest: {p}" for p in pytest_problems]
    if problems:
        return None, problems
    return Config(name, path, data, argv, flagos), []


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
            print(f"{c.name}\t{c.display_name}")
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
        cmd = ["bash", str(config.data["setup"])]
        _echo(config, cmd)
        return subprocess.run(cmd, cwd=root, env=run_env(config, root)).returncode
    if args.command == "pytest":
        extra = list(args.args)
        shard = (1, 1)
        if extra[:1] == ["--shard"] or (extra and extra[0].startswith("--shard=")):
            value = extra[0].partition("=")[2] if "=" in extra[0] else (extra[1] if len(extra) > 1 else "")
            extra = extra[1:] if "=" in extra[0] else extra[2:]
            try:
                shard = _shard(value)
            except argparse.ArgumentTypeError as exc:
                parser.error(f"--shard: {exc}")
        extra = extra[1:] if extra[:1] == ["--"] else extra
        cmd = config.shard_argv(shard) + extra
        _echo(config, cmd)
        try:
            return subprocess.run(cmd, cwd=root, env=run_env(config, root)).returncode
        except FileNotFoundError:
            _die([f"{cmd[0]}: not found (build first: `make build` creates .venv; or set VENV)"])
    return 2


if __name__ == "__main__":
    sys.exit(main())
