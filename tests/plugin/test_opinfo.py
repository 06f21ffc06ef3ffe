"""Op coverage (pytest_flagos/opinfo.py, conformance/ops_support.py and test_ops.py): case
selection, the eager-vs-CPU check, the verdicts, and a run over planted bad ops."""

from __future__ import annotations

import json
import textwrap
import types
from pathlib import Path

import pytest
import torch

from pytest_flagos import check, opinfo
from pytest_flagos.oracle import NotCompiledError
from tests.helpers import import_conformance

REPO = Path(__file__).resolve().parents[2]
F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16


def fake_op(name, dtypes, *, cuda=None, variant="", autograd=True, backward=None):
    tables = {"cpu": set(dtypes), "cuda": set(dtypes if cuda is None else cuda)}
    return types.SimpleNamespace(
        name=name,
        variant_test_name=variant,
        supports_autograd=autograd,
        supported_dtypes=lambda t: tables.get(t, tables["cpu"]),
        supported_backward_dtypes=lambda t: set(backward if backward is not None else tables.get(t, tables["cpu"])),
    )


# --- selection ----------------------------------------------------------------------------


def test_shares_partition_the_ops_the_same_way_every_time():
    names = [f"op{i}" for i in range(400)]
    buckets = [opinfo.stable_bucket(n, 8) for n in names]
    assert buckets == [opinfo.stable_bucket(n, 8) for n in names]
    assert set(buckets) == set(range(8))  # every bucket used
    quarter = {n for n in names if opinfo.in_share(n, (2, 8))}
    eighth = {n for n in names if opinfo.in_share(n, (1, 8))}
    assert eighth < quarter  # a larger share contains the smaller one
    assert {n for n in names if opinfo.in_share(n, (8, 8))} == set(names)
    assert 30 <= len(eighth) <= 70  # roughly an eighth


@pytest.mark.parametrize("text", ["", "1", "0/4", "5/4", "a/b", "1/2/3"])
def test_bad_share_says_what_a_share_is(text):
    with pytest.raises(ValueError, match="k/n"):
        opinfo.parse_share(text)


def test_dtype_tables_of_a_privateuse1_device_are_cpu_and_cuda_unless_the_manifest_names_one():
    assert opinfo.dtype_tables("cuda") == ("cuda",)
    assert opinfo.dtype_tables("cpu") == ("cpu",)
    assert opinfo.dtype_tables("flagos") == ("cpu", "cuda")
    assert opinfo.dtype_tables("flagos", {"opinfo_dtypes": "cuda"}) == ("cuda",)


def test_cases_take_claimed_dtypes_the_op_supports_on_every_table():
    ops = [
        fake_op("a", {F32, F64, F16}, cuda={F32, F16, BF16}),
        fake_op("b", {F32}, autograd=False),
        fake_op("c", {F32, F64}, backward={F64}),
    ]
    full = opinfo.TIERS["full"]
    got = [c.id + ("/bwd" if c.backward else "") for _, c in opinfo.cases(ops, "flagos", ("float32", "float16"), full)]
    # a: F32/F16 on both tables; b: no backward; c: float32 claimed, backward only in float64
    assert got == ["a-float32", "a-float16", "a-float32/bwd", "b-float32", "c-float32"]
    cuda = [c.id for _, c in opinfo.cases(ops, "cuda", ("float32", "bfloat16"), full) if not c.backward]
    assert cuda == ["a-float32", "a-bfloat16", "b-float32", "c-float32"]


def test_the_ci_tier_is_a_float32_forward_share():
    ops = [fake_op(f"op{i}", {F32, F64}) for i in range(200)]
    ci = list(opinfo.cases(ops, "cpu", ("float32", "float64"), opinfo.TIERS["ci"]))
    assert ci and all(c.dtype == "float32" and not c.backward for _, c in ci)
    k, n = opinfo.TIERS["ci"].share
    assert [c.op for _, c in ci] == [f"op{i}" for i in range(200) if opinfo.stable_bucket(f"op{i}", n) < k]


def test_the_op_database_loads_without_freezing_torch_backends_flags():
    ops = opinfo.load_op_db()
    assert len(ops) > 500
    names = [opinfo.full_name(op) for op in ops]
    assert len(set(names)) == len(names)  # full names identify the cases
    assert "max.reduction_with_dim" in names
    # PyTorch's test utilities freeze these flags on import; a plain assignment must still work
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = before


