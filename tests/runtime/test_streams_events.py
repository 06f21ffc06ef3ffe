"""Streams and events: per-stream order, cross-stream waits, real timing, lineage."""

import time

import pytest
import torch

from tests.requirements import two_devices
from torch_fl.flagos.streams import cuda_event_is_dummy, event_lineage

on_cuda_lineage = event_lineage() == "torch.cuda.Event"


def test_default_and_current_stream():
    s = torch.flagos.current_stream()
    assert s == torch.flagos.default_stream()
    assert s.device == torch.device("flagos", 0)
    assert s.flagos_stream != 0, "the raw stream handed to compiled code must be a real handle"


def test_new_streams_are_distinct_and_become_current_inside_with():
    s1, s2 = torch.flagos.Stream(), torch.flagos.Stream()
    assert s1 != s2 and s1.flagos_stream != s2.flagos_stream
    with torch.flagos.stream(s1):
        assert torch.flagos.current_stream() == s1
        with s2:
            assert torch.flagos.current_stream() == s2
        assert torch.flagos.current_stream() == s1
    assert torch.flagos.current_stream() == torch.flagos.default_stream()


@two_devices
def test_stream_on_other_device_switches_device_inside_with():
    s = torch.flagos.Stream(device=1)
    assert s.device_index == 1
    with torch.flagos.stream(s):
        assert torch.flagos.current_device() == 1
        assert torch.flagos.current_stream(1) == s
    assert torch.flagos.current_device() == 0


def test_torch_stream_and_accelerator_api_see_flagos_streams():
    s = torch.Stream(device="flagos")
    assert s.device.type == "flagos"
    with s:
        assert torch.flagos.current_stream() == s
    assert torch.accelerator.current_accelerator().type == "flagos"
    assert torch.accelerator.current_stream() == torch.flagos.default_stream()


def test_work_on_one_stream_is_ordered_and_query_is_truthful():
    s = torch.flagos.Stream()
    with torch.flagos.stream(s):
        x = torch.zeros(1000, device="flagos")
        for _ in range(5):
            x.add_(1)
        done = torch.flagos.Event()
        done.record()
    done.synchronize()
    assert done.query()
    assert s.query()
    assert x.sum().item() == 5000.0


def test_wait_event_orders_across_streams():
    producer, consumer = torch.flagos.Stream(), torch.flagos.Stream()
    with torch.flagos.stream(producer):
        x = torch.full((256,), 2.0, device="flagos")
        ready = producer.record_event()
    consumer.wait_event(ready)
    with torch.flagos.stream(consumer):
        y = x * 3
    consumer.synchronize()
    assert y.sum().item() == 256 * 6.0


def test_elapsed_time_is_a_real_time_in_milliseconds():
    a = torch.randn(256, 256, device="flagos")
    start, end = torch.flagos.Event(enable_timing=True), torch.flagos.Event(enable_timing=True)
    wall = time.perf_counter()
    start.record()
    for _ in range(20):
        a = a @ a
        a = a / a.norm()
    time.sleep(0.05)
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - wall) * 1000
    ms = start.elapsed_time(end)
    assert 50.0 <= ms <= wall_ms + 1.0, (ms, wall_ms)


def test_elapsed_time_needs_timing_events():
    start, end = torch.flagos.Event(), torch.flagos.Event()
    start.record()
    end.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):
        start.elapsed_time(end)


@pytest.mark.skipif(on_cuda_lineage, reason="on the cuda accelerator Event keeps torch.cuda.Event's lineage")
def test_flagos_event_is_a_torch_event_on_flagos():
    if torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices")
    e = torch.flagos.Event(enable_timing=True, device=1)
    assert type(e) is torch.Event
    assert isinstance(e, torch.flagos.Event)
    e.record(torch.flagos.Stream(device=1))
    assert e.device == torch.device("flagos", 1)
    assert not isinstance(torch.Event(device="cpu"), torch.flagos.Event)


# The autotuner's Event bug: inductor's autotuner times configs with
# Event(enable_timing=True); an Event class deriving from the CPU wheel's
# dummy torch.cuda.Event cannot even be built.
def test_dummy_cuda_event_is_detected_exactly_on_builds_without_cuda():
    assert cuda_event_is_dummy() == (not torch.cuda._is_compiled())
    if cuda_event_is_dummy():
        with pytest.raises(RuntimeError, match="Tried to instantiate dummy base class"):
            torch.cuda.Event(enable_timing=True)


@pytest.mark.skipif(not cuda_event_is_dummy(), reason="torch.cuda.Event is real in this (CUDA) torch build")
def test_an_event_deriving_from_the_dummy_cuda_event_fails_as_the_autotuner_did():
    class BrokenFlagosEvent(torch.cuda.Event):
        pass

    with pytest.raises(RuntimeError, match="Tried to instantiate dummy base class"):
        BrokenFlagosEvent(enable_timing=True)
    # The flagos Event takes the device-agnostic lineage and times for real.
    start, end = torch.flagos.Event(enable_timing=True), torch.flagos.Event(enable_timing=True)
    start.record()
    end.record()
    assert start.elapsed_time(end) >= 0.0


def test_event_lineage_follows_the_accelerator_and_the_torch_build():
    cuda_lineage = torch.flagos.accelerator_name() == "cuda" and not cuda_event_is_dummy()
    assert on_cuda_lineage == cuda_lineage
    e = torch.flagos.Event(enable_timing=True)
    assert isinstance(e, torch.flagos.Event)
    assert isinstance(e, torch.cuda.Event) == cuda_lineage


@pytest.mark.skipif(not on_cuda_lineage, reason="needs the cuda accelerator on a CUDA torch build")
def test_cuda_lineage_event_records_on_the_current_flagos_stream():
    busy = torch.flagos.Stream()
    a = torch.randn(4096, 4096, device="flagos")
    busy.wait_stream(torch.flagos.current_stream())  # inputs are made on the default stream
    with torch.flagos.stream(busy):
        start = torch.flagos.Event(enable_timing=True)
        start.record()
        for _ in range(200):  # about a second queued on `busy`
            a = a @ a / 4096
        end = torch.flagos.Event(enable_timing=True)
        end.record()  # no stream given: the current flagos stream, i.e. `busy`
    assert not end.query(), "the event must wait for the work queued on the flagos stream before it"
    idle = torch.flagos.Event()
    idle.record()  # the default flagos stream has nothing queued
    idle.synchronize()
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) > 1.0  # milliseconds of matmuls, timed on the GPU


def test_why_flagos_event_is_not_a_python_subclass_of_torch_event():
    class SubclassedEvent(torch.Event):
        pass

    start = SubclassedEvent(device="flagos", enable_timing=True)
    end = SubclassedEvent(device="flagos", enable_timing=True)
    start.record()
    end.record()
    try:
        start.elapsed_time(end)
    except (RuntimeError, TypeError) as e:  # torch 2.13 checks the exact type
        assert "torch.Event" in str(e)
