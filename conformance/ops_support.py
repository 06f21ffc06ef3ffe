"""The op coverage area (test_ops.py): its tiers, its cases, and running one case.

The tier is chosen by environment variables, read here and nowhere else, so that the same
selection works with or without any plugin option and travels into pytest-xdist workers:

- ``FLAGOS_OPS_TIER``: ``ci`` (default) or ``full`` (pytest_flagos.opinfo.TIERS);
- ``FLAGOS_OPS_SHARE``: ``k/n``, the ops in stable-hash buckets 0..k-1 of n (overrides the
  tier's share; ``1/1`` is every op);
- ``FLAGOS_OPS_SAMPLES``: samples per case, a number or ``all`` (overrides the tier's);
- ``FLAGOS_OPS_TIMEOUT``: seconds one case may take (pytest-timeout), default 300.

The same tier gives the same test ids on every machine, so pytest-xdist and pytest-split
(``--splits N --group i``) divide one list of cases.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import pytest

from conformance_support import fail

ENV_TIER = "FLAGOS_OPS_TIER"
ENV_SHARE = "FLAGOS_OPS_SHARE"
ENV_SAMPLES = "FLAGOS_OPS_SAMPLES"
ENV_TIMEOUT = "FLAGOS_OPS_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
# where to look, by verdict (conformance_support.WHERE)
TOPICS = {
    "eager-wrong": ("eager",),
    "compiled-wrong": ("compiled",),
    "compile-error": ("codegen", "compiled"),
    "sample-error": ("eager",),
    "timeout": ("compiled", "triton"),
}


def _every_case() -> Any:
    """The tier of every case: every op, every claimed dtype, float32 backward."""
    from pytest_flagos.opinfo import TIERS

    return dataclasses.replace(TIERS["full"], share=(1, 1))


def tier_from_env(environ: Any = None) -> Any:
    """The tier the environment selects; pytest.UsageError naming the variable if it is bad."""
    from pytest_flagos.opinfo import TIERS, parse_share

    env = os.environ if environ is None else environ
    name = env.get(ENV_TIER, "ci").strip() or "ci"
    if name not in TIERS:
        raise pytest.UsageError(f"{ENV_TIER}={name!r} is not a tier (known: {', '.join(TIERS)})")
    tier = TIERS[name]
    share = env.get(ENV_SHARE, "").strip()
    if share:
        try:
            tier = dataclasses.replace(tier, share=parse_share(share))
        except ValueError as exc:
            raise pytest.UsageError(f"{ENV_SHARE}: {exc}") from None
    samples = env.get(ENV_SAMPLES, "").strip()
    if samples:
        if samples == "all":
            tier = dataclasses.replace(tier, samples=None)
        elif samples.isdigit() and int(samples) >= 1:
            tier = dataclasses.replace(tier, samples=int(samples))
        else:
            raise pytest.UsageError(f"{ENV_SAMPLES}={samples!r}: give a number of samples >= 1, or 'all'")
    return tier


def timeout_from_env(environ: Any = None) -> float:
    env = os.environ if environ is None else environ
    text = env.get(ENV_TIMEOUT, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise pytest.UsageError(f"{ENV_TIMEOUT}={text!r}: give the seconds one op case may take (> 0)")
    return value


@functools.lru_cache(maxsize=1)
def op_db() -> tuple[Any, ...]:
    from pytest_flagos.opinfo import load_op_db

    return tuple(load_op_db())


class TierSelection:
    """Deselects the cases outside the tier once collection is done.

    Every case of every tier is collected and those outside the chosen tier are deselected
    (pytest_deselected, as -k does): an expectations entry for a case of another tier or share
    is then not reported stale, and pytest-split (trylast) and xdist divide the selected cases.
    """

    name = "flagos-ops-tier-selection"

    def __init__(self) -> None:
        self.outside: set[tuple[str, str]] = set()  # (test function, case id)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        keep, drop = [], []
        for item in items:
            spec = getattr(item, "callspec", None)
            key = (getattr(item, "originalname", item.name), spec.id if spec is not None else "")
            (drop if key in self.outside else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


def _selection(config: pytest.Config) -> TierSelection:
    plugin = config.pluginmanager.get_plugin(TierSelection.name)
    if plugin is None:
        plugin = TierSelection()
        config.pluginmanager.register(plugin, TierSelection.name)
    return plugin


def parametrize(metafunc: pytest.Metafunc, backward: bool) -> None:
    """Parametrize `op_case` with every case for the session's device; those outside the
    environment's tier are deselected after collection (TierSelection)."""
    from pytest_flagos import session
    from pytest_flagos.opinfo import cases

    tier = tier_from_env()
    current = session.current()
    if current is None:
        params = [pytest.param(None, id="no-device", marks=pytest.mark.skip(reason="flagos: no device selected"))]
        metafunc.parametrize("op_case", params)
        return
    caps = current.capabilities()
    try:
        ops = op_db()
    except Exception as exc:  # a missing test dependency (expecttest): one failing test says so
        problem = f"the OpInfo database cannot be imported: {type(exc).__name__}: {exc}"
        metafunc.parametrize("op_case", [pytest.param(problem, id="op_db-unavailable")])
        return
    marks = []
    if metafunc.config.pluginmanager.hasplugin("timeout"):
        marks.append(pytest.mark.timeout(timeout_from_env(), method="signal"))
    args = (current.device.type, caps.dtypes)
    extra = dict(caps.extra)
    chosen = [(op, case) for op, case in cases(ops, *args, tier, extra) if case.backward == backward]
    everything = [(op, case) for op, case in cases(ops, *args, _every_case(), extra) if case.backward == backward]
    chosen_ids = {case.id for _, case in chosen}
    universe = everything + [(op, case) for op, case in chosen if case.id not in {c.id for _, c in everything}]
    params = [pytest.param((op, case), id=case.id, marks=marks) for op, case in universe]
    _selection(metafunc.config).outside |= {
        (metafunc.function.__name__, case.id) for _, case in universe if case.id not in chosen_ids
    }
    if not params:
        what = "backward" if backward else "forward"
        reason = f"no {what} case for this device (its manifest claims no dtype the ops support)"
        params = [pytest.param(None, id="none", marks=pytest.mark.skip(reason=reason))]
    metafunc.parametrize("op_case", params)