# --- the eager check ----------------------------------------------------------------------


def flat(call, *tensors, device=None):
    return opinfo.FlatSample(list(tensors), call, device)


@pytest.fixture
def flagos():
    if not hasattr(torch, "flagos") or not torch.flagos.is_available():
        pytest.skip("needs the flagos host device")
    return torch.device("flagos", 0)


def off_cpu(x, value):
    return value if x.device.type != "cpu" else 0


def test_eager_right_passes(flagos):
    opinfo.check_eager(flat(lambda d, x: x.sin(), torch.randn(5)), flagos, F32, grads=True, name="sin float32")


def test_eager_off_by_a_little_is_eager_wrong(flagos):
    sample = flat(lambda d, x: x.sin() + off_cpu(x, 1e-2), torch.randn(5))
    with pytest.raises(opinfo.CaseFailure) as info:
        opinfo.check_eager(sample, flagos, F32, grads=False, name="sin float32")
    assert info.value.verdict == "eager-wrong"
    assert str(info.value).startswith("eager-wrong: sin float32 forward on flagos:0 differs from cpu: output:")
    assert "float64 reference" in str(info.value)


def test_wrong_gradients_are_eager_wrong(flagos):
    def call(d, x):
        y = x.sin()
        if x.device.type != "cpu":  # same forward, wrong backward
            y = y + (x * 1e-2 - (x * 1e-2).detach())
        return y

    with pytest.raises(opinfo.CaseFailure, match="grad of input 0"):
        opinfo.check_eager(flat(call, torch.randn(5)), flagos, F32, grads=True, name="sin float32")


def test_integer_results_must_be_exact(flagos):
    sample = flat(lambda d, x: x.argsort() if x.device.type == "cpu" else x.argsort().flip(0), torch.randn(6))
    with pytest.raises(opinfo.CaseFailure, match="int64 values differ"):
        opinfo.check_eager(sample, flagos, F32, grads=False, name="argsort float32")


def test_raising_on_the_device_only_is_eager_wrong_and_on_both_not_runnable(flagos):
    def device_only(d, x):
        if x.device.type != "cpu":
            raise RuntimeError("kernel missing\nsecond line")
        return x

    with pytest.raises(
        opinfo.CaseFailure, match=r"raised on flagos:0 where cpu runs it: RuntimeError: kernel missing$"
    ):
        opinfo.check_eager(flat(device_only, torch.randn(3)), flagos, F32, grads=False, name="x float32")

    def everywhere(d, x):
        raise ValueError("bad sample")

    with pytest.raises(opinfo.SampleNotRunnable, match="ValueError: bad sample"):
        opinfo.check_eager(flat(everywhere, torch.randn(3)), flagos, F32, grads=False, name="x float32")


def test_a_sample_that_fails_on_cpu_in_the_device_module_is_the_devices(flagos):
    # torch calls a registered device's module from CPU code too (freeze_rng_state asks it for
    # get_rng_state): a device module lacking it fails the CPU run, and that is the device's gap
    module = torch.get_device_module("flagos").__name__

    def device_module_gap(d, x):
        raise AttributeError(f"module '{module}' has no attribute 'get_rng_state'")

    with pytest.raises(opinfo.CaseFailure, match=f"^eager-wrong: x float32 forward: .* in the device module {module}"):
        opinfo.check_eager(flat(device_module_gap, torch.randn(3)), flagos, F32, grads=False, name="x float32")

    def sample_gap(d, x):
        raise ValueError("bad sample")

    with pytest.raises(opinfo.SampleNotRunnable):
        opinfo.check_eager(flat(sample_gap, torch.randn(3)), flagos, F32, grads=False, name="x float32")


def test_random_ops_compare_shapes_not_values(flagos):
    opinfo.check_eager(flat(lambda d, x: torch.rand_like(x), torch.randn(4)), flagos, F32, grads=False, name="r")
    with pytest.raises(opinfo.CaseFailure, match="where cpu gives"):
        sample = flat(lambda d, x: torch.rand(4 if x.device.type == "cpu" else 5), torch.randn(4))
        opinfo.check_eager(sample, flagos, F32, grads=False, name="r")


