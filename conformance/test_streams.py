"""Streams and events: ordering on one stream, wait_event across streams, elapsed_time in
milliseconds, Event(enable_timing=True) through inductor's DeviceInterface (the autotuner's
own call), and compiled code launching on the current stream.

Streams and events are torch's device-agnostic torch.Stream and torch.Event (the device's
c10 DeviceGuardImpl), made current with torch.Stream's context manager and read back with
torch.accelerator.current_stream; where the device module has Stream/Event/stream()/
default_stream() of its own (torch.cuda-shaped extras), those are checked too.
"""

from __future__ import annotations

import re
import time

import pytest
import torch

from pytest_flagos import device_api

from conformance_support import (
    assert_close,
    bullet,
    device_index,
    fail,
    generated_sources,
)

pytestmark = pytest.mark.flagos_area("streams")


def _raw_handle(stream, device_type):
    """The stream's native handle: torch.Stream.native_handle (device-agnostic), else the
    `<device>_stream` attribute torch.cuda.Stream established (cuda_stream)."""
    try:
        return stream.native_handle
    except (AttributeError, RuntimeError):
        pass
    handle = getattr(stream, f"{device_type}_stream", None)
    if handle is None:
        fail(
            f"cannot read the raw handle of a {device_type} stream: Stream.native_handle "
            f"raised and there is no {device_type}_stream attribute",
            "guard",
        )
    return handle


def _stream_apis(flagos_device, device_module):
    """(name, new stream, make current, current stream) for the generic API and, where the
    device module has them, its own Stream/stream()/current_stream()."""
    apis = [
        (
            "torch.Stream",
            lambda: device_api.new_stream(flagos_device),
            lambda s: device_api.using_stream(flagos_device, s),
            lambda: device_api.current_stream(flagos_device),
        )
    ]
    extras = [getattr(device_module, name, None) for name in ("Stream", "stream", "current_stream")]
    if all(callable(fn) for fn in extras):
        apis.append((f"torch.{flagos_device.type}", *extras))
    return apis


@pytest.mark.requires("streams")
def test_current_default_and_new_streams(flagos_device, device_module):
    problems = []
    for where, new, using, current in _stream_apis(flagos_device, device_module):
        default = current()
        default_stream = getattr(device_module, "default_stream", None)
        if callable(default_stream) and default != default_stream():
            problems.append(f"{where}: the current stream is not default_stream() outside any stream context")
        if default.device != flagos_device:
            problems.append(f"{where}: the current stream's device is {default.device}, not {flagos_device}")
        s1, s2 = new(), new()
        if s1 == s2:
            problems.append(f"{where}: two new streams compare equal")
        with using(s1):
            if current() != s1:
                problems.append(f"{where}: inside stream(s1) the current stream is not s1")
            with using(s2):
                if current() != s2:
                    problems.append(f"{where}: inside nested stream(s2) the current stream is not s2")
            if current() != s1:
                problems.append(f"{where}: leaving nested stream(s2) did not restore s1")
        if current() != default:
            problems.append(f"{where}: leaving stream(s1) did not restore the default stream")
    if problems:
        fail("stream selection is broken:\n" + bullet(problems), "guard", "module")


@pytest.mark.requires("streams", "events")
def test_work_on_one_stream_runs_in_order(flagos_device):
    s = device_api.new_stream(flagos_device)
    with device_api.using_stream(flagos_device, s):
        x = torch.zeros(1 << 20, device=flagos_device)
        for i in range(1, 41):
            x.mul_(0.5).add_(i)  # order-dependent: any reordering changes the result
        done = device_api.new_event(flagos_device)
        done.record()
    done.synchronize()
    expected = torch.zeros(1)
    for i in range(1, 41):
        expected = expected * 0.5 + i
    if not done.query():
        fail("Event.query() is False after Event.synchronize() returned", "guard")
    if not s.query():
        fail("Stream.query() is False after its last event completed", "guard")
    got = x[:3].cpu()
    if not torch.allclose(got, expected.expand(3)):
        fail(
            f"40 dependent ops on one stream gave {got.tolist()}, expected "
            f"{expected.item()}: work on a stream ran out of order or the event completed "
            "before the work before it",
            "guard",
        )


