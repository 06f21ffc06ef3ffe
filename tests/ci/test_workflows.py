"""The workflows call what a developer calls: make targets and .github/scripts, with every
accelerator's details read from its manifest, never copied into a workflow."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import run_python

from ci_helpers import REPO

yaml = pytest.importorskip("yaml")  # comes with mkdocs (make docs)

WORKFLOWS = REPO / ".github" / "workflows"
ALLOWED_ACTIONS = {
    "actions/checkout@v4",
    "actions/setup-python@v5",
    "actions/upload-artifact@v4",
    "actions/download-artifact@v4",
    "./.github/workflows/conformance.yml",
}
# what only a manifest, a make target or a script may say
INLINED = [
    "-m pytest",
    "--flagos-",
    "conformance/expectations",
    "pip install",
    "ruff",
    "mkdocs",
    "FLAGOS_ACCELERATOR",
    "TORCH_INDEX_URL",
    "download.pytorch.org",
]


def load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def steps(workflow: dict):
    for job_id, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


def run_lines(workflow: dict):
    for job_id, step in steps(workflow):
        for line in str(step.get("run", "")).splitlines():
            if line.strip() and not line.strip().startswith("#"):
                yield job_id, line.strip()


@pytest.fixture(scope="module", params=["ci.yml", "conformance.yml"])
def workflow(request) -> tuple[str, dict]:
    return request.param, load(request.param)


def test_only_the_pinned_actions(workflow):
    _name, data = workflow
    used = {step["uses"] for _, step in steps(data) if "uses" in step}
    used |= {job["uses"] for job in data["jobs"].values() if "uses" in job}
    assert used <= ALLOWED_ACTIONS, used - ALLOWED_ACTIONS


def test_no_inlined_commands_or_manifests(workflow):
    name, data = workflow
    for job_id, line in run_lines(data):
        for text in INLINED:
            assert text not in line, f"{name}: job {job_id}: {line!r} inlines {text!r}"
        # pytest itself runs only through a make target or `accelerators.py pytest NAME`
        assert not re.search(r"(^|[\s;&|(])pytest\s+-", line), f"{name}: job {job_id}: {line!r}"
    for job_id, job in data["jobs"].items():
        for key in job.get("env") or {}:
            assert key == "ACCELERATOR", f"{name}: job {job_id}: env {key} belongs in a manifest"


def test_referenced_scripts_exist(workflow):
    name, data = workflow
    for job_id, line in run_lines(data):
        for script in re.findall(r"\.github/scripts/[\w./-]+", line):
            assert (REPO / script).is_file(), f"{name}: job {job_id}: {script} is missing"


def test_make_targets_exist(workflow):
    name, data = workflow
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*)\s*:", makefile, re.M))
    for job_id, line in run_lines(data):
        m = re.match(r"make\s+([\w-]+)", line)
        if m:
            assert m.group(1) in targets, f"{name}: job {job_id}: make {m.group(1)} is not a Makefile target"


def test_conformance_workflow_is_reusable_and_discovers_its_matrix():
    data = load("conformance.yml")
    call = data["on"]["workflow_call"]["inputs"]["accelerator"]
    assert call["type"] == "string" and call["required"] is True
    discover, suite, matrix = (
        data["jobs"]["discover"],
        data["jobs"]["suite"],
        data["jobs"]["matrix"],
    )
    discover_runs = "\n".join(s.get("run", "") for s in discover["steps"])
    assert "accelerators.py validate" in discover_runs
    assert 'accelerators.py matrix "$ACCELERATOR"' in discover_runs
    assert discover["steps"][-1]["env"]["ACCELERATOR"] == "${{ inputs.accelerator }}"
    assert suite["strategy"]["matrix"] == "${{ fromJSON(needs.discover.outputs.matrix) }}"
    assert suite["runs-on"] == "${{ matrix.runs_on }}"
    assert suite["timeout-minutes"] == "${{ matrix.timeout_minutes }}"
    assert suite["container"]["image"] == "${{ matrix.container }}"
    runs = [s.get("run", "") for s in suite["steps"]]
    for command in (
        'accelerators.py env "$ACCELERATOR"',
        'accelerators.py setup "$ACCELERATOR"',
        "make build",
        'accelerators.py pytest "$ACCELERATOR"',
    ):
        assert any(command in r for r in runs), command
    assert any("GITHUB_STEP_SUMMARY" in r for r in runs)
    upload = [s for s in suite["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert (
        upload
        and "${{ matrix.report }}" in upload[0]["with"]["path"]
        and "${{ matrix.report_md }}" in upload[0]["with"]["path"]
    )
    merge = "\n".join(s.get("run", "") for s in matrix["steps"])
    assert "matrix_summary.py reports" in merge and "GITHUB_STEP_SUMMARY" in merge


def test_ci_runs_lint_tests_docs_and_the_hosted_accelerators():
    import json

    data = load("ci.yml")
    all_runs = [line for _, line in run_lines(data)]
    for command in ("make lint", "make docs", "make ci-configs", "make build"):
        assert command in all_runs, command
    assert any(line.startswith("make test") for line in all_runs)
    conformance = data["jobs"]["conformance"]
    assert conformance["uses"] == "./.github/workflows/conformance.yml"
    names = conformance["with"]["accelerator"]
    result = run_python(REPO / ".github/scripts/accelerators.py", "matrix", names)
    assert result.returncode == 0, result.stderr
    include = json.loads(result.stdout)["include"]
    assert {e["device"] for e in include} == {"cpu", "flagos"}
    for entry in include:  # ordinary Linux runners only
        assert entry["runs_on"] == ["ubuntu-latest"], entry
        assert entry["container"] == "", entry


def test_every_manifest_setup_is_a_script_in_the_repo():
    for path in sorted((REPO / ".github" / "configs").glob("*.yml")):
        setup = yaml.safe_load(path.read_text())["setup"]
        assert (REPO / setup).is_file(), f"{path.name}: {setup}"
        assert Path(setup).suffix == ".sh"