def test_an_op_that_seeds_itself_is_random(flagos):
    # OpInfos of random ops (randint_like, bernoulli, ...) call wrapper_set_seed: every run draws
    # the same values on the cpu, so two seeds cannot tell, while another device's generator
    # draws others (cuda's randint_like failed as eager-wrong)
    ops = {opinfo.full_name(op): op for op in opinfo.load_op_db()}
    sample = opinfo.select_samples(ops["randint_like"], flagos, F32, False, 1)[0]
    assert opinfo.flatten(ops["randint_like"], sample, flagos).reseeds
    add = ops["add"]
    assert not opinfo.flatten(add, opinfo.select_samples(add, flagos, F32, False, 1)[0], flagos).reseeds

    def other_draws_on_the_device(d, x):
        return torch.full_like(x, 1.0 if x.device.type == "cpu" else 2.0)

    seeded = opinfo.FlatSample([torch.zeros(3)], other_draws_on_the_device, flagos, reseeds=True)
    opinfo.check_eager(seeded, flagos, F32, grads=False, name="randint_like")
    with pytest.raises(opinfo.CaseFailure, match="eager-wrong"):
        unseeded = opinfo.FlatSample([torch.zeros(3)], other_draws_on_the_device, flagos)
        opinfo.check_eager(unseeded, flagos, F32, grads=False, name="randint_like")


def test_undefined_values_compare_by_shape_and_dtype_only(flagos):
    # the label the op coverage area passes is "op dtype": "new_empty float32" must match too
    assert opinfo.has_undefined_values("new_empty float32") and opinfo.has_undefined_values("empty.variant")
    assert not opinfo.has_undefined_values("add float32")

    def garbage(d, x):
        return torch.full((4,), 1.0 if x.device.type == "cpu" else float("nan"))

    opinfo.check_eager(flat(garbage, torch.randn(2)), flagos, F32, grads=False, name="new_empty float32")
    fn = opinfo.values_erased(lambda x: (torch.empty(3, 2, dtype=torch.float16), x.new_empty(5), 7))
    a, b, n = fn(torch.randn(2))
    assert a.shape == (3, 2) and a.dtype == torch.float16 and not a.any()
    assert b.shape == (5,) and not b.any() and n == 7


def test_low_precision_may_be_as_far_from_float64_as_the_cpu_is(flagos):
    # a long bfloat16 sum: the CPU's own bf16 result is off the float64 one; the device
    # computing the same is right, one twice as far off (plus tolerance) is not
    x = torch.randn(4096)
    opinfo.check_eager(flat(lambda d, t: t.cumsum(0), x), flagos, BF16, grads=False, name="cumsum bfloat16")

    def worse(d, t):
        out = t.cumsum(0)
        if t.device.type == "cpu":
            return out
        reference = t.double().cumsum(0)
        return (reference + 8 * (out.double() - reference) + 1.0).to(out.dtype)

    with pytest.raises(opinfo.CaseFailure, match="bfloat16 error"):
        opinfo.check_eager(flat(worse, x), flagos, BF16, grads=False, name="cumsum bfloat16")


def test_on_cpu_eager_is_the_reference():
    cpu = torch.device("cpu")
    opinfo.check_eager(flat(lambda d, x: x + 1, torch.randn(3)), cpu, F32, grads=False, name="add")
    with pytest.raises(opinfo.SampleNotRunnable):
        opinfo.check_eager(flat(lambda d, x: 1 / 0, torch.randn(3)), cpu, F32, grads=False, name="div")


def test_factory_samples_follow_the_device(flagos):
    ops = {opinfo.full_name(op): op for op in opinfo.load_op_db()}
    op = ops["ones"]
    sample = opinfo.select_samples(op, flagos, F32, False, 1)[0]
    flat_sample = opinfo.flatten(op, sample, flagos)
    assert not flat_sample.tensors
    assert flat_sample.fn().device == flagos
    assert flat_sample.call(torch.device("cpu")).device.type == "cpu"
    opinfo.check_eager(flat_sample, flagos, F32, grads=False, name="ones float32")