@pytest.mark.requires("streams", "events")
def test_wait_event_orders_work_across_streams(flagos_device):
    producer, consumer = device_api.new_stream(flagos_device), device_api.new_stream(flagos_device)
    n = 384
    eye_ish = torch.full((n, n), 1.0 / n, device=flagos_device)
    producer.wait_stream(device_api.current_stream(flagos_device))  # eye_ish was made on this stream
    with device_api.using_stream(flagos_device, producer):
        x = torch.ones(n, n, device=flagos_device)
        for _ in range(6):  # enough work that an unordered consumer would read early values
            x = x @ eye_ish + 1.0
        ready = producer.record_event()
    consumer.wait_event(ready)
    with device_api.using_stream(flagos_device, consumer):
        y = x * 3.0
        finished = consumer.record_event()
    finished.synchronize()
    expected = 3.0 * 7.0  # x = 1 -> 2 -> 3 ... -> 7 (x @ (1/n) keeps the row mean)
    got = y.cpu()
    if not torch.allclose(got, torch.full_like(got, expected), rtol=1e-4):
        fail(
            f"after consumer.wait_event(producer's event) the consumer read "
            f"{got.flatten()[:4].tolist()}, expected {expected}: wait_event does not order "
            "the consumer stream after the producer's work",
            "guard",
        )
    if not ready.query() or not finished.query():
        fail("events report incomplete after synchronize()", "guard")


def _unit_guess(ms, wall_ms):
    """Which unit would make `ms` a plausible time for the 100+ ms the test waited."""
    for unit, scale in (("seconds", 1e3), ("microseconds", 1e-3), ("nanoseconds", 1e-6)):
        if 90.0 <= ms * scale <= wall_ms + 5.0:
            return f"{unit}?"
    return "a timestamp taken at the wrong time?"


@pytest.mark.requires("events")
def test_elapsed_time_is_plausible_milliseconds(flagos_device):
    """torch.Event's elapsed_time, and the device module's own Event where it has one."""
    for where, make_event in device_api.event_factories(flagos_device):
        start = make_event(enable_timing=True)
        end = make_event(enable_timing=True)
        a = torch.randn(128, 128, device=flagos_device)
        wall = time.perf_counter()
        start.record()
        for _ in range(10):
            a = torch.tanh(a @ a)
        device_api.synchronize(flagos_device)
        time.sleep(0.1)  # an idle stream reaches `end` only now: >= 100 ms between the events
        end.record()
        end.synchronize()
        wall_ms = (time.perf_counter() - wall) * 1000.0
        ms = start.elapsed_time(end)
        if not isinstance(ms, float):
            fail(f"{where}: elapsed_time returned {type(ms).__name__}, not float", "guard")
        if not 90.0 <= ms <= wall_ms + 5.0:
            unit = _unit_guess(ms, wall_ms)
            fail(
                f"{where}: elapsed_time between events 100 ms apart is {ms:.3f}, wall clock {wall_ms:.1f} "
                f"ms ({unit}); it must be milliseconds of device time",
                "guard",
                "event",
            )


@pytest.mark.requires("events")
def test_elapsed_time_requires_timing_events(flagos_device):
    for where, make_event in device_api.event_factories(flagos_device):
        start, end = make_event(), make_event()
        start.record()
        end.record()
        end.synchronize()
        try:
            start.elapsed_time(end)
        except (RuntimeError, ValueError):
            continue
        fail(
            f"{where}: elapsed_time between events created without enable_timing=True did not raise "
            "(torch.cuda raises; a silent value here is a timestamp nobody took)",
            "guard",
        )


@pytest.mark.requires("device_interface", "events")
def test_event_from_the_inductor_device_interface(flagos_device, device_interface):
    """InductorBenchmarker.get_event_pairs: device_interface.Event(enable_timing=True)."""
    error = None
    try:
        start = device_interface.Event(enable_timing=True)
        end = device_interface.Event(enable_timing=True)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is not None:
        fail(
            f"Event(enable_timing=True) from the device's inductor DeviceInterface raised "
            f'{error}; the autotuner cannot time any kernel ("Tried to instantiate dummy '
            'base class": the Event derives from the dummy torch.cuda.Event)',
            "event",
            "interface",
        )
    start.record()
    torch.randn(256, 256, device=flagos_device).sum()
    end.record()
    device_interface.synchronize()
    try:
        ms = start.elapsed_time(end)
    except Exception as exc:
        ms, error = None, f"{type(exc).__name__}: {exc}"
    if error is not None:
        fail(
            f"elapsed_time between two DeviceInterface Events raised {error} (torch 2.13's "
            "torch.Event.elapsed_time checks the exact type: a Python subclass of "
            "torch.Event is refused)",
            "event",
        )
    if not (isinstance(ms, float) and ms >= 0.0):
        fail(f"elapsed_time between DeviceInterface Events is {ms!r}", "event")


