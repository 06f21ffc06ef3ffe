"""The lines pytest_report_header prints when a device is given."""

from __future__ import annotations

from typing import Any

from . import _torch_compat
from .report import versions

# device properties worth a glance; the JSON report has them all
HEADER_PROPERTIES = (
    "name",
    "total_memory",
    "multi_processor_count",
    "warp_size",
    "L2_cache_size",
    "major",
    "minor",
    "cpu_count",
    "capability",
)


def header_lines(current: Any) -> list[str]:
    v = versions()
    device = current.device
    lines = [f"flagos: torch {v['torch']}, triton {v['triton'] or 'not installed'}"]
    if device.available:
        lines.append(f"flagos: device {device.spec!r} -> {device.device} ({device.name()})")
        props = device.properties()
        shown = ", ".join(f"{k}={props[k]}" for k in HEADER_PROPERTIES if k in props and k != "name")
        if shown:
            lines.append(f"flagos: device properties: {shown}")
    else:
        lines.append(f"flagos: device {device.spec!r}: {device.unavailable_reason}; every test is skipped")
    caps = current.capabilities()
    lines.append(
        f"flagos: capabilities: codegen={caps.codegen} dtypes={','.join(caps.dtypes)} "
        f"worker_start_methods={','.join(caps.worker_start_methods)} "
        f"memory_limit={caps.memory_limit}"
    )
    config = _torch_compat.inductor_config()
    lines.append(
        f"flagos: compile workers: start={config.worker_start_method} threads={_torch_compat.compile_threads()}"
    )
    lines.append(f"flagos: hypothesis profile: {current.hypothesis_profile}")
    expectations = current.expectations
    lines.append(
        "flagos: expectations: "
        + (f"{expectations.file} ({len(expectations.entries)} entries)" if expectations else "none")
    )
    return lines
