"""The fault classes, each with the conformance area that must catch it.

``message`` is a regular expression that the caught test's one-line reason in the
conformance JSON report must match: the failure has to name the problem, not only fail.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str  # the plugin: tests.faults.<name>
    bug: str  # the real bug it models, one line
    area: str  # the capability area that must report it
    modules: tuple[str, ...]  # conformance modules to run (the narrowest that show it)
    message: str  # regex the failure's reason must match
    devices: tuple[str, ...] = ("flagos",)
    select: str | None = None  # a -k expression narrowing the modules
    phases: tuple[str, ...] = ()  # runs before the faulty one that must pass (FLAGOS_FAULT_PHASE)

    @property
    def plugin(self) -> str:
        return f"tests.faults.{self.name}"


FAULTS = (
    Fault(
        "dummy_cuda_event",
        "the device Event derives from the dummy torch.cuda.Event (autotuning cannot time kernels)",
        "autotune",
        ("test_autotune.py",),
        r"Tried to instantiate dummy base class",
    ),
    Fault(
        "blind_workers",
        "subprocess compile workers cannot see the device (no autoload, no fork fallback)",
        "workers",
        ("test_workers.py",),
        r"Could not find an active GPU backend",
    ),
    Fault(
        "constant_raw_stream",
        "get_raw_stream returns a constant (0), not the current stream",
        "streams",
        ("test_streams.py",),
        r"compiled code does not run on the current stream.*returns 0 both inside and outside",
    ),
    Fault(
        "elapsed_seconds",
        "Event.elapsed_time in seconds instead of milliseconds",
        "streams",
        ("test_streams.py",),
        r"elapsed_time between events 100 ms apart is [\d.]+, .*\(seconds\?\)",
    ),
    Fault(
        "conv_strides",
        "the conv kernel's strides disagree with its fake/meta kernel (channels_last)",
        "layouts",
        ("test_layouts.py",),
        r"fake-vs-real check\(s\) of the 'conv' corpus failed",
        devices=("flagos", "cpu"),
    ),
    Fault(
        "reduction_tail",
        "generated looped reductions drop their last partial block",
        "autotune",
        ("test_autotune.py",),
        r"CompiledMismatch: output.*compiled torch\.float32 result differs from the torch\.float64 reference",
    ),
    Fault(
        "leaky_launcher",
        "every compiled kernel launch leaks a device scratch buffer",
        "allocator",
        ("test_allocator.py",),
        r"\+\d+ bytes per call\): compiled code leaks device memory on every call",
    ),
    Fault(
        "eager_backend",
        "the device's torch.compile backend returns the graph uncompiled (silent eager)",
        "compile",
        ("test_compile.py",),
        r"backend='flagos' returned code that runs the graph's aten ops one by one",
    ),
    Fault(
        "missing_properties",
        "device properties lack multi_processor_count and report L2_cache_size = 0",
        "runtime",
        ("test_runtime.py",),
        r"no 'multi_processor_count'.*L2_cache_size = 0 is not",
    ),
    Fault(
        "invisible_matmul",
        "compiled code calls the device's matmul past the dispatcher, unseen by the profiler",
        "profiler",
        ("test_profiler.py",),
        r"compiled matmul under torch.profiler on the device shows no matmul op event",
    ),
    Fault(
        "stale_cache",
        "a stale shared TORCHINDUCTOR_CACHE_DIR masks a codegen change (reduction_tail)",
        "autotune",
        ("test_autotune.py",),
        r"CompiledMismatch: output.*compiled torch\.float32 result differs from the torch\.float64 reference",
        select="longer_than_one_block",
        phases=("warm", "masked"),
    ),
)


def by_name(name: str) -> Fault:
    for fault in FAULTS:
        if fault.name == name:
            return fault
    raise KeyError(f"no fault {name!r}; known: {', '.join(f.name for f in FAULTS)}")


def cases() -> list[tuple[Fault, str]]:
    """(fault, device) for every device each fault applies to."""
    return [(fault, device) for fault in FAULTS for device in fault.devices]


def healthy_modules(device: str, faults: tuple[Fault, ...] = FAULTS) -> tuple[str, ...]:
    """Every conformance module one of `faults` runs on `device`, in catalog order."""
    return tuple(dict.fromkeys(m for fault in faults if device in fault.devices for m in fault.modules))