@pytest.mark.requires("device_interface", "streams")
def test_stream_native_handle_is_the_raw_stream(flagos_device, device_interface):
    """torch.Stream.native_handle: the device-agnostic handle (DeviceGuardImpl::
    getStreamNativeHandle) equals what inductor's get_raw_stream hands compiled code."""
    if not hasattr(torch.Stream, "native_handle"):
        pytest.skip("flagos: requires torch.Stream.native_handle: this torch has none (pytorch#171040)")
    s = device_api.new_stream(flagos_device)
    error = None
    try:
        handle = s.native_handle
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is not None:
        fail(
            f"Stream.native_handle raised {error}: implement "
            "DeviceGuardImpl::getStreamNativeHandle (libraries such as Triton read the raw "
            "stream through it)",
            "guard",
        )
    with device_api.using_stream(flagos_device, s):
        raw = device_interface.get_raw_stream(device_index(flagos_device))
    if raw != handle:
        fail(f"inside stream(s) get_raw_stream() is {raw}, s.native_handle {handle}", "raw_stream")


_IMPORT_RAW_STREAM = re.compile(r"^from (\S+) import (\S+) as get_raw_stream$", re.M)
_CALL = re.compile(r"def call\((self, )?args\)")


@pytest.mark.requires("triton_codegen", "device_interface", "streams", "events")
def test_compiled_code_runs_on_the_current_stream(flagos_device, device_interface, fresh_inductor_cache):
    """Triton wrapper code takes the raw stream (C++ code takes none)."""

    def f(x):
        return torch.sin(x) * 3 + 1

    index = device_index(flagos_device)
    compiled = torch.compile(f, backend="inductor", fullgraph=True)
    x = torch.randn(4096, device=flagos_device)
    compiled(x)  # compile outside the stream context
    sources = generated_sources(fresh_inductor_cache.inductor)
    wrappers = [(p, s) for p, s in sources if _CALL.search(s)]
    if not wrappers:
        fail("inductor wrote no wrapper module (def call(args)) for the compiled graph", "codegen")
    path, wrapper = wrappers[0]
    body = _CALL.split(wrapper)[-1]
    if "get_raw_stream(" not in body:
        fail(
            f"the wrapper's call() never asks for the raw stream ({path}): compiled code "
            "launches on a fixed stream, not the current one",
            "raw_stream",
        )
    found = _IMPORT_RAW_STREAM.search(wrapper)
    if found is None:
        fail(f"the wrapper ({path}) does not import get_raw_stream", "raw_stream")
    namespace = {}
    exec(found.group(0), namespace)
    wrapper_get_raw_stream = namespace["get_raw_stream"]

    s = device_api.new_stream(flagos_device)
    s.wait_stream(device_api.current_stream(flagos_device))  # x was made on the current stream
    outside = wrapper_get_raw_stream(index)
    with device_api.using_stream(flagos_device, s):
        inside = wrapper_get_raw_stream(index)
        expected_inside = device_interface.get_raw_stream(index)
        out = compiled(x)
        done = s.record_event()
    done.synchronize()
    problems = []
    if inside == outside:
        problems.append(
            f"the wrapper's get_raw_stream ({found.group(1)}.{found.group(2)}) "
            f"returns {inside} both inside and outside `with stream(s)`"
        )
    if inside != expected_inside:
        problems.append(
            f"inside `with stream(s)` the wrapper's get_raw_stream returns {inside}"
            f", the DeviceInterface's {expected_inside}"
        )
    handle = _raw_handle(s, flagos_device.type)
    if inside != handle:
        problems.append(f"inside `with stream(s)` compiled code gets stream {inside}, but s's handle is {handle}")
    if device_interface.get_raw_stream(index) != _raw_handle(
        device_api.current_stream(flagos_device), flagos_device.type
    ):
        problems.append("outside any stream context get_raw_stream() is not the current stream's handle")
    if problems:
        fail("compiled code does not run on the current stream:\n" + bullet(problems), "raw_stream")
    assert_close(
        out,
        f(x.cpu()),
        "compiled code run inside `with stream(s)` computed a wrong result (read after s's event completed)",
        "raw_stream",
        "guard",
    )
