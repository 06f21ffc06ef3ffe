"""Device runtime: writes whose destination shares memory with a source.

A device kernel that reads a source while writing an overlapping destination computes
garbage unless it refuses (as the CPU and CUDA kernels do: "some elements of the input
tensor and the written-to tensor refer to a single memory location") or works on a copy.
Overlap checks compare storages, so a device that runs another device's kernels on views of
its memory must give both views one storage, or these writes go silently wrong. Each case
here passes when the device raises a RuntimeError, or gives exactly what the same write
gives from a clone of the source.
"""

from __future__ import annotations

import pytest
import torch

from conformance_support import bullet, fail

pytestmark = pytest.mark.flagos_area("runtime")


def _arange(device):
    return torch.arange(10.0, device=device)


# name -> (the write on the device, the same write from a clone of the source)
CASES = {
    "x[1:].copy_(x[:-1])": (
        lambda x: x[1:].copy_(x[:-1]),
        lambda x: x[1:].copy_(x[:-1].clone()),
    ),
    "x[:-1].copy_(x[1:])": (
        lambda x: x[:-1].copy_(x[1:]),
        lambda x: x[:-1].copy_(x[1:].clone()),
    ),
    "x.view(2, 5).copy_(x.view(5, 2).t())": (
        lambda x: x.view(2, 5).copy_(x.view(5, 2).t()),
        lambda x: x.view(2, 5).copy_(x.view(5, 2).t().clone()),
    ),
    "torch.add(x[:-1], 1, out=x[1:])": (
        lambda x: torch.add(x[:-1], 1, out=x[1:]),
        lambda x: torch.add(x[:-1].clone(), 1, out=x[1:]),
    ),
    "torch.clamp(x[:-2], min=3, out=x[2:])": (
        lambda x: torch.clamp(x[:-2], min=3, out=x[2:]),
        lambda x: torch.clamp(x[:-2].clone(), min=3, out=x[2:]),
    ),
    "x[1:].add_(x[:-1])": (
        lambda x: x[1:].add_(x[:-1]),
        lambda x: x[1:].add_(x[:-1].clone()),
    ),
}


def test_overlapping_writes_raise_or_are_exact(flagos_device):
    problems = []
    for name, (write, from_clone) in CASES.items():
        expected = _arange("cpu")
        from_clone(expected)
        x = _arange(flagos_device)
        try:
            write(x)
            got = x.cpu()
        except RuntimeError:
            continue  # refused, as the CPU and CUDA kernels do
        except Exception as exc:
            problems.append(f"{name}: raised {type(exc).__name__} (expected a RuntimeError or the exact values): {exc}")
            continue
        if not torch.equal(got, expected):
            problems.append(f"{name}: silently wrong: {got.tolist()} (from a clone of the source: {expected.tolist()})")
    if problems:
        fail(
            "writes whose destination overlaps a source neither raise nor give the right values:\n"
            + bullet(problems)
            + "\n  (a device that runs another device's kernels on views of its own memory must give two views of "
            "one allocation one storage, or that device's overlap checks cannot see the overlap)",
            "copies",
            "eager",
        )


def test_writes_into_self_overlapping_tensors_raise_or_are_exact(flagos_device):
    # an expanded destination has several elements at one address: the CPU and CUDA refuse
    dst = torch.zeros(4, device=flagos_device).expand(3, 4)
    source = torch.arange(12.0).view(3, 4)
    try:
        dst.copy_(source.to(flagos_device))
        got = dst.cpu()
    except RuntimeError:
        return
    if not any(torch.equal(got, source[i].expand(3, 4)) for i in range(3)):
        fail(
            f"copy_ into an expanded tensor (several elements at one address) gave {got.tolist()}: "
            "neither a RuntimeError nor one of the source's rows",
            "copies",
        )
