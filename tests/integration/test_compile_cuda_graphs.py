"""torch.compile(mode="reduce-overhead") on flagos: CUDA graphs of flagos kernels on the cuda
accelerator (torch_fl/compile/cuda_graphs.py); elsewhere plain compiled code and the reason why."""

import logging
import threading
import types

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor import cudagraph_trees, output_code
from torch._inductor.cudagraph_utils import BoxedDeviceIndex
from torch._inductor.utils import BoxedBool

from tests.requirements import cuda_accelerator, host_only
from torch_fl.compile import cuda_graphs


@pytest.fixture
def replays(monkeypatch):
    """torch.cuda.CUDAGraph.replay calls, each as the CUDA stream it was launched on."""
    calls = []
    original = torch.cuda.CUDAGraph.replay

    def replay(self):
        calls.append(torch.cuda.current_stream().cuda_stream)
        return original(self)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", replay)
    return calls


@pytest.fixture
def skip_reasons(monkeypatch, caplog):
    """The skip reasons torch_fl reports, each logged once per process: forgotten for this test."""
    monkeypatch.setattr(cuda_graphs, "_reported", set())
    caplog.set_level(logging.WARNING, logger=cuda_graphs.__name__)
    return caplog


def _mlp(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)).to(device)


@cuda_accelerator
def test_reduce_overhead_replays_a_cuda_graph_and_matches_default_mode(fresh_inductor_cache, flagos_device, replays):
    model = _mlp(flagos_device)
    inputs = [torch.randn(32, 64, device=flagos_device) for _ in range(4)]
    with torch.no_grad():
        expected = [torch.compile(model)(x) for x in inputs]
        graphed = torch.compile(model, mode="reduce-overhead")
        got = [graphed(x) for x in inputs]  # all kept: each output must keep its own values
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert len(replays) == len(inputs)
    # On flagos's current stream, which is non-blocking: on CUDA's own stream a replay would race
    # the flagos work around it (the input and output copies).
    assert set(replays) == {torch.flagos.current_stream().native_handle}
    for e, g in zip(expected, got, strict=True):
        assert g.device.type == "flagos"
        assert torch.equal(g, e)


@cuda_accelerator
def test_reduce_overhead_trains_like_default_mode(fresh_inductor_cache, flagos_device, replays):
    def grads(mode):
        model = _mlp(flagos_device)
        step = torch.compile(lambda x: model(x).square().mean(), mode=mode)
        for seed in range(3):
            torch.manual_seed(seed)
            step(torch.randn(16, 64, device=flagos_device)).backward()
        return [p.grad for p in model.parameters()]

    expected = grads("default")
    counters.clear()
    got = grads("reduce-overhead")
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert len(replays) >= 3  # the forward's, at least
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)


@cuda_accelerator
def test_random_ops_are_not_captured_and_draw_anew(fresh_inductor_cache, flagos_device, skip_reasons):
    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + 1

    graphed = torch.compile(f, mode="reduce-overhead")
    x = torch.ones(4096, device=flagos_device)
    first, second = graphed(x), graphed(x)
    assert not torch.equal(first, second), "two calls drew the same dropout mask"
    assert counters["inductor"]["cudagraph_skips"] >= 1
    assert "random ops" in skip_reasons.text


@host_only
def test_reduce_overhead_on_the_host_runs_compiled_code_and_says_why(fresh_inductor_cache, flagos_device, skip_reasons):
    def f(x):
        return torch.relu(x) * 2 + 1

    x = torch.randn(256, device=flagos_device)
    out = torch.compile(f, mode="reduce-overhead")(x)
    torch.testing.assert_close(out.cpu(), f(x.cpu()))
    assert counters["inductor"]["cudagraph_skips"] == 1
    assert "CUDA graphs need flagos on the cuda accelerator" in skip_reasons.text


@cuda_accelerator
def test_dynamic_shapes_replay_the_recording_of_their_own_sizes(fresh_inductor_cache, flagos_device, replays):
    model = _mlp(flagos_device)
    graphed = torch.compile(model, mode="reduce-overhead", dynamic=True)
    with torch.no_grad():
        for rows in (8, 2, 8, 3):  # one graph for every size but 1 (which dynamo specializes)
            x = torch.randn(rows, 64, device=flagos_device)
            torch.testing.assert_close(graphed(x), model(x))
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert len(replays) == 4