def test_results_defined_up_to_sign_compare_as_the_opinfo_processes_them(flagos):
    # An SVD's singular vectors are unique up to sign: cuSOLVER and LAPACK return different
    # valid ones (cuda's linalg.svd was reported eager-wrong). The OpInfo's samples carry
    # output_process_fn_grad (|U|, S, |Vh|, U S Vh) for exactly this comparison.
    ops = {opinfo.full_name(op): op for op in opinfo.load_op_db()}
    samples = opinfo.select_samples(ops["linalg.svd"], flagos, F32, False, 4)

    def signs_flipped_on_the_device(a, *args, **kwargs):
        u, s, vh = torch.linalg.svd(a, *args, **kwargs)
        return (u, s, vh) if a.device.type == "cpu" else (-u, s, -vh)

    def wrong_singular_values_on_the_device(a, *args, **kwargs):
        u, s, vh = torch.linalg.svd(a, *args, **kwargs)
        return (u, s, vh) if a.device.type == "cpu" else (u, s * 1.1, vh)

    for sample in samples:
        flipped = opinfo.flatten(types.SimpleNamespace(op=signs_flipped_on_the_device), sample, flagos)
        opinfo.check_eager(flipped, flagos, F32, grads=False, name="linalg.svd float32")
    with pytest.raises(opinfo.CaseFailure, match="eager-wrong"):
        for sample in samples:
            wrong = opinfo.flatten(types.SimpleNamespace(op=wrong_singular_values_on_the_device), sample, flagos)
            opinfo.check_eager(wrong, flagos, F32, grads=False, name="linalg.svd float32")


def test_ops_the_opinfo_exempts_from_its_cpu_comparison_compare_shapes_only(flagos):
    # torch's own test_compare_cpu is skipped or expected to fail for some ops (unique's order,
    # integer overflow, LU pivots; mode's ties on cuda in float32): their values may differ
    # from the CPU's on a right device
    ops = {opinfo.full_name(op): op for op in opinfo.load_op_db()}
    assert "undefined" in opinfo.cpu_exemption(ops["unique"], ("cpu", "cuda"), "float32")
    assert "expects its cpu comparison to fail" in opinfo.cpu_exemption(ops["linalg.lu"], ("cpu",), "float32")
    assert opinfo.cpu_exemption(ops["mode"], ("cuda",), "float32")
    assert opinfo.cpu_exemption(ops["mode"], ("cpu",), "float32") is None
    assert opinfo.cpu_exemption(ops["mode"], ("cuda",), "float64") is None
    assert opinfo.cpu_exemption(ops["add"], ("cpu", "cuda"), "float32") is None
    tier = opinfo.Tier("t", share=(1, 1), forward_dtypes=("float32",), backward_dtypes=(), samples=1)
    chosen = {case.op: case for _, case in opinfo.cases([ops["unique"], ops["add"]], "cuda", ["float32"], tier)}
    assert chosen["unique"].tables == ("cuda",)

    other_order = flat(lambda d, x: x.flip(0) if x.device.type != "cpu" else x, torch.randn(6))
    opinfo.check_eager(other_order, flagos, F32, grads=False, name="unique float32", cpu_exemption="order")
    with pytest.raises(opinfo.CaseFailure, match="eager-wrong"):
        opinfo.check_eager(other_order, flagos, F32, grads=False, name="unique float32")
    other_shape = flat(lambda d, x: x[1:] if x.device.type != "cpu" else x, torch.randn(6))
    with pytest.raises(opinfo.CaseFailure, match="where cpu gives"):
        opinfo.check_eager(other_shape, flagos, F32, grads=False, name="unique float32", cpu_exemption="order")


def test_complex_results_compare_as_real_views():
    ops = {opinfo.full_name(op): op for op in opinfo.load_op_db()}
    op = ops["fft.ifft"]
    sample = opinfo.select_samples(op, torch.device("cpu"), F32, False, 1)[0]
    out = opinfo.flatten(op, sample, torch.device("cpu")).fn(*opinfo.flatten(op, sample, torch.device("cpu")).tensors)
    assert not out.is_complex() and out.shape[-1] == 2


def test_samples_skip_empty_tensors_when_limited():
    ops = {opinfo.full_name(op): op for op in opinfo.load_op_db()}
    cpu = torch.device("cpu")
    for name in ("sum", "nn.functional.conv2d", "cat"):
        (sample,) = opinfo.select_samples(ops[name], cpu, F32, False, 1)
        tensors = opinfo._tensors_in((sample.input, sample.args, sample.kwargs))
        assert tensors and all(t.numel() > 0 for t in tensors), name
    assert len(opinfo.select_samples(ops["sum"], cpu, F32, False, None)) > 1


# --- verdicts of the compiled check -------------------------------------------------------


def test_a_compiled_mismatch_is_compiled_wrong():
    failure = opinfo.classify_compiled(check.CompiledMismatch("output: differs\nmore"), "sin float32", "forward")
    assert failure.verdict == "compiled-wrong"
    assert str(failure) == "compiled-wrong: sin float32 forward: output: differs\nmore"


