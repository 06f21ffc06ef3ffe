"""The conformance report: JSON (--flagos-report=PATH) and a Markdown summary beside it.

PATH names the JSON file and must not end in `.md`; the Markdown goes to PATH with the suffix
`.md`. Both paths are checked when pytest configures, before any test runs: a path that is a
directory, lies under a file, is an input of the run (the expectations file, the ini file, a
test file given on the command line, the repro directory) or is an existing file that is not
a flagos report is a usage error. Both files are written atomically (a temporary file beside
them, then os.replace), so a crash or a full disk never leaves half a report over the last one.

The report says whether the run is complete: the exit status, whether it was interrupted
(Ctrl-C, -x, --maxfail), and the selected tests that have no result. Failures are grouped by
cause (the first line of the error, with addresses and shape sizes normalised), and warnings
that repeat REPEATED_WARNING times or more are listed with their counts.

Results are gathered from the test reports pytest hands to pytest_runtest_logreport on the
process that writes the report: the only process in a serial run, the controller under
pytest-xdist, where each report arrives from a worker with the item's user_properties
(the capability area and the expectation, attached at collection on the worker). So a
run with -n 2 yields the same report as a serial run, except for the `run` section and
the `duration_s` of each test.
"""

from __future__ import annotations

import collections
import datetime
import importlib.metadata
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from .areas import area_from_nodeid

SCHEMA = "pytest_flagos.report/1"
OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped")
PROP_AREA = "flagos_area"
PROP_EXPECTATION = "flagos_expectation"
REASON_LIMIT = 300
CAUSE_LIMIT = 200
REPEATED_WARNING = 10  # a warning seen this many times is listed in the report
MARKDOWN_TESTS_PER_CAUSE = 5
MARKDOWN_NOT_RUN = 20


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    import torch

    package = sys.modules.get(__package__)
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton") or _version("pytorch-triton"),
        "pytest": pytest.__version__,
        "hypothesis": _version("hypothesis"),
        "pytest_flagos": getattr(package, "__version__", None) or _version("flagos"),
    }


def cut(text: str, limit: int) -> str:
    """`text` of at most `limit` characters, cut at a word boundary (never mid-word)."""
    if len(text) <= limit:
        return text
    head = text[: limit - 3]
    boundary = head.rfind(" ")
    if boundary > limit // 2:
        head = head[:boundary]
    return head.rstrip(" ,;:") + "..."


def _one_line(text: str) -> str:
    return cut(re.sub(r"\s+", " ", text).strip(), REASON_LIMIT)


_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
_SHAPE = re.compile(r"([\(\[])\s*-?\d+(?:\s*,\s*-?\d+)*\s*,?\s*([\)\]])")
_TOKEN = re.compile(r"\b(?=[a-z0-9]*\d)[a-z0-9]{20,}\b")  # hashes, cache file names


def _shape(match: re.Match) -> str:
    return match.group(1) + ", ".join("N" for _ in re.findall(r"-?\d+", match.group(0))) + match.group(2)


def cause_of(message: str) -> str:
    """The first line of an error, normalised so that one cause reads the same in every test:
    addresses -> 0x..., integer tuples and lists (shapes, strides) -> (N, N), hash-like tokens
    -> ..., cut at a word boundary."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    first = lines[0] if lines else "no message"
    first = _ADDRESS.sub("0x...", first)
    first = _SHAPE.sub(_shape, first)
    first = _TOKEN.sub("...", first)
    return cut(re.sub(r"\s+", " ", first), CAUSE_LIMIT)


def _failure_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)
    text = str(report.longrepr or "").strip().splitlines()
    return text[-1] if text else ""


def _failure_reason(report: pytest.TestReport) -> str:
    return _one_line(_failure_message(report))


def _skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return _one_line(str(report.longrepr[2]).removeprefix("Skipped: "))
    return _failure_reason(report)


def outcome_of(report: pytest.TestReport) -> tuple[str, str] | None:
    """(outcome, short reason) for a phase report that decides the test's result."""
    wasxfail = getattr(report, "wasxfail", None)
    if report.when == "call":
        if report.passed:
            return ("xpassed", _one_line(wasxfail)) if wasxfail is not None else ("passed", "")
        if report.skipped:
            if wasxfail is not None:
                return "xfailed", _one_line(wasxfail)
            return "skipped", _skip_reason(report)
        return "failed", _failure_reason(report)
    if report.failed:  # setup or teardown
        return "error", _failure_reason(report)
    if report.when == "setup" and report.skipped:
        if wasxfail is not None:
            return "xfailed", _one_line(wasxfail)
        return "skipped", _skip_reason(report)
    return None


