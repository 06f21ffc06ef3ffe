"""Hypothesis profiles, torch's RNG and dynamo per example, and the graph strategies."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import find, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pytest_flagos import strategies  # noqa: E402
from pytest_flagos.capabilities import Capabilities  # noqa: E402

PER_EXAMPLE = """
import torch
from hypothesis import given, settings, strategies as st
from torch._dynamo.utils import counters

FIRST_DRAWS = []


@given(n=st.integers(1, 50))
def test_each_example_starts_clean(flagos_device, n):
    # dynamo was reset and its counters cleared before this example
    assert not counters["stats"], dict(counters["stats"])
    # torch's RNG was seeded by hypothesis: every example draws the same first number
    FIRST_DRAWS.append(torch.rand(1).item())
    assert len(set(FIRST_DRAWS)) == 1
    # compile with a static shape: without the per-example reset, dynamo would hit its
    # recompile limit after 8 sizes and silently run the rest eagerly
    torch.compile(lambda x: x * 2, backend="eager", dynamic=False)(torch.ones(n))
    assert counters["stats"]["unique_graphs"] == 1


def test_profile_in_force():
    current = settings.default
    print("PROFILE", current.derandomize, current.max_examples, current.deadline)
"""


def test_per_example_reset_and_torch_rng(run_pytest, pytester):
    pytester.makepyfile(PER_EXAMPLE)
    result = run_pytest("--flagos-device=cpu", "-s", "--hypothesis-profile=flagos-dev")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*flagos: hypothesis profile: flagos-dev*", "*PROFILE False 25 None*"])


def test_default_profile_is_flagos_ci(run_pytest, pytester):
    pytester.makepyfile(PER_EXAMPLE)
    result = run_pytest("--flagos-device=cpu", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*flagos: hypothesis profile: flagos-ci*", "*PROFILE True 10 None*"])


def test_flagos_profiles_can_be_chosen_without_a_device(run_pytest, pytester):
    pytester.makepyfile("""
        from hypothesis import settings

        def test_p():
            assert settings.default.max_examples == 500
    """)
    run_pytest("--hypothesis-profile=flagos-deep").assert_outcomes(passed=1)


# -- the strategies, in-process: drawing and building modules needs no compile ---------------


@settings(max_examples=60, deadline=None, derandomize=True)
@given(case=strategies.graph_cases(capabilities=Capabilities("cpu", "cpp", ("float32",))))
def test_drawn_graphs_run_eagerly_and_their_source_rebuilds_them(case):
    module = case.build()
    outputs = module(*case.inputs())
    for replay in case.replays():
        module(*replay)
    assert outputs.dtype == torch.float32
    # the printed source rebuilds the same module: same weights, same outputs
    namespace: dict = {}
    exec(case.source, namespace)
    rebuilt = namespace["build_module"]()
    for (name, a), (_, b) in zip(module.state_dict().items(), rebuilt.state_dict().items(), strict=False):
        assert torch.equal(a, b), name
    x = namespace["make_input"](namespace["INPUT_SHAPE"])
    torch.testing.assert_close(rebuilt(x), outputs, rtol=0, atol=0)
    assert case.description in repr(case)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(case=strategies.graph_cases(capabilities=Capabilities("cpu", "cpp", ("float32", "float16"))))
def test_dtypes_are_limited_by_the_capabilities(case):
    assert case.dtype in ("float32", "float16")


def test_dynamic_dims_are_at_least_two_and_replayed():
    spec = find(strategies.input_specs(3, 8), lambda s: len(s.dynamic_dims) == 2 and s.replay_shapes)
    assert all(spec.shape[d] >= 2 for d in spec.dynamic_dims)
    assert all(shape[d] >= 2 for shape in spec.replay_shapes for d in spec.dynamic_dims)
    assert all(shape[-1] == 8 for shape in spec.replay_shapes)


def test_each_layer_kind_can_be_drawn():
    for kind in strategies.KINDS:
        graph = find(strategies.graphs(kinds=(kind,)), lambda g: True)
        assert graph.layers, kind
    with pytest.raises(ValueError, match="unknown layer kinds"):
        find(strategies.graphs(kinds=("conv",)), lambda g: True)


def test_normalizations_cover_all_four():
    norms = find(
        st.lists(strategies.normalizations(8), min_size=4, max_size=16),
        lambda norms: {n.name for n in norms} >= set(strategies.NORMS),
    )
    assert {n.name for n in norms} == set(strategies.NORMS)


# -- shrinking through the oracle with a planted compile bug (cheap backend) -----------------

PLANTED_SHRINK = """
import torch
from hypothesis import Phase, given, settings
from pytest_flagos.strategies import graph_cases


def corrupts_layer_norm(gm, example_inputs):
    # a planted "compiler bug": graphs with a layer_norm come out slightly wrong
    if not any("layer_norm" in str(node.target) for node in gm.graph.nodes):
        return gm.forward
    return lambda *args: [out + 1e-2 for out in gm(*args)]


# flagos-ci (derandomized) stops at the first failure; shrinking is what is tested here
@settings(max_examples=100, phases=tuple(Phase))
@given(case=graph_cases())
def test_graphs(case, assert_compiles_like_eager):
    assert_compiles_like_eager(case.build(), *case.inputs(), backend=corrupts_layer_norm,
                               **case.oracle_kwargs())
"""


@pytest.mark.slow
def test_shrinking_reaches_a_small_graph(run_pytest, pytester):
    pytester.makepyfile(PLANTED_SHRINK)
    result = run_pytest("--flagos-device=cpu", timeout=600)
    result.assert_outcomes(failed=1)
    # the minimal failing case: a single LayerNorm on the smallest float32 input
    result.stdout.fnmatch_lines(
        [
            "*flagos graph: LayerNorm(4)*",
            "*case=GraphCase<float32[[]1, 4]: LayerNorm(4)>,*",
        ]
    )


# -- a few drawn graphs through real inductor on cpu -----------------------------------------

INDUCTOR_GRAPHS = """
from hypothesis import given, settings
from pytest_flagos.strategies import graph_cases


@settings(max_examples=4)
@given(case=graph_cases(max_layers=3))
def test_drawn_graphs_compile_like_eager(case, assert_compiles_like_eager, fresh_inductor_cache):
    assert_compiles_like_eager(case.build(), *case.inputs(), **case.oracle_kwargs())
"""


@pytest.mark.slow
def test_drawn_graphs_through_inductor_on_cpu(run_pytest, pytester):
    pytester.makepyfile(INDUCTOR_GRAPHS)
    run_pytest("--flagos-device=cpu", timeout=600).assert_outcomes(passed=1)