def test_a_compile_error_keeps_the_first_line_of_the_innermost_error():
    try:
        try:
            raise RuntimeError("triton: out of resources\ndetails")
        except RuntimeError as inner:
            raise AssertionError("backend='inductor' raised:\nRuntimeError: ...") from inner
    except AssertionError as outer:
        failure = opinfo.classify_compiled(outer, "sin float32", "forward")
    assert failure.verdict == "compile-error"
    assert failure.headline == (
        "compile-error: sin float32 forward: RuntimeError: triton: out of resources (raised as AssertionError)"
    )
    failure = opinfo.classify_compiled(NotCompiledError("on cpu: dynamo compiled nothing"), "x float32", "backward")
    assert failure.headline == "compile-error: x float32 backward: not compiled: on cpu: dynamo compiled nothing"


@torch.library.custom_op("flagos_test::fake_raises", mutates_args=())
def _fake_raises(x: torch.Tensor) -> torch.Tensor:
    return x.cos()


@_fake_raises.register_fake
def _(x):
    raise RuntimeError("meta kernel broken\nsecond line")


def test_an_error_dynamo_wraps_from_none_is_named_by_its_own_first_line():
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(_fake_raises, backend="eager")(torch.randn(3))
    failure = opinfo.classify_compiled(info.value, "x float32", "forward")
    assert failure.headline.startswith("compile-error: x float32 forward: RuntimeError: meta kernel broken (raised as ")


# --- the tier variables -------------------------------------------------------------------


@pytest.fixture
def ops_support():
    return import_conformance("ops_support")


def test_tier_variables(ops_support):
    assert ops_support.tier_from_env({}) == opinfo.TIERS["ci"]
    full = ops_support.tier_from_env({"FLAGOS_OPS_TIER": "full", "FLAGOS_OPS_SHARE": "1/4", "FLAGOS_OPS_SAMPLES": "2"})
    assert (full.name, full.share, full.samples, full.backward_dtypes) == ("full", (1, 4), 2, ("float32",))
    assert ops_support.tier_from_env({"FLAGOS_OPS_SAMPLES": "all"}).samples is None
    for env, where in (
        ({"FLAGOS_OPS_TIER": "fast"}, "FLAGOS_OPS_TIER='fast' is not a tier"),
        ({"FLAGOS_OPS_SHARE": "3/2"}, "FLAGOS_OPS_SHARE"),
        ({"FLAGOS_OPS_SAMPLES": "0"}, "FLAGOS_OPS_SAMPLES"),
    ):
        with pytest.raises(pytest.UsageError, match=where):
            ops_support.tier_from_env(env)
    assert ops_support.timeout_from_env({"FLAGOS_OPS_TIMEOUT": "2.5"}) == 2.5
    with pytest.raises(pytest.UsageError, match="FLAGOS_OPS_TIMEOUT"):
        ops_support.timeout_from_env({"FLAGOS_OPS_TIMEOUT": "soon"})


def test_without_a_code_generator_the_eager_half_runs_and_the_compiled_half_skips(ops_support, flagos):
    # a device in bring-up (no inductor code generator yet) still learns which eager kernels are wrong
    tier = opinfo.Tier("t", share=(1, 1), samples=1, forward_dtypes=("float32",), backward_dtypes=())

    def op(name, fn):
        def sample_inputs(device, dtype, requires_grad=False):
            return [
                types.SimpleNamespace(input=torch.linspace(-1, 1, 8, device=device, dtype=dtype), args=(), kwargs={})
            ]

        return types.SimpleNamespace(name=name, variant_test_name="", op=fn, sample_inputs=sample_inputs, decorators=())

    def not_to_be_called(*args, **kwargs):
        raise AssertionError("the compiled half ran on a device without a code generator")

    def run(name, fn):
        case = opinfo.Case(name, "float32", backward=False)
        ops_support.CaseRun(op(name, fn), case, flagos, tier, not_to_be_called, "no code generator").run()

    with pytest.raises(
        pytest.skip.Exception,
        match=r"^flagos: requires inductor .*\(eager checked: matches the cpu on 1 sample\(s\)\): no code gen",
    ):
        run("good", torch.sin)
    with pytest.raises(opinfo.CaseFailure, match=r"^eager-wrong: bad float32 forward on flagos:0"):
        run("bad", lambda x: x.sin() + (0.1 if x.device.type != "cpu" else 0.0))