@dataclasses.dataclass
class CaseRun:
    """Runs one case; `phase` says what it was doing when a timeout interrupted it."""

    op: Any
    case: Any
    device: Any
    tier: Any
    oracle: Any
    compile_missing: str | None = None  # why the device cannot compile: eager half only
    phase: str = "starting"

    @property
    def name(self) -> str:
        return f"{self.case.op} {self.case.dtype}"

    @property
    def what(self) -> str:
        return "backward" if self.case.backward else "forward"

    def run(self) -> list[str]:
        """Every sample eagerly (against the CPU) and compiled (against eager); returns the
        reasons of samples that do not run on the CPU either. Raises CaseFailure."""
        import torch

        from pytest_flagos import opinfo
        from pytest_flagos.oracle import NotCompiledError

        dtype = getattr(torch, self.case.dtype)
        exemption = opinfo.cpu_exemption(self.op, self.case.tables, self.case.dtype)
        self.phase = "building the op's sample inputs on the device"
        try:
            samples = opinfo.select_samples(self.op, self.device, dtype, self.case.backward, self.tier.samples)
        except Exception as exc:
            raise opinfo.CaseFailure(
                "sample-error",
                f"sample-error: {self.name} {self.what}: the op's sample inputs cannot be built on "
                f"{self.device}: {opinfo._first_line(exc)}",
            ) from None
        if not samples:
            pytest.skip(f"{self.case.op} yields no sample input in {self.case.dtype}")
        not_runnable = []
        for index, sample in enumerate(samples):
            label = f"sample {index + 1} of {len(samples)}: ({opinfo.describe_sample(sample)})"
            flat = opinfo.flatten(self.op, sample, self.device)
            self.phase = f"running eagerly, {label}"
            try:
                opinfo.check_eager(
                    flat,
                    self.device,
                    dtype,
                    grads=self.case.backward,
                    name=self.name,
                    cpu_exemption=exemption,
                )
            except opinfo.SampleNotRunnable as exc:
                not_runnable.append(f"{label}: {exc}")
                continue
            except opinfo.CaseFailure as failure:
                raise opinfo.CaseFailure(failure.verdict, failure.headline, _join(label, failure.detail)) from None
            if self.compile_missing:
                continue
            self.phase = f"compiling and running compiled, {label}"
            undefined = opinfo.has_undefined_values(self.name)  # only shapes and dtypes compare
            try:
                self.oracle(
                    opinfo.values_erased(flat.fn) if undefined else flat.fn,
                    *flat.tensors,
                    grads=self.case.backward,
                    check_strides=False,  # strides are the layouts area's
                    allow_graph_breaks=True,  # a data-dependent op breaks the graph on every device
                    config_patches={"fallback_random": True},  # random ops draw as eager does
                )
            except Exception as exc:
                if isinstance(exc, NotCompiledError) and (why := opinfo.uncaptured_on_cpu(flat, dtype)):
                    pytest.skip(
                        f"{self.name} {self.what}: dynamo captures no graph of this sample on cpu either "
                        f"({why}): upstream dynamo, nothing to check on {self.device.type}"
                    )
                failure = opinfo.classify_compiled(exc, self.name, self.what)
                raise opinfo.CaseFailure(failure.verdict, failure.headline, _join(label, failure.detail)) from None
        if len(not_runnable) == len(samples):
            pytest.skip(f"{self.case.op} {self.case.dtype}: {not_runnable[0]} (the OpInfo sample, not the device)")
        if self.compile_missing:
            checked = len(samples) - len(not_runnable)
            # the capability first, as every capability skip; the eager note early (reports cut reasons)
            pytest.skip(
                f"flagos: requires inductor for the compiled half (eager checked: matches the cpu on {checked} "
                f"sample(s)): {self.compile_missing}"
            )
        return not_runnable