class ReportCollector:
    """Accumulates per-test results; writes the JSON and Markdown files."""

    def __init__(self, path: Path, flagos_session: Any, config: pytest.Config) -> None:
        self.path = path
        self.session = flagos_session
        self.config = config
        self.tests: dict[str, dict[str, Any]] = {}
        self.started = time.time()
        self.selected: list[str] | None = None  # node ids, in collection order
        self.exit_status: int | None = None
        self.stop_reason: str | None = None
        # (category, message) -> [count, {node ids}]
        self.warnings: dict[tuple[str, str], list[Any]] = {}

    def add(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        entry = self.tests.setdefault(
            report.nodeid,
            {
                "nodeid": report.nodeid,
                "area": props.get(PROP_AREA) or area_from_nodeid(report.nodeid),
                "outcome": None,
                "reason": "",
                "expectation": props.get(PROP_EXPECTATION),
                "duration_s": 0.0,
            },
        )
        entry["duration_s"] = round(entry["duration_s"] + float(report.duration or 0.0), 4)
        decided = outcome_of(report)
        if decided is None:
            return
        outcome, reason = decided
        # a teardown error does not hide a failure of the test itself
        if outcome == "error" and report.when == "teardown" and entry["outcome"] == "failed":
            return
        entry["outcome"], entry["reason"] = outcome, reason
        if outcome in ("failed", "error"):
            entry["cause"] = cause_of(_failure_message(report))
        else:
            entry.pop("cause", None)

    def add_warning(self, category: str, message: str, nodeid: str) -> None:
        key = (category, cause_of(message))
        seen = self.warnings.setdefault(key, [0, set()])
        seen[0] += 1
        if nodeid:
            seen[1].add(nodeid)

    def _causes(self, tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for test in tests:
            if test["outcome"] in ("failed", "error"):
                groups[test.get("cause") or cause_of(test["reason"])].append(test)
        causes = [
            {
                "cause": cause,
                "count": len(members),
                "outcomes": dict(collections.Counter(t["outcome"] for t in members)),
                "tests": [t["nodeid"] for t in members],
            }
            for cause, members in groups.items()
        ]
        return sorted(causes, key=lambda c: (-c["count"], c["cause"]))

    def _warnings(self) -> dict[str, Any]:
        repeated = [
            {"category": category, "message": message, "count": count, "tests": len(nodeids)}
            for (category, message), (count, nodeids) in self.warnings.items()
            if count >= REPEATED_WARNING
        ]
        return {
            "total": sum(count for count, _ in self.warnings.values()),
            "distinct": len(self.warnings),
            "repeat_threshold": REPEATED_WARNING,
            "repeated": sorted(repeated, key=lambda w: (-w["count"], w["category"], w["message"])),
        }

    def _completeness(self) -> dict[str, Any]:
        selected = self.selected if self.selected is not None else list(self.tests)
        decided = {nodeid for nodeid, t in self.tests.items() if t["outcome"]}
        not_run = [nodeid for nodeid in selected if nodeid not in decided]
        interrupted = (
            self.exit_status == int(pytest.ExitCode.INTERRUPTED) or self.stop_reason is not None or bool(not_run)
        )
        return {
            "exit_status": self.exit_status,
            "interrupted": interrupted,
            "stop_reason": self.stop_reason,
            "selected": len(selected),
            "not_run": {"count": len(not_run), "ids": not_run},
        }

    def data(self) -> dict[str, Any]:
        tests = sorted((t for t in self.tests.values() if t["outcome"]), key=lambda t: t["nodeid"])
        summary = {o: 0 for o in OUTCOMES}
        areas: dict[str, dict[str, int]] = {}
        for test in tests:
            summary[test["outcome"]] += 1
            area = areas.setdefault(test["area"], {o: 0 for o in OUTCOMES})
            area[test["outcome"]] += 1
        for counts in [summary, *areas.values()]:
            counts["total"] = sum(counts[o] for o in OUTCOMES)
        device = self.session.device
        settings = self.session.settings
        expectations = self.session.expectations
        numprocesses = getattr(self.config.option, "numprocesses", None)
        return {
            "schema": SCHEMA,
            "versions": versions(),
            "device": {
                "spec": device.spec,
                "type": device.type,
                "index": device.device.index,
                "available": device.available,
                "unavailable_reason": device.unavailable_reason,
                "name": device.name(),
                "properties": device.properties(),
            },
            "capabilities": self.session.capabilities().as_dict(),
            "settings": {
                "strict": settings.strict,
                "compile_threads": settings.compile_threads,
                "worker_start": settings.worker_start,
                "hypothesis_profile": self.session.hypothesis_profile,
            },
            "expectations": {
                "file": str(expectations.file) if expectations else None,
                "entries": len(expectations.entries) if expectations else 0,
            },
            "summary": summary,
            "areas": dict(sorted(areas.items())),
            "causes": self._causes(tests),
            "warnings": self._warnings(),
            "tests": tests,
            "run": {
                **self._completeness(),
                "started": datetime.datetime.fromtimestamp(self.started).isoformat(timespec="seconds"),
                "duration_s": round(time.time() - self.started, 2),
                "xdist_workers": numprocesses or 0,
                "argv": list(self.config.invocation_params.args),
                "python_executable": sys.executable,
            },
        }

    # -- hooks: registered as a plugin object on the process that writes the report --

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.add(report)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items or self.selected is None:
            self.selected = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's: the controller collects nothing itself
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.selected:
            self.selected = list(ids)

    def pytest_warning_recorded(self, warning_message: Any, when: str, nodeid: str, location: Any) -> None:
        category = getattr(warning_message, "category", None)
        self.add_warning(getattr(category, "__name__", str(category)), str(warning_message.message), nodeid)

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self.stop_reason = self.stop_reason or f"{excinfo.typename}: {excinfo.value}".rstrip(": ")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.exit_status = int(exitstatus)
        stopped = session.shouldfail or session.shouldstop
        if stopped and self.stop_reason is None:
            self.stop_reason = str(stopped)
        try:
            self.written = self.write()
        except OSError as exc:  # checked at configure; the disk may still fill up or vanish
            self.write_error = f"{exc.filename or self.path}: {exc.strerror or exc}"
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        written = getattr(self, "written", None)
        if written:
            terminalreporter.line(f"flagos: report written to {written[0]} and {written[1]}")
        error = getattr(self, "write_error", None)
        if error:
            terminalreporter.line(f"flagos: report NOT written: {error}", red=True)

    def write(self) -> tuple[Path, Path]:
        data = self.data()
        markdown = markdown_path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # ensure_ascii: a lone surrogate or control character in a message stays valid JSON
        write_atomically(self.path, json.dumps(data, indent=2) + "\n")
        write_atomically(markdown, render_markdown(data))
        return self.path, markdown


def markdown_path(path: Path) -> Path:
    return path.with_suffix(".md")


def write_atomically(path: Path, text: str) -> None:
    """Write `text` (UTF-8; what cannot be encoded is escaped) to a temporary file beside
    `path`, then rename it over `path`: readers see the old file or the new one, never half."""
    data = text.encode("utf-8", "backslashreplace")
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _code(text: str) -> str:
    """`text` as an inline code span on one line."""
    return "`" + re.sub(r"\s+", " ", str(text)).replace("`", "'") + "`"


def _incomplete_lines(run: dict[str, Any]) -> list[str]:
    if not run.get("interrupted"):
        return []
    not_run = run.get("not_run") or {"count": 0, "ids": []}
    why = run.get("stop_reason") or f"exit status {run.get('exit_status')}"
    lines = [
        f"**Incomplete run**: {why.replace('|', '/')} (exit status {run.get('exit_status')}); "
        f"{not_run['count']} of {run.get('selected')} selected tests never ran or have no result.",
        "",
    ]
    shown = not_run["ids"][:MARKDOWN_NOT_RUN]
    lines += [f"- {_code(nodeid)}" for nodeid in shown]
    if not_run["count"] > len(shown):
        lines.append(f"- ... and {not_run['count'] - len(shown)} more (the JSON report lists them all)")
    return [*lines, ""] if shown else lines


def _device_lines(device: dict[str, Any]) -> list[str]:
    props = {k: v for k, v in (device.get("properties") or {}).items() if k != "name"}
    if not props:
        return []
    return ["- device properties: " + ", ".join(f"{k}={v}" for k, v in sorted(props.items()))]


def render_markdown(data: dict[str, Any]) -> str:
    device = data["device"]
    caps = data["capabilities"]
    v = data["versions"]
    lines = [f"# flagos conformance report: {device['spec']}", ""]
    lines += _incomplete_lines(data.get("run") or {})
    lines += [
        f"- device: `{device['spec']}` ({device['name']})"
        + ("" if device["available"] else f", unavailable: {device['unavailable_reason']}"),
        *_device_lines(device),
        f"- torch {v['torch']}, triton {v['triton']}, python {v['python']}",
        f"- codegen `{caps['codegen']}`, dtypes {', '.join(caps['dtypes'])}",
        f"- compile workers: {', '.join(caps.get('worker_start_methods') or []) or 'none'}; "
        f"memory limit: {'yes' if caps.get('memory_limit') else 'no'}"
        + (f"; extra: {caps['extra']}" if caps.get("extra") else ""),
        f"- expectations: {data['expectations']['file'] or 'none'}",
        "",
        "| area | " + " | ".join(OUTCOMES) + " | total |",
        "|---|" + "---:|" * (len(OUTCOMES) + 1),
    ]
    for area, counts in data["areas"].items():
        lines.append(f"| {area} | " + " | ".join(str(counts[o]) for o in OUTCOMES) + f" | {counts['total']} |")
    s = data["summary"]
    lines.append("| **all** | " + " | ".join(f"**{s[o]}**" for o in OUTCOMES) + f" | **{s['total']}** |")
    causes = data.get("causes") or []
    if causes:
        lines += ["", "## Failures by cause", ""]
        for cause in causes:
            outcomes = ", ".join(f"{n} {o}" for o, n in sorted(cause["outcomes"].items()))
            tests = cause["tests"][:MARKDOWN_TESTS_PER_CAUSE]
            more = cause["count"] - len(tests)
            lines.append(
                f"- **{cause['count']}x** {_code(cause['cause'])} ({outcomes}): "
                + ", ".join(_code(t) for t in tests)
                + (f" and {more} more" if more > 0 else "")
            )
    xpassed = [t for t in data["tests"] if t["outcome"] == "xpassed"]
    if xpassed:
        lines += ["", "## Expected failures that passed", ""]
        lines += [
            f"- {_code(t['nodeid'])} ({t['area']}): {t['reason'].replace('|', '/') or 'no message'}" for t in xpassed
        ]
    repeated = (data.get("warnings") or {}).get("repeated") or []
    if repeated:
        lines += ["", f"## Warnings repeated {REPEATED_WARNING} times or more", ""]
        lines += [
            f"- **{w['count']}x** in {w['tests']} test(s): {w['category']}: {_code(w['message'])}" for w in repeated
        ]
    return "\n".join(lines) + "\n"