# --- a run over planted bad ops: every verdict, a hang, a crash; the run goes on ----------

PLANTED = """
import os, sys, time, types
import torch

sys.path.insert(0, {conformance!r})
import ops_support

F = {{torch.float32}}


def sample(x):
    return types.SimpleNamespace(input=x, args=(), kwargs={{}})


def op(name, fn, samples=None):
    def sample_inputs(device, dtype, requires_grad=False):
        if samples is not None:
            return samples(device, dtype)
        return [sample(torch.linspace(-1, 1, 8, device=device, dtype=dtype, requires_grad=requires_grad))]

    return types.SimpleNamespace(
        name=name, variant_test_name="", supports_autograd=False, op=fn, sample_inputs=sample_inputs,
        supported_dtypes=lambda t: F, supported_backward_dtypes=lambda t: F,
    )


def off_device(x):
    return x.device.type != "cpu"


def hang(x):
    if off_device(x):
        while True:
            time.sleep(0.05)
    return x


def crash(x):
    if off_device(x):
        os.abort()
    return x


def no_samples(device, dtype):
    raise RuntimeError("factory kernel missing on " + str(device))


@torch.library.custom_op("planted::fake_raises", mutates_args=())
def compiled_only_error(x: torch.Tensor) -> torch.Tensor:
    return x.cos()


@compiled_only_error.register_fake
def _(x):  # what the compiler runs: raises, as a broken meta kernel or lowering would
    raise RuntimeError("lowering failed\\nmore")


OPS = [
    op("good", torch.sin),
    op("eager_bug", lambda x: x.sin() + (0.1 if off_device(x) else 0.0)),
    op("compiled_bug", lambda x: x.sin() + (0.5 if torch.compiler.is_compiling() else 0.0)),
    op("compile_error", compiled_only_error),
    op("sample_bug", torch.sin, samples=no_samples),
    op("hang", hang),
    op("crash", crash),
    # dynamo captures no graph: of any device's call, or of the device's call only
    op("uncapturable", lambda x: torch._dynamo.disable(torch.sin)(x)),
    op("uncapturable_on_device", lambda x: torch._dynamo.disable(torch.sin)(x) if off_device(x) else x.sin()),
]
ops_support.op_db = lambda: tuple(OPS)
"""

EXPECTED_VERDICTS = {
    "good": None,
    "eager_bug": "eager-wrong",
    "compiled_bug": "compiled-wrong",
    "compile_error": "compile-error",
    "sample_bug": "sample-error",
    "hang": "timeout",
    "uncapturable": None,
    "uncapturable_on_device": "compile-error",
}


@pytest.fixture
def planted(pytester, flagos_env, monkeypatch):
    pytest.importorskip("pytest_timeout")
    monkeypatch.setenv("FLAGOS_OPS_TIER", "full")
    monkeypatch.setenv("FLAGOS_OPS_SHARE", "1/1")
    monkeypatch.setenv("FLAGOS_OPS_TIMEOUT", "20")
    pytester.makeconftest(PLANTED.format(conformance=str(REPO / "conformance")))
    pytester.makepyfile(
        test_planted=textwrap.dedent(
            """
            from test_ops import pytest_generate_tests, pytestmark, test_forward  # noqa: F401
            """
        )
    )
    return pytester


def verdicts_of(junit: Path) -> dict[str, str | None]:
    import xml.etree.ElementTree as ET

    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        out[name.split("[", 1)[1].split("-")[0]] = props.get("flagos_verdict")
    return out


