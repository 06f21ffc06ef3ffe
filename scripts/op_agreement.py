#!/usr/bin/env python3
"""Compare the op coverage results (conformance/test_ops.py) of two conformance reports.

    python3 scripts/op_agreement.py --a reports/cuda.json --b reports/flagos-cuda.json [-o agreement.md]
    python3 scripts/op_agreement.py --a one-run.json --b shard-1.json shard-2.json ... --identical

Each side is one report, or the shards of one run (merged as .github/scripts/matrix_summary.py
merges them). The Markdown says, per side, the outcome counts and the verdicts of the
failures (the first word of a failure: eager-wrong, compiled-wrong, compile-error,
sample-error, timeout), then the cases where the sides disagree: passed on A and not on B,
and the reverse. ``--identical`` exits 1 unless both sides have the same cases with the same
outcomes (a sharded run against one run). Stdlib only.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

AREA_FILE = "conformance/test_ops.py::"
VERDICT_RE = re.compile(r"^(?:Failed: )?(eager-wrong|compiled-wrong|compile-error|sample-error|timeout):")
GOOD = ("passed", "xpassed")


def _matrix_summary():
    path = Path(__file__).resolve().parents[1] / ".github" / "scripts" / "matrix_summary.py"
    spec = importlib.util.spec_from_file_location("_matrix_summary", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_side(paths: list[Path]) -> dict[str, dict]:
    """nodeid -> test entry of the op coverage area, from one report or the shards of one run."""
    ms = _matrix_summary()
    reports = []
    for path in paths:
        report, _ = ms.load_report(path)
        reports.append(report)
    if len(reports) > 1:
        merged, problems = ms.merge_shards(reports)
        for line in problems:
            print(line, file=sys.stderr)
        tests = [t for r in merged for t in r["tests"]]
    else:
        tests = reports[0]["tests"]
    return {t["nodeid"]: t for t in tests if str(t.get("nodeid", "")).startswith(AREA_FILE)}


def verdict(test: dict) -> str:
    m = VERDICT_RE.match(str(test.get("reason") or ""))
    if m:
        return m.group(1)
    if test.get("outcome") in ("failed", "error") and "crashed" in str(test.get("reason")):
        return "crashed"
    return test.get("outcome", "?")


def _case(nodeid: str) -> str:
    return nodeid.removeprefix(AREA_FILE)


def render(a: dict[str, dict], b: dict[str, dict], label_a: str, label_b: str) -> str:
    lines = [f"# Op coverage: {label_a} vs {label_b}", ""]
    lines += ["| | " + " | ".join(("cases", "passed", "failed", "xfailed", "xpassed", "skipped", "error")) + " |"]
    lines += ["|---|" + "---:|" * 7]
    for label, side in ((label_a, a), (label_b, b)):
        c = Counter(t["outcome"] for t in side.values())
        row = [len(side)] + [c[o] for o in ("passed", "failed", "xfailed", "xpassed", "skipped", "error")]
        lines.append(f"| {label} | " + " | ".join(map(str, row)) + " |")
    lines += ["", "Verdicts of failures (the report gives an expected failure its expectation, not its verdict):", ""]
    for label, side in ((label_a, a), (label_b, b)):
        v = Counter(verdict(t) for t in side.values() if t["outcome"] in ("failed", "error", "xfailed"))
        lines.append(f"- {label}: " + (", ".join(f"{k} {n}" for k, n in sorted(v.items())) or "none"))
    common = sorted(set(a) & set(b))
    agree = sum((a[n]["outcome"] in GOOD) == (b[n]["outcome"] in GOOD) for n in common)
    lines += [
        "",
        f"{len(common)} cases on both; {agree} agree (both pass, or both do not); "
        f"{len(set(a) - set(b))} only on {label_a}, {len(set(b) - set(a))} only on {label_b}.",
    ]
    for title, one, other in (
        (f"Pass on {label_a}, not on {label_b}", a, b),
        (f"Pass on {label_b}, not on {label_a}", b, a),
    ):
        rows = [n for n in common if one[n]["outcome"] in GOOD and other[n]["outcome"] not in GOOD]
        lines += ["", f"## {title} ({len(rows)})", ""]
        lines += [
            f"- `{_case(n)}`: {other[n]['outcome']}, {str(other[n].get('reason') or '')[:200].replace('|', '/')}"
            for n in rows
        ] or ["none"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", nargs="+", type=Path, required=True, help="report, or shards of one run")
    parser.add_argument("--b", nargs="+", type=Path, required=True, help="report, or shards of one run")
    parser.add_argument("--label-a")
    parser.add_argument("--label-b")
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--identical", action="store_true", help="exit 1 unless the cases and outcomes are the same")
    args = parser.parse_args(argv)
    a, b = load_side(args.a), load_side(args.b)
    label_a = args.label_a or args.a[0].stem
    label_b = args.label_b or args.b[0].stem
    text = render(a, b, label_a, label_b)
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    if args.identical:
        differ = sorted(n for n in set(a) | set(b) if a.get(n, {}).get("outcome") != b.get(n, {}).get("outcome"))
        if differ:
            print(f"{len(differ)} case(s) differ, e.g. {differ[0]}", file=sys.stderr)
            return 1
        print(f"identical: {len(a)} cases, same outcomes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
