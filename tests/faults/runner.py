"""Run conformance areas on a device, with or without a fault plugin, and judge the run
from the conformance JSON report (shared by tests/test_sensitivity.py and
benchmarks/sensitivity.py).

Each run is a fresh ``python -m pytest -p flagos --flagos-device=DEVICE`` in the repository
root, with the device's expectations file and its own basetemp, report and environment
(no stray FLAGOS_* settings of the caller).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.faults.catalog import Fault

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 600
FAILED = ("failed", "error")


@dataclasses.dataclass(frozen=True)
class Run:
    """One pytest run of conformance modules."""

    argv: tuple[str, ...]
    returncode: int
    report: dict[str, Any] | None  # the JSON report; None if pytest wrote none
    seconds: float
    output: str  # the end of pytest's stdout and stderr

    def failures(self) -> list[dict[str, Any]]:
        return [t for t in (self.report or {}).get("tests", []) if t["outcome"] in FAILED]

    def outcome(self, nodeid: str) -> str | None:
        return next((t["outcome"] for t in (self.report or {}).get("tests", []) if t["nodeid"] == nodeid), None)

    def passed(self) -> bool:
        summary = (self.report or {}).get("summary", {})
        return self.returncode == 0 and summary.get("total", 0) > 0 and not self.failures()

    def describe(self) -> str:
        """Why a run that should have passed did not, for assertion messages."""
        failures = "\n".join(f"  {t['nodeid']}: {t['reason']}" for t in self.failures())
        return f"`{' '.join(self.argv)}` exited {self.returncode}\n{failures or self.output}"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a fault was caught: a failure in its area whose reason names the problem."""

    fault: Fault
    device: str
    caught: int  # how many tests of the area failed naming the problem (0: missed)
    catching: dict[str, Any] | None  # the first report entry that caught it (else the first failure)
    seconds: float  # all runs of the fault, set-up phases included
    problem: str  # why it was not caught; "" when caught


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_", "PYTEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**env, **(extra or {})}


def run_conformance(
    device: str,
    modules: tuple[str, ...],
    workdir: Path,
    *,
    plugins: tuple[str, ...] = (),
    select: str | None = None,
    env: dict[str, str] | None = None,
) -> Run:
    """pytest on conformance/<modules> for `device`, with its report under `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    report = workdir / "report.json"
    report.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "pytest", "-p", "flagos", f"--flagos-device={device}"]
    for plugin in plugins:
        argv += ["-p", plugin]
    argv += [f"conformance/{module}" for module in modules]
    expectations = REPO / "conformance" / "expectations" / f"{device}.toml"
    if expectations.exists():
        argv.append(f"--flagos-expectations={expectations}")
    argv += [f"--flagos-report={report}", f"--basetemp={workdir / 'tmp'}", "-q", "-p", "no:cacheprovider"]
    argv += ["--hypothesis-profile=flagos-ci"] + (["-k", select] if select else [])
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=_environment(env), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    seconds = time.monotonic() - start
    data = json.loads(report.read_text()) if report.exists() else None
    output = (proc.stdout + proc.stderr)[-4000:]
    return Run(tuple(argv[1:]), proc.returncode, data, seconds, output)


def judge(fault: Fault, device: str, run: Run, seconds: float) -> Verdict:
    failures = run.failures()
    in_area = [t for t in failures if t["area"] == fault.area]
    named = [t for t in in_area if re.search(fault.message, t["reason"])]
    catching = (named or in_area or failures or [None])[0]
    if named:
        problem = ""
    elif run.report is None:
        problem = f"no report: pytest exited {run.returncode}\n{run.output}"
    elif in_area:
        problem = f"failed in {fault.area!r}, but no reason matches {fault.message!r}"
    elif failures:
        problem = f"failed only outside {fault.area!r}: {', '.join(sorted({t['area'] for t in failures}))}"
    else:
        problem = f"not caught: {run.report['summary']}"
    return Verdict(fault, device, len(named), catching, seconds, problem)


def cannot_plant(fault: Fault) -> str | None:
    """Why the fault cannot be planted here (its module's cannot_plant()), or None."""
    check = getattr(importlib.import_module(fault.plugin), "cannot_plant", None)
    return check() if check is not None else None


def run_fault(fault: Fault, device: str, workdir: Path) -> Verdict:
    """The fault's set-up phases (each must pass), then the faulty run, judged."""
    spent = 0.0
    for phase in (*fault.phases, "fault"):
        run = run_conformance(
            device,
            fault.modules,
            workdir / phase,
            plugins=(fault.plugin,),
            select=fault.select,
            env={"FLAGOS_FAULT_DIR": str(workdir), "FLAGOS_FAULT_PHASE": phase},
        )
        spent += run.seconds
        if phase != "fault" and not run.passed():
            problem = f"set-up phase {phase!r} did not pass: {run.describe()}"
            return Verdict(fault, device, 0, None, spent, problem)
    return judge(fault, device, run, spent)


def run_healthy(device: str, modules: tuple[str, ...], workdir: Path) -> Run:
    """The same modules without any fault plugin."""
    return run_conformance(device, modules, workdir)
