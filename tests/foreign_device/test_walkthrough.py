"""docs/vendor-guide.md's walk-through, run as written on fdev: build, import, conformance.

One conformance run serves every assertion: 0 errors, every skip names the capability the
device lacks, every failure is one of fdev's real gaps (its expectations file) and names it,
the report is written.
"""

from __future__ import annotations

import json
import re

import pytest
import tomllib

from tests.foreign_device import walkthrough
from tests.foreign_device.conftest import REPO

# It builds fdev and starts fresh interpreters: the long tier, `make test-slow`.
pytestmark = pytest.mark.slow

GUIDE = REPO / "docs" / "vendor-guide.md"
EXPECTATIONS = REPO / "conformance" / "expectations" / "fdev.toml"

# the layout gaps of fdev (walkthrough.FAILURES runs them) and what each failure must say
GAPS = {
    "conformance/test_layouts.py::test_fake_strides_match_real_kernels[conv]": (
        r"'conv' corpus failed on fdev.*convolution_overrideable not implemented"
    ),
    "conformance/test_layouts.py::test_fake_strides_match_real_kernels[norm]": (
        r"'norm' corpus failed on fdev.*batch_norm_eval\[contiguous\] forward: stride/metadata mismatch.*"
        r"group_norm\[channels_last\] forward: raised RuntimeError: view size is not compatible"
    ),
    "conformance/test_layouts.py::test_fake_strides_match_real_kernels[norm_noncontiguous]": (
        r"'norm_noncontiguous' corpus failed on fdev.*batch_norm_eval\[transposed\] forward: stride/metadata mismatch"
    ),
    "conformance/test_layouts.py::test_fake_strides_match_real_kernels[by_device_type]": (
        r"'by_device_type' corpus failed on fdev.*fft.ifft\[dim 0\]: ended the process \(killed by SIG.*"
        r"nonzero_static forward: stride/metadata mismatch"
    ),
}


def test_the_guide_shows_the_commands_the_tests_run():
    lines = [line.strip() for line in GUIDE.read_text().splitlines()]
    missing = [command for command in walkthrough.COMMANDS if command not in lines]
    assert not missing, f"docs/vendor-guide.md does not show: {missing}"


@pytest.fixture(scope="module")
def conformance_run():
    for command in (walkthrough.BUILD, walkthrough.IMPORT):
        proc = walkthrough.run(command)
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
    walkthrough.REPORT.unlink(missing_ok=True)
    proc = walkthrough.run(walkthrough.CONFORMANCE)
    assert walkthrough.REPORT.exists(), f"no report:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc, json.loads(walkthrough.REPORT.read_text())


def test_import_prints_an_fdev_tensor():
    proc = walkthrough.run(walkthrough.IMPORT)
    assert proc.returncode == 0, proc.stderr
    assert "device='fdev:0'" in proc.stdout


def test_no_errors(conformance_run):
    proc, report = conformance_run
    errors = [t["nodeid"] for t in report["tests"] if t["outcome"] == "error"]
    assert not errors, errors
    assert proc.returncode == 0, proc.stdout[-6000:]


# a skip that is not about the device: an OpInfo sample the CPU cannot run either
NOT_THE_DEVICE = r".*\(the OpInfo sample, not the device\)$"


def test_every_skip_names_the_missing_capability(conformance_run):
    _, report = conformance_run
    skips = [t for t in report["tests"] if t["outcome"] == "skipped"]
    assert skips
    unnamed = [
        (t["nodeid"], t["reason"])
        for t in skips
        if not re.match(r"flagos: requires \S+", t["reason"]) and not re.match(NOT_THE_DEVICE, t["reason"])
    ]
    assert not unnamed, unnamed
    # the ops area still checks the eager half of what it cannot compile
    eager_checked = [t for t in skips if "(eager checked: matches the cpu" in t["reason"]]
    assert eager_checked, "the ops area skipped its cases without checking the eager half"


def test_every_failure_is_a_gap_of_the_device(conformance_run):
    _, report = conformance_run
    failing = {t["nodeid"]: t["outcome"] for t in report["tests"] if t["outcome"] in ("failed", "xfailed", "xpassed")}
    gaps = tomllib.loads(EXPECTATIONS.read_text())["xfail"]
    assert set(GAPS) <= {gap["id"] for gap in gaps}
    assert failing == {gap["id"]: "xfailed" for gap in gaps}


def _failure_sections(stdout):
    """{test name: its section of pytest's FAILURES}"""
    parts = re.split(r"^_{3,} (\S+) _{3,}$", stdout, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=False))


def test_every_failure_names_the_gap():
    proc = walkthrough.run(walkthrough.FAILURES)
    sections = _failure_sections(proc.stdout)
    names = {nodeid.split("::")[-1] for nodeid in GAPS}
    assert set(sections) == names, proc.stdout[-6000:]
    for nodeid, pattern in GAPS.items():
        text = sections[nodeid.split("::")[-1]]
        assert re.search(pattern, text, re.S), (nodeid, text[:3000])
        assert "where to look: the op's fake/meta kernel vs the device's real kernel" in text


def test_the_device_backend_is_what_compiles_it(conformance_run):
    _, report = conformance_run
    outcomes = {t["nodeid"].split("::")[-1]: t["outcome"] for t in report["tests"]}
    assert outcomes["test_compile_backends_really_compile"] == "passed"
    assert outcomes["test_device_backends_module_forward_and_backward"] == "passed"


def test_the_report_is_written(conformance_run):
    _, report = conformance_run
    assert report["device"]["type"] == "fdev"
    assert report["capabilities"]["codegen"] == "none"
    assert walkthrough.REPORT.with_suffix(".md").exists()
