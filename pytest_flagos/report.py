"""The conformance report: JSON (--flagos-report=PATH) and a Markdown summary beside it.

Results are gathered from the test reports pytest hands to pytest_runtest_logreport on the
process that writes the report: the only process in a serial run, the controller under
pytest-xdist, where each report arrives from a worker with the item's user_properties
(the capability area and the expectation, attached at collection on the worker). So a
run with -n 2 yields the same report as a serial run, except for the `run` section and
the `duration_s` of each test.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import platform
import re
import sys
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


def _one_line(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 3] + "..."


def _failure_reason(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return _one_line(crash.message)
    text = str(report.longrepr or "").strip().splitlines()
    return _one_line(text[-1] if text else "")


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
            "tests": tests,
            "run": {
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

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.written = self.write()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        written = getattr(self, "written", None)
        if written:
            terminalreporter.line(f"flagos: report written to {written[0]} and {written[1]}")

    def write(self) -> tuple[Path, Path]:
        data = self.data()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(data, indent=2) + "\n")
        markdown = self.path.with_suffix(".md")
        markdown.write_text(render_markdown(data))
        return self.path, markdown


def render_markdown(data: dict[str, Any]) -> str:
    device = data["device"]
    caps = data["capabilities"]
    v = data["versions"]
    lines = [
        f"# flagos conformance report: {device['spec']}",
        "",
        f"- device: `{device['spec']}` ({device['name']})"
        + ("" if device["available"] else f", unavailable: {device['unavailable_reason']}"),
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
    for title, outcomes in (("Failures", ("failed", "error")), ("Expected failures that passed", ("xpassed",))):
        rows = [t for t in data["tests"] if t["outcome"] in outcomes]
        if rows:
            lines += ["", f"## {title}", ""]
            lines += [
                f"- `{t['nodeid']}` ({t['area']}, {t['outcome']}): {t['reason'].replace('|', '/') or 'no message'}"
                for t in rows
            ]
    return "\n".join(lines) + "\n"
