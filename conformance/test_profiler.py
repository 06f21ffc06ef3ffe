"""Profiler: torch.profiler records the device's eager ops and compiled kernels with sane times,
and the event-timing profiler (torch.autograd.profiler.profile(use_device=...)) gives eager ops a
device time taken with the device's own events."""

from __future__ import annotations

import time

import pytest
import torch
from torch.autograd.profiler import profile as autograd_profile
from torch.profiler import ProfilerActivity, profile, supported_activities

from pytest_flagos import device_api
from pytest_flagos.requirements import profiler_activity

from conformance_support import bullet, fail

pytestmark = pytest.mark.flagos_area("profiler")

WHERE = (
    "  where to look: the device's profiler hooks: for a PrivateUse1 device the ProfilerStubs registered "
    "with torch::profiler::impl::registerPrivateUse1Methods (record/elapsed with the device's timing "
    "events) (flagos: csrc/runtime/profiler.cpp); for a compiled kernel, the launcher's record_function "
    "(inductor's CachingAutotuner)"
)


def _work(device: torch.device) -> None:
    x = torch.randn(128, 128, device=device)
    for _ in range(3):
        x = (x @ x).relu() / 128
    device_api.synchronize(device)


SHOWN = 5  # events named in a failure; the rest are counted


def _insane(events, wall_us: float) -> list[str]:
    problems = []
    bad_events = 0
    for e in events:
        times = (("cpu", e.cpu_time_total), ("device", e.device_time_total))
        bad = [
            f"{e.name}: {what} time {value:.1f} us outside [0, {wall_us:.0f}] us (wall clock)"
            for what, value in times
            if not 0 <= value <= wall_us
        ]
        bad_events += bool(bad)
        problems.extend(bad)
    if len(problems) > SHOWN:
        problems = [*problems[:SHOWN], f"... and {len(problems) - SHOWN} more event times outside the wall clock"]
    if events and bad_events * 2 > len(events):
        problems.append(
            f"{bad_events} of {len(events)} events have impossible times: the profiler takes them from the "
            "device's profiler stubs, which a PrivateUse1 device that registered none "
            "(registerPrivateUse1Methods) leaves undefined"
        )
    return problems


def _profiled(run, make_profiler):
    run()  # warm-up outside the profile
    start = time.perf_counter()
    with make_profiler() as prof:
        run()
    return prof, (time.perf_counter() - start) * 1e6


def test_profiler_records_eager_ops_with_sane_times(flagos_device):
    activities = [ProfilerActivity.CPU]
    activity = profiler_activity(flagos_device.type)
    if activity is not None and activity in supported_activities():
        activities.append(activity)
    prof, wall_us = _profiled(lambda: _work(flagos_device), lambda: profile(activities=activities))
    events = prof.events()
    names = {e.name for e in events}
    problems = _insane(events, wall_us)
    if not {"aten::mm", "aten::relu"} <= names:
        problems.append(f"aten::mm / aten::relu missing from the recorded events: {sorted(names)[:20]}")
    if problems:
        fail(
            f"torch.profiler.profile({[a.name for a in activities]}) on the device:\n" + bullet(problems) + "\n" + WHERE
        )


@pytest.mark.requires("profiler_device_timing", "events")
def test_event_timing_profiler_gives_eager_ops_device_time(flagos_device):
    prof, wall_us = _profiled(
        lambda: _work(flagos_device), lambda: autograd_profile(use_device=flagos_device.type, use_kineto=False)
    )
    problems = _insane(prof.function_events, wall_us)
    mm = [e for e in prof.function_events if e.name == "aten::mm"]
    if not mm or not any(e.device_time_total > 0 for e in mm):
        problems.append(f"aten::mm got no device time ({[e.device_time_total for e in mm]})")
    if problems:
        fail(
            f"torch.autograd.profiler.profile(use_device={flagos_device.type!r}, use_kineto=False) on the device:\n"
            + bullet(problems)
            + "\n"
            + WHERE
        )


@pytest.mark.requires("inductor")
def test_compiled_kernels_appear_in_the_profiler(flagos_device, flagos_capabilities, fresh_inductor_cache):
    def f(x):
        return (torch.sin(x) * 2).sum(-1)

    compiled = torch.compile(f, backend="inductor")
    x = torch.randn(64, 256, device=flagos_device)
    activities = [ProfilerActivity.CPU]
    prof, wall_us = _profiled(lambda: compiled(x), lambda: profile(activities=activities))
    events = prof.events()
    names = {e.name for e in events}
    problems = _insane(events, wall_us)
    if not any("Compiled" in n for n in names):
        problems.append(f"no compiled region among the events: {sorted(names)}")
    if flagos_capabilities.codegen == "triton" and not any(n.startswith("triton_") for n in names):
        problems.append(f"no Triton kernel among the events: {sorted(names)}")
    if problems:
        fail("a compiled function under torch.profiler on the device:\n" + bullet(problems) + "\n" + WHERE)


# The aten ops inductor leaves to the device's own kernels for a matmul (extern calls of its wrapper).
LIBRARY_MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_addmm_activation")


@pytest.mark.requires("inductor")
def test_compiled_codes_library_calls_appear_in_the_profiler(flagos_device, fresh_inductor_cache):
    # inductor writes a matmul as a call of the aten op (extern_kernels.mm(..., out=buf)), which
    # records its op event on the way through the dispatcher. A device whose wrapper calls its own
    # kernel instead, to save host time, must still take the dispatcher while a profiler listens.
    def f(x, w):
        return torch.relu(x @ w)

    compiled = torch.compile(f, backend="inductor")
    x = torch.randn(64, 128, device=flagos_device)
    w = torch.randn(128, 96, device=flagos_device)
    prof, _ = _profiled(lambda: compiled(x, w), lambda: profile(activities=[ProfilerActivity.CPU]))
    names = {e.name for e in prof.events()}
    if not names & set(LIBRARY_MATMULS):
        fail(
            "a compiled matmul under torch.profiler on the device shows no matmul op event "
            f"(none of {', '.join(LIBRARY_MATMULS)} among {sorted(names)}): the generated code runs the "
            "device's matmul past the dispatcher, where RecordFunction records op events, so profiles and "
            "FLOP counts of compiled models miss their matmuls.\n"
            "  where to look: the wrapper codegen registered for the device "
            "(register_backend_for_device) and what it writes for extern_kernels.mm/addmm/bmm; a direct "
            "call must fall back to the aten op while at::hasCallbacks() (flagos: compiled_mm in "
            "csrc/aten/direct_kernels.cpp)"
        )
