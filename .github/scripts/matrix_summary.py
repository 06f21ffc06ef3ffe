#!/usr/bin/env python3
"""Merge conformance reports into one accelerators x capability areas table (Markdown).

    python3 .github/scripts/matrix_summary.py reports/*.json [-o matrix.md]
    python3 .github/scripts/matrix_summary.py reports/ [-o matrix.md]   # every *.json in it

Each argument is a JSON report written by ``pytest -p flagos ... --flagos-report=PATH``
(schema ``pytest_flagos.report/1``, pytest_flagos/report.py). A row is named after the
report's file name (``reports/flagos-host.json`` -> ``flagos-host``: the accelerator config
that wrote it), so two accelerators that test the same device type stay apart.

A cell reads ``✅ 12/14 (2 xfail)``: passed / all tests of the area, then the other outcomes.
The mark is ❌ when a test failed or errored, ⚠️ when an expected failure passed (a stale
expectations entry) or nothing ran (all skipped), ✅ otherwise; ``·`` means the
accelerator has no test in that area.

Shards: a report named ``NAME.shard-K-of-N.json`` is shard K of N of accelerator NAME (one
CI machine of a suite split with pytest-split, ``--splits N --group K``). The shards of NAME
make one row, as one run would: their tests are put together (a test in two shards counts
once) and the row's duration is the longest shard's. A missing or overlapping shard, or
shards of different devices or splits, is named on stderr (exit status 1); inconsistent
shards stay separate rows.

Stdlib only. Reading is defensive: a report of another schema version is used with a
warning, per-area counts are rebuilt from the test list when missing, and a file that is not
a report is named on stderr (exit status 1; the table of the others is still written).
Exit status 2 when no report could be read.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

SCHEMA_PREFIX = "pytest_flagos.report/"
SCHEMA_VERSION = "1"
OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped")
SHORT = {
    "failed": "fail",
    "error": "error",
    "xfailed": "xfail",
    "xpassed": "xpass",
    "skipped": "skip",
}
ALL = "all"
FAILURE_LIMIT = 15
SHARD_RE = re.compile(r"^(?P<name>.+)\.shard-(?P<k>[0-9]+)-of-(?P<n>[0-9]+)$")


class NotAReport(Exception):
    pass


def _counts(raw: Any) -> dict[str, int]:
    counts = {o: 0 for o in OUTCOMES}
    if isinstance(raw, dict):
        for o in OUTCOMES:
            value = raw.get(o, 0)
            counts[o] = value if isinstance(value, int) and not isinstance(value, bool) else 0
    counts["total"] = sum(counts[o] for o in OUTCOMES)
    return counts


def _from_tests(tests: list[dict[str, Any]]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    areas: dict[str, dict[str, int]] = {}
    for t in tests:
        outcome = t.get("outcome")
        if outcome not in OUTCOMES:
            continue
        area = areas.setdefault(str(t.get("area") or "other"), {o: 0 for o in OUTCOMES})
        area[outcome] += 1
    summary = {o: sum(a[o] for a in areas.values()) for o in OUTCOMES}
    return {k: _counts(v) for k, v in areas.items()}, _counts(summary)


def load_report(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The parts of a report the table needs, and warnings; raise NotAReport."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise NotAReport(f"cannot read: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NotAReport(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise NotAReport("not a flagos conformance report (not a JSON object)")
    schema = data.get("schema")
    warnings = []
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_PREFIX):
        raise NotAReport(
            f"not a flagos conformance report (schema {schema!r}, expected {SCHEMA_PREFIX}{SCHEMA_VERSION})"
        )
    if schema != SCHEMA_PREFIX + SCHEMA_VERSION:
        warnings.append(f"schema {schema} (this script reads {SCHEMA_PREFIX}{SCHEMA_VERSION}); reading it anyway")
    tests = [t for t in data.get("tests") or [] if isinstance(t, dict)]
    areas_raw = data.get("areas")
    if isinstance(areas_raw, dict) and areas_raw:
        areas = {str(k): _counts(v) for k, v in areas_raw.items()}
        summary = (
            _counts(data.get("summary"))
            if isinstance(data.get("summary"), dict)
            else _counts({o: sum(a[o] for a in areas.values()) for o in OUTCOMES})
        )
    else:
        if areas_raw is not None and tests:
            warnings.append("no per-area counts; rebuilt from the test list")
        areas, summary = _from_tests(tests)
    device = data.get("device") if isinstance(data.get("device"), dict) else {}
    versions = data.get("versions") if isinstance(data.get("versions"), dict) else {}
    run = data.get("run") if isinstance(data.get("run"), dict) else {}
    return {
        "label": path.stem,
        "file": str(path),
        "device": str(device.get("spec") or "?"),
        "device_name": str(device.get("name") or ""),
        "available": device.get("available", True) is not False,
        "unavailable_reason": str(device.get("unavailable_reason") or ""),
        "versions": {k: versions.get(k) for k in ("torch", "triton", "python")},
        "duration_s": run.get("duration_s"),
        "areas": areas,
        "summary": summary,
        "failures": [t for t in tests if t.get("outcome") in ("failed", "error")],
        "tests": tests,
        "per_area_counts": isinstance(areas_raw, dict) and bool(areas_raw),
    }, warnings


def _shard_of(report: dict[str, Any]) -> tuple[str, int, int] | None:
    m = SHARD_RE.match(report["label"])
    return (m.group("name"), int(m.group("k")), int(m.group("n"))) if m else None


def _merge(name: str, shards: list[dict[str, Any]], total: int) -> tuple[dict[str, Any], list[str]]:
    """One row from the shards of one accelerator, and what is wrong with them."""
    problems = []
    present = {_shard_of(r)[1] for r in shards}
    for k in range(1, total + 1):
        if k not in present:
            problems.append(f"{name}: shard {k} of {total} is missing: the row counts only the shards read")
    seen: dict[str, dict[str, Any]] = {}
    repeated = []
    for r in sorted(shards, key=lambda r: _shard_of(r)[1]):
        for t in r["tests"]:
            nodeid = str(t.get("nodeid"))
            if nodeid in seen:
                repeated.append(nodeid)
            else:
                seen[nodeid] = t
    if repeated:
        problems.append(f"{name}: {len(repeated)} test(s) in more than one shard (e.g. {repeated[0]}): counted once")
    tests = list(seen.values())
    if all(r["tests"] or not r["summary"]["total"] for r in shards):
        areas, summary = _from_tests(tests)
    else:  # a shard without its test list: add up the counts
        areas = {}
        for r in shards:
            for area, c in r["areas"].items():
                merged = areas.setdefault(area, {o: 0 for o in OUTCOMES})
                for o in OUTCOMES:
                    merged[o] += c[o]
        areas = {k: _counts(v) for k, v in areas.items()}
        summary = _counts({o: sum(a[o] for a in areas.values()) for o in OUTCOMES})
    durations = [r["duration_s"] for r in shards if isinstance(r["duration_s"], (int, float))]
    first = shards[0]
    files = sorted(r["file"] for r in shards)
    row = dict(first)
    row.update(
        label=name,
        file=f"{files[0]} ... ({len(shards)} shards)" if len(files) > 1 else files[0],
        duration_s=max(durations) if durations else None,
        areas=areas,
        summary=summary,
        tests=tests,
        failures=[t for t in tests if t.get("outcome") in ("failed", "error")],
        available=all(r["available"] for r in shards),
    )
    return row, problems


def merge_shards(reports: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Reports with the shards of each accelerator merged into one, in the order of their first
    shard; problems as lines for stderr."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in reports:
        shard = _shard_of(r)
        if shard is not None:
            groups.setdefault(shard[0], []).append(r)
    out, problems, done = [], [], set()
    for r in reports:
        shard = _shard_of(r)
        if shard is None:
            out.append(r)
            continue
        name = shard[0]
        if name in done:
            continue
        done.add(name)
        shards = groups[name]
        totals = sorted({_shard_of(s)[2] for s in shards})
        devices = sorted({s["device"] for s in shards})
        if len(totals) > 1:
            problems.append(f"{name}: shards of {' and of '.join(map(str, totals))} runs: not merged")
        elif len(devices) > 1:
            problems.append(f"{name}: shards of different devices ({', '.join(devices)}): not merged")
        else:
            merged, found = _merge(name, shards, totals[0])
            out.append(merged)
            problems += found
            continue
        out += shards
    return out, problems


def _cell(counts: dict[str, int] | None) -> str:
    if counts is None or counts["total"] == 0:
        return "·"
    if counts["failed"] or counts["error"]:
        mark = "❌"
    elif counts["xpassed"] or counts["skipped"] == counts["total"]:
        mark = "⚠️"
    else:
        mark = "✅"
    notes = [f"{counts[o]} {SHORT[o]}" for o in OUTCOMES[1:] if counts[o]]
    return f"{mark} {counts['passed']}/{counts['total']}" + (f" ({', '.join(notes)})" if notes else "")


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _version(v: Any) -> str:
    return str(v) if v else "?"


def render(reports: list[dict[str, Any]], title: str = "flagos conformance matrix") -> str:
    area_names = sorted({a for r in reports for a in r["areas"]})
    lines = [f"# {title}", ""]
    header = ["accelerator", "device", ALL, *area_names]
    lines.append("| " + " | ".join(_esc(h) for h in header) + " |")
    lines.append("|---|---|" + "---|" * (1 + len(area_names)))
    for r in reports:
        row = [f"**{_esc(r['label'])}**", f"`{_esc(r['device'])}`", _cell(r["summary"])]
        row += [_cell(r["areas"].get(a)) for a in area_names]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Cells: passed/tests of the area, then other outcomes. ❌ a test failed or "
        "errored; ⚠️ an expected failure passed, or every test was skipped; · no tests.",
        "",
        "| accelerator | device | torch | triton | python | duration | report |",
        "|---|---|---|---|---|---:|---|",
    ]
    for r in reports:
        v = r["versions"]
        device = r["device_name"] or r["device"]
        if not r["available"]:
            device += f" (unavailable: {r['unavailable_reason'] or 'no reason given'})"
        duration = r["duration_s"]
        lines.append(
            f"| {_esc(r['label'])} | {_esc(device)} | {_version(v['torch'])} | "
            f"{_version(v['triton'])} | {_version(v['python'])} | "
            + (f"{float(duration):.{0 if duration >= 10 else 1}f} s" if isinstance(duration, (int, float)) else "?")
            + f" | `{_esc(r['file'])}` |"
        )
    failing = [r for r in reports if r["failures"]]
    if failing:
        lines += ["", "## Failures", ""]
        for r in failing:
            lines.append(f"**{_esc(r['label'])}**")
            lines.append("")
            for t in r["failures"][:FAILURE_LIMIT]:
                reason = str(t.get("reason") or "no message").replace("`", "'")
                lines.append(f"- `{_esc(str(t.get('nodeid')))}` ({t.get('outcome')}): {_esc(reason)}")
            more = len(r["failures"]) - FAILURE_LIMIT
            if more > 0:
                lines.append(f"- ... and {more} more (see {r['file']})")
            lines.append("")
        while lines[-1] == "":
            lines.pop()
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="JSON conformance reports, or directories of them")
    parser.add_argument("-o", "--output", type=Path, help="write the Markdown here (default: standard output)")
    parser.add_argument("--title", default="flagos conformance matrix")
    args = parser.parse_args(argv)
    reports, bad = [], 0
    labels: dict[str, str] = {}
    paths: list[Path] = []
    for path in args.reports:
        if path.is_dir():
            found = sorted(path.glob("*.json"))
            if not found:
                print(f"{path}: no *.json report in this directory", file=sys.stderr)
            paths += found
        else:
            paths.append(path)
    for path in paths:
        try:
            report, warnings = load_report(path)
        except NotAReport as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            bad += 1
            continue
        for w in warnings:
            print(f"{path}: warning: {w}", file=sys.stderr)
        if report["label"] in labels:
            print(
                f"{path}: warning: same name as {labels[report['label']]}; labelled by its path",
                file=sys.stderr,
            )
            report["label"] = str(path.with_suffix(""))
        labels[report["label"]] = str(path)
        reports.append(report)
    if not reports:
        print("no conformance report could be read", file=sys.stderr)
        return 2
    reports, problems = merge_shards(reports)
    for line in problems:
        print(line, file=sys.stderr)
    bad += len(problems)
    text = render(reports, args.title)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