@pytest.mark.slow
def test_planted_bad_ops_get_their_verdicts_and_a_crash_does_not_stop_the_run(planted, run_pytest):
    result = run_pytest(
        "--flagos-device=flagos",
        "-n",
        "2",
        "--flagos-report=report.json",
        "--junitxml=junit.xml",
        "-o",
        "junit_family=xunit1",
        timeout=600,
    )
    report = json.loads((planted.path / "report.json").read_text())
    outcomes = {t["nodeid"].split("[")[1].split("-")[0]: (t["outcome"], t["reason"]) for t in report["tests"]}
    # every case is in the report, the crashed one too
    assert set(outcomes) == set(EXPECTED_VERDICTS) | {"crash"}, result.stdout.str()
    assert outcomes["good"][0] == "passed"
    # nothing to compile on the cpu either: upstream's gap, a skip that says so, not the device's failure
    assert outcomes["uncapturable"][0] == "skipped" and "on cpu either" in outcomes["uncapturable"][1]
    for name, verdict in EXPECTED_VERDICTS.items():
        if verdict:
            outcome, reason = outcomes[name]
            assert outcome == "failed" and reason.startswith(f"Failed: {verdict}: {name} float32"), (name, reason)
    assert "while running eagerly" in outcomes["hang"][1]
    assert "RuntimeError: lowering failed" in outcomes["compile_error"][1]
    assert "factory kernel missing" in outcomes["sample_bug"][1]
    # xdist reports the case its worker died in (the report counts it as an error), then goes on
    assert outcomes["crash"][0] in ("failed", "error") and "crashed" in outcomes["crash"][1], outcomes["crash"]
    # the verdict is a user property of each test report (what the report and junit carry)
    verdicts = verdicts_of(planted.path / "junit.xml")
    for name, verdict in EXPECTED_VERDICTS.items():
        assert verdicts.get(name) == verdict, (name, verdicts)


# --- scale-out: xdist and pytest-split shards give the outcomes of one serial run ---------


@pytest.mark.slow
def test_xdist_and_shards_give_the_outcomes_of_a_serial_run(pytester, run_pytest, monkeypatch, tmp_path):
    pytest.importorskip("pytest_split")
    import importlib.util

    spec = importlib.util.spec_from_file_location("_matrix_summary", REPO / ".github" / "scripts" / "matrix_summary.py")
    matrix_summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix_summary)

    monkeypatch.setenv("FLAGOS_OPS_TIER", "ci")
    monkeypatch.setenv("FLAGOS_OPS_SHARE", "1/80")  # a handful of ops
    target = str(REPO / "conformance" / "test_ops.py")
    runs = {
        "serial": [],
        "xdist": ["-n", "2"],
        "x.shard-1-of-2": ["--splits", "2", "--group", "1"],
        "x.shard-2-of-2": ["--splits", "2", "--group", "2"],
    }
    outcomes = {}
    for name, extra in runs.items():
        path = tmp_path / f"{name}.json"
        result = run_pytest(target, "--flagos-device=flagos", f"--flagos-report={path}", *extra, timeout=600)
        assert result.ret in (0, 1), result.stdout.str()
        outcomes[name] = {t["nodeid"]: t["outcome"] for t in json.loads(path.read_text())["tests"]}
    serial = outcomes["serial"]
    assert len(serial) >= 3 and any(n.startswith("conformance/test_ops.py::test_forward[") for n in serial)
    assert outcomes["xdist"] == serial
    shards = [outcomes["x.shard-1-of-2"], outcomes["x.shard-2-of-2"]]
    assert all(shards) and not set(shards[0]) & set(shards[1])
    assert {**shards[0], **shards[1]} == serial
    # the matrix merges the two shard reports into the row of the serial run
    rows = {}
    for label, paths in (("serial", ["serial.json"]), ("x", ["x.shard-1-of-2.json", "x.shard-2-of-2.json"])):
        reports = [matrix_summary.load_report(tmp_path / p)[0] for p in paths]
        merged, problems = matrix_summary.merge_shards(reports)
        assert problems == [] and len(merged) == 1
        rows[label] = merged[0]["summary"]
    assert rows["x"] == rows["serial"]


def test_cases_outside_the_tier_are_deselected_and_their_expectations_not_stale(planted, run_pytest, monkeypatch):
    monkeypatch.setenv("FLAGOS_OPS_TIER", "ci")
    monkeypatch.setenv("FLAGOS_OPS_SHARE", "1/1000")  # none of the planted ops, most likely
    planted_ops = [*EXPECTED_VERDICTS, "crash"]
    assert not [n for n in planted_ops if opinfo.in_share(n, (1, 1000))]
    planted.path.joinpath("exp.toml").write_text(
        '[[xfail]]\nid = "test_planted.py::test_forward[good-float32]"\nreason = "another tier\'s case"\n'
        '[[xfail]]\nid = "test_planted.py::test_forward[gone-float32]"\nreason = "no such op"\n'
    )
    result = run_pytest("--flagos-device=flagos", "--flagos-expectations=exp.toml", "--collect-only", "-q")
    out = result.stdout.str()
    assert f"no tests collected ({len(planted_ops)} deselected)" in out, out
    assert "'test_planted.py::test_forward[gone-float32]' matches no collected test" in out
    assert "good-float32]' matches no collected test" not in out
