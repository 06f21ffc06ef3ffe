"""Hypothesis profiles, torch's RNG under hypothesis, and per-example dynamo reset.

Profiles (load with ``--hypothesis-profile=NAME``; ``flagos-ci`` is loaded when the
plugin is active and no profile was chosen):

- ``flagos-ci``: derandomized (the same examples on every run and machine), no deadline
  (a first compile takes seconds), few examples, and a verdict at the first failure: no
  shrinking (each shrink step compiles a new graph, so a device that fails every graph
  spent minutes per test shrinking) and no hunt for further bugs. The strategies draw
  simplest-first, so the first failing example is already a small graph; flagos-dev and
  flagos-deep shrink.
- ``flagos-dev``: random examples, saved failures replayed first, no deadline.
- ``flagos-deep``: many random examples, for nightly or bring-up runs.

All three suppress the ``function_scoped_fixture`` health check: the plugin's fixtures are
per test on purpose (one cache directory, one worker pool check), and the per-example state
(dynamo caches, counters, torch's RNG) is reset per example by the hooks below.
"""

from __future__ import annotations

import sys
from typing import Any

PROFILE_CI = "flagos-ci"
PROFILE_DEV = "flagos-dev"
PROFILE_DEEP = "flagos-deep"
PROFILES = (PROFILE_CI, PROFILE_DEV, PROFILE_DEEP)


def register_profiles() -> None:
    from hypothesis import HealthCheck, Phase, settings

    per_test_fixtures = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
    settings.register_profile(
        PROFILE_CI,
        derandomize=True,
        deadline=None,
        max_examples=10,
        database=None,
        print_blob=True,
        suppress_health_check=per_test_fixtures,
        # stop at the first failing example: no shrink phase, no search for more bugs
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        report_multiple_bugs=False,
    )
    # Random examples say so explicitly: hypothesis's own default turns derandomize on when
    # it detects a CI environment (CI=true), and a profile inherits unset values from it.
    settings.register_profile(
        PROFILE_DEV,
        derandomize=False,
        deadline=None,
        max_examples=25,
        print_blob=True,
        suppress_health_check=per_test_fixtures,
    )
    settings.register_profile(
        PROFILE_DEEP,
        derandomize=False,
        deadline=None,
        max_examples=500,
        print_blob=True,
        suppress_health_check=per_test_fixtures,
    )


def load_default_profile(chosen: str | None) -> str:
    """Load flagos-ci unless the user chose a profile; return the profile in force."""
    from hypothesis import settings

    if not chosen:
        settings.load_profile(PROFILE_CI)
        return PROFILE_CI
    return chosen


class TorchRandom:
    """torch's global RNG (CPU generator plus the device's generators) in the shape
    hypothesis.register_random wants: seed / getstate / setstate. Hypothesis seeds it
    before every example and restores it afterwards, so examples replay exactly."""

    def __init__(self, device_type: str | None) -> None:
        self.device_type = device_type

    def _device_module(self) -> Any:
        import torch

        if self.device_type in (None, "cpu"):
            return None
        module = getattr(torch, self.device_type, None)
        try:
            if module is None or not module.is_available():
                return None
        except Exception:
            return None
        if not hasattr(module, "get_rng_state") or not hasattr(module, "set_rng_state"):
            return None
        return module

    def seed(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)  # seeds the CPU generator and every device generator

    def getstate(self) -> Any:
        import torch

        module = self._device_module()
        return torch.get_rng_state(), (module.get_rng_state() if module else None)

    def setstate(self, state: Any) -> None:
        import torch

        cpu_state, device_state = state
        torch.set_rng_state(cpu_state)
        module = self._device_module()
        if module is not None and device_state is not None:
            module.set_rng_state(device_state)


class DynamoResetPerExample:
    """Resets dynamo and clears its counters at the start of every hypothesis example.

    Hypothesis has no per-example setup hook for plain test functions, but it calls
    ``seed()`` on every registered random right before each example (and during shrinking
    and the final replay). Registering this object uses that call: without it, the examples
    of one test share dynamo's cache, and after ``recompile_limit`` (8) recompiles dynamo
    silently runs the rest eagerly -- a compile test that passes without compiling."""

    def seed(self, seed: int) -> None:
        if "torch._dynamo" in sys.modules:
            from ._torch_compat import reset_dynamo

            reset_dynamo()

    def getstate(self) -> None:
        return None

    def setstate(self, state: None) -> None:
        pass


# hypothesis keeps weak references only: these module globals keep the objects alive
_registered: list[Any] = []


def register_torch_with_hypothesis(device_type: str | None) -> None:
    from hypothesis import register_random

    if _registered:
        return
    _registered.extend([TorchRandom(device_type), DynamoResetPerExample()])
    for obj in _registered:
        register_random(obj)