def _join(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


def why_not_compiled(config: pytest.Config) -> str | None:
    """Why the device has no inductor code generator (the compiled half cannot run), or None."""
    from pytest_flagos.requirements import missing_reason

    return missing_reason("inductor", config)


def run_case(
    op_case: Any,
    device: Any,
    oracle: Any,
    record_property: Any,
    backward: bool,
    compile_missing: str | None = None,
) -> None:
    """The body of test_forward / test_backward: verdict recorded, failure message starting
    with the verdict and the op. compile_missing: why the device cannot compile (eager only)."""
    from pytest_flagos.opinfo import PROP_OP, PROP_VERDICT, CaseFailure

    if isinstance(op_case, str):
        fail(f"{op_case} (install the suite's dependencies: `make build`, or pip install expecttest)")
    op, case = op_case
    assert case.backward == backward
    record_property(PROP_OP, case.op)
    runner = CaseRun(op, case, device, tier_from_env(), oracle, compile_missing)
    try:
        runner.run()
    except CaseFailure as failure:
        verdict, message = failure.verdict, str(failure)
    except pytest.fail.Exception as exc:
        if "pytest-timeout" not in str(exc):
            raise
        verdict = "timeout"
        message = (
            f"timeout: {runner.name} {runner.what}: no result after {timeout_from_env():g} s "
            f"({ENV_TIMEOUT}) while {runner.phase}"
        )
    else:
        return
    record_property(PROP_VERDICT, verdict)
    fail(message, *TOPICS[verdict])
