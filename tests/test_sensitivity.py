"""Kit sensitivity: the conformance suite catches each known class of device bug.

For every fault plugin of tests/faults/ (catalog.py) the conformance modules it names run
on a healthy device with the fault planted; the run must fail in the fault's capability
area with a reason that names the problem, and the very test that caught it must pass on
the healthy device. Each run is a subprocess (fresh torch, dynamo and worker pool), read
through the conformance JSON report. ``make sensitivity`` prints the same as a table.
"""

from __future__ import annotations

import pytest

from tests.faults import catalog, runner
from tests.requirements import host_only

# the faults are planted into the host accelerator on a CPU torch wheel (CI's setting)
pytestmark = [pytest.mark.slow, host_only]

DEVICES = tuple(dict.fromkeys(device for _, device in catalog.cases()))


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory):
    """runner.Run of every module the faults use, per device, without faults (run once)."""
    runs: dict[str, runner.Run] = {}

    def run(device: str) -> runner.Run:
        if device not in runs:
            workdir = tmp_path_factory.mktemp(f"healthy-{device}")
            runs[device] = runner.run_healthy(device, catalog.healthy_modules(device), workdir)
        return runs[device]

    return run


@pytest.mark.parametrize("device", DEVICES)
def test_healthy_device_passes(device, healthy):
    run = healthy(device)
    assert run.passed(), run.describe()
    assert run.report["summary"]["passed"] > 0


@pytest.mark.parametrize(
    "fault, device", catalog.cases(), ids=[f"{fault.name}-{device}" for fault, device in catalog.cases()]
)
def test_fault_is_caught(fault, device, healthy, tmp_path):
    why_not = runner.cannot_plant(fault)
    if why_not:
        pytest.skip(f"{fault.name} cannot be planted here: {why_not}")
    verdict = runner.run_fault(fault, device, tmp_path)
    assert verdict.caught, f"{fault.name} ({fault.bug}) on {device}: {verdict.problem}"
    nodeid = verdict.catching["nodeid"]
    # the test that caught the fault is not failing anyway: it passes on the healthy device
    assert healthy(device).outcome(nodeid) == "passed", f"{nodeid} without the fault: {healthy(device).describe()}"


def test_fault_plugins_leave_other_devices_alone(tmp_path):
    """Every plugin that does not apply to cpu, loaded at once on cpu: nothing changes."""
    plugins = tuple(fault.plugin for fault in catalog.FAULTS if "cpu" not in fault.devices)
    run = runner.run_conformance("cpu", ("test_runtime.py", "test_compile.py"), tmp_path, plugins=plugins)
    assert run.passed(), run.describe()
