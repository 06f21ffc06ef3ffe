"""Kit sensitivity: which known classes of device bug the conformance suite catches.

    python -m benchmarks.sensitivity                        # every fault, then healthy runs
    python -m benchmarks.sensitivity --fault conv_strides --fault blind_workers
    make sensitivity

Run it as a module from the repository root: the fault catalogue and runner are the package
``tests.faults`` (the plugins load as ``-p tests.faults.<name>``), imported like any package.

Each fault plugin of tests/faults/ (catalog.py) is planted in a healthy device and the
conformance modules it names run in a subprocess; a fault is caught when a test of its
expected capability area fails with a reason that names the problem (the conformance JSON
report). The healthy device then runs the same modules without faults. Prints a Markdown
table (the one in docs/results/sensitivity.md) and exits 1 if a fault was missed or a
healthy run failed. tests/test_sensitivity.py asserts the same.
"""

import argparse
import re
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as a file: the repository root is not on sys.path
    sys.exit("run it from the repository root as a module: python -m benchmarks.sensitivity")

from tests.faults import catalog, runner

MESSAGE_CHARS = 160


def _message(reason: str) -> str:
    """The problem the failure names, without the notes the suite appends."""
    text = re.split(r" (?:where to look|flagos repro):", re.sub(r"^Failed: ", "", reason))[0]
    text = text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."
    return text.replace("|", "/")


def _row(verdict: runner.Verdict) -> str:
    test = verdict.catching["nodeid"].removeprefix("conformance/") if verdict.catching else "-"
    message = _message(verdict.catching["reason"]) if verdict.caught else verdict.problem.splitlines()[0]
    cells = [
        f"`{verdict.fault.name}`",
        verdict.device,
        verdict.fault.area,
        f"yes ({verdict.caught})" if verdict.caught else "**no**",
        f"`{test}`",
        message,
        f"{verdict.seconds:.0f} s",
    ]
    return "| " + " | ".join(cells) + " |"


def _score(cases: list, workdir: Path) -> tuple[int, int]:
    """Print a row per (fault, device); return (faults planted, faults caught)."""
    print("| fault | device | expected area | caught (tests) | first failing test | message | time |")
    print("| --- | --- | --- | --- | --- | --- | ---: |")
    planted = caught = 0
    for fault, device in cases:
        why_not = runner.cannot_plant(fault)
        if why_not:
            print(f"| `{fault.name}` | {device} | {fault.area} | n/a | - | cannot be planted here: {why_not} | - |")
            continue
        verdict = runner.run_fault(fault, device, workdir / f"{fault.name}-{device}")
        planted, caught = planted + 1, caught + bool(verdict.caught)
        print(_row(verdict), flush=True)
    return planted, caught


def _healthy(cases: list, workdir: Path) -> int:
    """Print a line per device for the faults' modules without faults; return the failures."""
    unhealthy = 0
    faults = tuple(dict.fromkeys(fault for fault, _ in cases))
    for device in dict.fromkeys(device for _, device in cases):
        modules = catalog.healthy_modules(device, faults)
        run = runner.run_healthy(device, modules, workdir / f"healthy-{device}")
        counts = run.report["summary"] if run.report else {}
        failed = counts.get("failed", 0) + counts.get("error", 0)
        print(
            f"- healthy {device}: {'passes' if run.passed() else '**fails**'} ({counts.get('passed', 0)} passed, "
            f"{counts.get('skipped', 0)} skipped, {failed} failed; {', '.join(modules)}) in {run.seconds:.0f} s",
            flush=True,
        )
        if not run.passed():
            unhealthy += 1
            print(run.describe(), file=sys.stderr)
    return unhealthy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fault", action="append", choices=[f.name for f in catalog.FAULTS], help="only these")
    parser.add_argument("--workdir", type=Path, help="keep the runs' reports here (default: a temporary directory)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="flagos-sensitivity-"))
    cases = [(f, d) for f, d in catalog.cases() if not args.fault or f.name in args.fault]
    planted, caught = _score(cases, workdir)
    print()
    unhealthy = _healthy(cases, workdir)
    print(f"\ncaught {caught} of {planted} planted faults; reports under {workdir}")
    return 1 if caught < planted or unhealthy else 0


if __name__ == "__main__":
    sys.exit(main())
