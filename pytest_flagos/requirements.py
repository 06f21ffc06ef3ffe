"""What a test needs from the device: ``@pytest.mark.requires("capability", ...)``.

Each capability below is a fact about the device under test, found from evidence (the
capability manifest, inductor's registries, a probe of the generic torch API) once per
run. A test whose capability is missing is skipped before any of its fixtures run, with a
reason that names the capability, why it is missing and how a device provides it; so a
device without, say, an inductor back end gets skips that say so instead of inductor's
``KeyError`` from a fixture. A capability that exists but misbehaves is not "missing":
the test runs and fails. Fixtures that need a capability call ``require()`` too, so they
skip the same way for a test that forgot to declare it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest

from . import _torch_compat as compat
from . import device_api
from . import session as state

MARKER = "requires"
MARKER_HELP = (
    f"{MARKER}(*capabilities): the test needs these capabilities of the device under test; "
    "without one it is skipped, naming it (pytest_flagos.requirements)"
)


@dataclasses.dataclass(frozen=True)
class Capability:
    name: str
    what: str  # what the test needs, in a few words
    provide: str  # how a device provides it
    missing: Callable[[Any], str | None]  # the session -> why it is missing, or None


def _codegen(current: Any) -> str:
    return current.capabilities().codegen


def _no_inductor(current: Any) -> str | None:
    if _codegen(current) == "none":
        return f"inductor has no code generator for {current.device.type!r} (capability manifest: codegen='none')"
    return None


def _no_triton(current: Any) -> str | None:
    codegen = _codegen(current)
    if codegen != "triton":
        return f"the device's inductor code generator is {codegen!r}, not 'triton' (capability manifest)"
    return None


def _no_device_interface(current: Any) -> str | None:
    try:
        compat.get_device_interface(current.device.type)
    except Exception as exc:
        return f"get_interface_for_device({current.device.type!r}) raised {type(exc).__name__}: {exc}"
    return None


def _probe(what: str, call: Callable[[], Any]) -> str | None:
    """None if `call` works or fails with anything but "not implemented" (then it is there
    and broken: the test runs and reports it); else why it is missing."""
    try:
        call()
    except Exception as exc:
        if device_api.is_not_implemented(exc):
            return f"{what} raised {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
    return None


def _no_streams(current: Any) -> str | None:
    device = current.device.device
    if device.type == "cpu":
        return "cpu runs work at once: it has no streams"

    def use_a_stream() -> None:
        stream = device_api.new_stream(device)
        with device_api.using_stream(device, stream):
            device_api.current_stream(device)

    return _probe(f"torch.Stream(device={str(device)!r}) and making it current", use_a_stream)


def _no_events(current: Any) -> str | None:
    device = current.device.device
    if device.type == "cpu":
        return "cpu has no device events"

    def time_two_events() -> None:
        start, end = device_api.new_event(device, True), device_api.new_event(device, True)
        start.record()
        end.record()
        end.synchronize()
        start.elapsed_time(end)

    return _probe(f"torch.Event(device={str(device)!r}, enable_timing=True) recorded and timed", time_two_events)


def _no_memory_stats(current: Any) -> str | None:
    device = current.device.device
    if device.type == "cpu":
        return "cpu memory comes from the host allocator, without device statistics"
    try:
        allocated = device_api.memory_function(device, "memory_allocated")
    except device_api.MissingAPI as exc:
        return str(exc)
    index = device_api.index_of(device)
    return _probe(f"the memory statistics' memory_allocated({index})", lambda: allocated(index))


def _no_memory_limit(current: Any) -> str | None:
    if not current.capabilities().memory_limit:
        return "no per-process memory limit can be set, so out-of-memory cannot be provoked safely (manifest)"
    return None


def _no_second_device(current: Any) -> str | None:
    count = device_api.device_count(current.device.device)
    if count < 2:
        return f"the device count is {count}"
    return None


def _no_compile_backend(current: Any) -> str | None:
    if device_compile_backends(current):
        return None
    return (
        f"no torch.compile backend is named after {current.device.type!r} and the capability manifest lists none "
        "in extra['compile_backends']"
    )


def _no_autocast(current: Any) -> str | None:
    import torch

    device_type = current.device.type
    if not torch.amp.is_autocast_available(device_type):
        return f"torch.amp.is_autocast_available({device_type!r}) is False"
    if device_type == compat.privateuse1_backend_name():
        if not hasattr(device_api.device_module(device_type), "get_amp_supported_dtype"):
            return f"torch.{device_type}.get_amp_supported_dtype() is missing (torch.autocast requires it of a PrivateUse1 device)"
    return None


def _no_c10d_backend(current: Any) -> str | None:
    import torch.distributed as dist

    if not dist.is_available():
        return "torch.distributed.is_available() is False"
    if dist.Backend.default_device_backend_map.get(current.device.type) is None:
        return f"torch.distributed.Backend.default_device_backend_map has no entry for {current.device.type!r}"
    return None


PROFILER_ACTIVITY_OF = {"cuda": "CUDA", "xpu": "XPU", "mtia": "MTIA", "hpu": "HPU"}


def profiler_activity(device_type: str) -> Any:
    """The torch.profiler.ProfilerActivity that records work of `device_type`, or None."""
    from torch.profiler import ProfilerActivity

    name = PROFILER_ACTIVITY_OF.get(device_type)
    if name is None and device_type == compat.privateuse1_backend_name():
        name = "PrivateUse1"
    return getattr(ProfilerActivity, name, None) if name else None


def _no_profiler_device_timing(current: Any) -> str | None:
    from torch.profiler import supported_activities

    activity = profiler_activity(current.device.type)
    if activity is None:
        return f"torch.profiler has no ProfilerActivity for {current.device.type!r}"
    if activity not in supported_activities():
        return f"ProfilerActivity.{activity.name} is not in torch.profiler.supported_activities()"
    return None


def device_compile_backends(current: Any) -> list[str]:
    """The device's own torch.compile backends: a dynamo backend named after the device
    (registered by its package, or its torch_dynamo_backends entry point) and the manifest's
    extra["compile_backends"]."""
    device_type = current.device.type
    known = set(compat.list_dynamo_backends())
    own = [device_type] if device_type in known else []
    extra = [str(name) for name in current.capabilities().extra.get("compile_backends", ()) if name not in own]
    return own + extra


_INDUCTOR_HOW = (
    "register an inductor back end for the device type (torch._inductor.codegen.common.register_backend_for_device "
    "with a Triton or C++ scheduling, and a DeviceInterface; flagos: torch_fl/compile/__init__.py)"
)

CAPABILITIES = {
    cap.name: cap
    for cap in (
        Capability("inductor", "an inductor code generator for the device", _INDUCTOR_HOW, _no_inductor),
        Capability(
            "triton_codegen",
            "inductor generating Triton kernels for the device (autotuning, Triton workers, raw streams)",
            "register inductor's TritonScheduling for the device type and a Triton back end that compiles for it "
            "(flagos: torch_fl/compile/, flagos_triton/), or declare codegen in the capability manifest",
            _no_triton,
        ),
        Capability(
            "device_interface",
            "inductor's DeviceInterface for the device",
            "register one with torch._dynamo.device_interface.register_interface_for_device "
            "(flagos: torch_fl/compile/device_interface.py)",
            _no_device_interface,
        ),
        Capability(
            "streams",
            "device streams through torch.Stream",
            "implement getNewStream/getStream/exchangeStream in the device's c10 DeviceGuardImpl "
            "(flagos: csrc/runtime/streams.cpp)",
            _no_streams,
        ),
        Capability(
            "events",
            "timing events through torch.Event",
            "implement record/block/queryEvent/synchronizeEvent/elapsedTime in the device's c10 DeviceGuardImpl "
            "(flagos: csrc/runtime/streams.cpp)",
            _no_events,
        ),
        Capability(
            "memory_stats",
            "device memory statistics (torch.accelerator.memory_stats and friends)",
            "make the device's allocator a c10 DeviceAllocator with stats (torch.accelerator.memory_*), or give "
            "torch.<device> memory_allocated/memory_reserved/max_memory_allocated/reset_peak_memory_stats/"
            "empty_cache/memory_stats (flagos: csrc/runtime/allocator.cpp, torch_fl/flagos/memory.py)",
            _no_memory_stats,
        ),
        Capability(
            "memory_limit",
            "a per-process device memory limit",
            "set_per_process_memory_fraction on torch.<device>, or an environment variable named in the manifest's "
            "extra['memory_limit_env'] (flagos: FLAGOS_HOST_MEMORY_LIMIT)",
            _no_memory_limit,
        ),
        Capability(
            "two_devices",
            "a second device",
            "run on a machine (or a device configuration) with two devices (flagos host: FLAGOS_HOST_DEVICE_COUNT)",
            _no_second_device,
        ),
        Capability(
            "autocast",
            "torch.autocast on the device",
            "register the device's Autocast kernels (TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m)) and give its "
            "device module get_amp_supported_dtype() (flagos: csrc/aten/autocast.cpp, torch_fl/flagos/amp.py)",
            _no_autocast,
        ),
        Capability(
            "c10d_backend",
            "a torch.distributed (c10d) backend for the device",
            "register one with torch.distributed.Backend.register_backend(name, creator, devices=[<device type>]) "
            "(flagos: torch_fl/distributed/, csrc/distributed/flagos_backend.cpp)",
            _no_c10d_backend,
        ),
        Capability(
            "profiler_device_timing",
            "device times in torch.profiler",
            "register the device's profiler stubs (torch::profiler::impl::registerPrivateUse1Methods, record and "
            "elapsed with the device's timing events) (flagos: csrc/runtime/profiler.cpp)",
            _no_profiler_device_timing,
        ),
        Capability(
            "compile_backend",
            "a torch.compile backend of the device's own",
            "register a dynamo backend named after the device (torch._dynamo.register_backend, or a "
            "torch_dynamo_backends entry point), or list it in the manifest's extra['compile_backends'] "
            "(flagos: torch_fl/compile/backend.py)",
            _no_compile_backend,
        ),
    )
}


def missing_reason(name: str, config: pytest.Config | None = None) -> str | None:
    """Why the session's device lacks `name` (None if it has it); probed once per session.

    config: the run's pytest.Config (request.config, item.config); without it, the run in
    progress (session.current's fallback)."""
    current = state.current(config)
    if current is None:
        pytest.skip("flagos: no device selected (pass --flagos-device=DEVICE or set FLAGOS_DEVICE)")
    capability = CAPABILITIES[name]
    found = current.missing_reasons
    if name not in found:
        try:
            found[name] = capability.missing(current)
        except Exception as exc:  # a probe that cannot even run: the capability is missing
            found[name] = f"checking it raised {type(exc).__name__}: {exc}"
    return found[name]


def skip_reason(name: str, why: str) -> str:
    capability = CAPABILITIES[name]
    return f"flagos: requires {name} ({capability.what}): {why}. To provide it: {capability.provide}"


def require(*names: str, config: pytest.Config | None = None) -> None:
    """Skip the running test (or fixture) unless the device has every capability in `names`.

    config: the run's pytest.Config, as for missing_reason."""
    for name in names:
        why = missing_reason(name, config)
        if why is not None:
            pytest.skip(skip_reason(name, why))


def _declared(item: pytest.Item) -> list[str]:
    names: list[str] = []
    for marker in item.iter_markers(MARKER):
        names.extend(str(arg) for arg in marker.args)
    return names


class RequirementsPlugin:
    """Checks the markers: unknown names at collection, missing capabilities at setup."""

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            unknown = sorted(set(_declared(item)) - set(CAPABILITIES))
            if unknown:
                raise pytest.UsageError(
                    f"flagos: {item.nodeid}: @pytest.mark.{MARKER}({', '.join(map(repr, unknown))}): unknown "
                    f"capability (known: {', '.join(sorted(CAPABILITIES))})"
                )

    @pytest.hookimpl(tryfirst=True)  # before fixtures are set up
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        require(*_declared(item), config=item.config)