def test_one_recording_per_input_signature_and_thread():
    made = []

    def record(inputs):
        made.append(cuda_graphs._signature(inputs))
        number = len(made)
        return lambda inputs: number

    recordings = cuda_graphs.RecordingsBySignature(record)
    a = torch.zeros(4, 2)
    assert [recordings.replay([a, 4]) for _ in range(2)] == [1, 1]  # recorded once, then replayed
    assert recordings.replay([torch.zeros(1, 2), 1]) == 2  # other sizes
    assert recordings.replay([a, 5]) == 3  # another size argument
    assert recordings.replay([a.t().contiguous().t(), 4]) == 4  # other strides
    assert recordings.replay([torch.ones(4, 2), 4]) == 1  # other values, same signature
    other_thread = []
    worker = threading.Thread(target=lambda: other_thread.append(recordings.replay([a, 4])))
    worker.start()
    worker.join()
    assert other_thread == [5]  # a capture belongs to the thread that made it


def test_static_inputs_are_left_out_of_the_signature():
    made = []
    recordings = cuda_graphs.RecordingsBySignature(lambda inputs: made.append(1) or (lambda _: len(made)), fixed=[0])
    weight = torch.zeros(4, 4)
    assert recordings.replay([weight, torch.zeros(2, 4)]) == 1
    assert recordings.replay([weight, torch.zeros(2, 4)]) == 1
    assert recordings.replay([weight, torch.zeros(3, 4)]) == 2  # the other input decides
    assert cuda_graphs._signature([weight, torch.zeros(3, 4), 7], [1, 2]) == ((torch.Size([3, 4]), (4, 1)), 7)


def test_a_flagos_backward_that_is_not_recorded_does_not_ask_for_cudas_tree_manager():
    # Inductor tells cuda's tree manager that a backward runs even where it records none of it
    # (output_code.maybe_handle_backward_generation, called by both post-compiles): a flagos
    # forward was recorded without a manager, so asking for one fails an assertion.
    assert cudagraph_trees.get_manager(0, create_if_none_exists=False) is None
    compiled_backward = types.SimpleNamespace(
        current_callable=lambda inputs: inputs,
        fx_kwargs={"is_backward": True, "is_inference": False},
        device_types={"flagos"},
        cudagraph_info=types.SimpleNamespace(cudagraph_fail_reasons=["a reason"]),
    )
    with inductor_config.patch({"triton.cudagraph_trees": True}):
        output_code.cudagraph_post_compile([], compiled_backward, BoxedBool(True), {}, BoxedDeviceIndex(0))
    assert compiled_backward.current_callable([1]) == [1]  # left as it was


def _call(target, *args, **kwargs):
    graph = torch.fx.Graph()
    query = graph.placeholder("query")
    return graph.call_function(target, (query, *args), kwargs)


def test_only_seeded_ops_with_a_dropout_to_draw_count_as_random():
    efficient = torch.ops.aten._scaled_dot_product_efficient_attention.default
    flash = torch.ops.aten._scaled_dot_product_flash_attention.default
    assert not cuda_graphs.draws_random_numbers(_call(efficient, None, None, None, False, 0.0))
    assert not cuda_graphs.draws_random_numbers(_call(efficient, None, None, None, False, dropout_p=0.0))
    assert not cuda_graphs.draws_random_numbers(_call(flash, None, None))  # the schema's default, 0.0
    assert cuda_graphs.draws_random_numbers(_call(efficient, None, None, None, False, 0.1))
    assert cuda_graphs.draws_random_numbers(_call(flash, None, None, 0.5))
    symbolic = _call(torch.ops.aten.sym_size.int, 0)
    assert cuda_graphs.draws_random_numbers(_call(flash, None, None, symbolic))  # not a constant
    assert cuda_graphs.draws_random_numbers(_call(torch.ops.aten.native_dropout.default, 0.0, True))  # no dropout_p
    assert cuda_graphs.draws_random_numbers(_call(torch.ops.aten.rand.default))


@cuda_accelerator
def test_attention_without_dropout_is_recorded(fresh_inductor_cache, flagos_device, replays):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 32, 64, device=flagos_device) for _ in range(3))

    def attend(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) * 2

    graphed = torch.compile(attend, mode="reduce-overhead")
    with torch.no_grad():
        outputs = [graphed(q, k, v) for _ in range(3)]
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert len(replays) == 3
    for out in outputs:
        torch.testing.assert_close(out, attend(q, k, v))
