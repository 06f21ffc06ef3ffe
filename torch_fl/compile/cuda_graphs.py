"""CUDA graphs for flagos graphs: ``torch.compile(mode="reduce-overhead")`` on the cuda accelerator.

Inductor records CUDA graphs only of graphs on one device of type "cuda"; its cudagraph trees are
CUDA's throughout (torch.cuda streams, the CUDA caching allocator's private pools, ``is_cuda``
checks). On the cuda accelerator a flagos kernel is a CUDA kernel on a CUDA stream over CUDA memory,
so a flagos graph can be captured as it is, given two things while it is captured:

- the flagos current stream is the capture stream: compiled code launches its Triton kernels on the
  flagos current stream, and the eager fallback (extern matmuls) runs CUDA's kernels on it;
- flagos allocations come from torch's CUDA caching allocator on that stream, hence from the graph's
  private pool, and are adopted as flagos memory (flagos's own pool would hand the graph's buffers to
  other tensors after the capture while replays still write them).

Inductor's recorder without trees (static inputs, a warm-up run, one capture, then copy the inputs
in and replay) does the rest. Its outputs are the graph's static buffers, which the next replay
overwrites; cuda's trees raise when such an output is read, here each call returns copies instead,
so a caller that keeps an output keeps its values. A backward graph's saved tensors are therefore
new each step, and are copied in like any other input.

Not captured, plainly compiled instead (counted in ``counters["inductor"]["cudagraph_skips"]``, the
reason logged once): flagos on the host accelerator (no CUDA graphs), graphs with random ops (flagos's
generator is not registered with the capture, so every replay would draw the same numbers; attention
with a constant ``dropout_p`` of 0 draws nothing and is captured), and graphs that mutate an input
(the warm-up and the capture would apply the mutation twice).
"""

import contextlib
import logging
import threading

import torch

from .. import _C
from . import _inductor_adapter as adapter

log = logging.getLogger(__name__)
_reported: set[str] = set()


def why_not_captured(graph) -> str | None:
    """Why a flagos graph (a ``torch.fx.Graph`` being lowered, or None) is not recorded as a CUDA graph."""
    if torch.flagos.accelerator_name() != "cuda":
        return (
            f"flagos: CUDA graphs need flagos on the cuda accelerator; this process runs it on "
            f"{torch.flagos.accelerator_name()!r} (compiled code runs without them)"
        )
    if adapter.cuda_graph_recorder() is None:
        return "flagos: this torch has no inductor CUDA graph recorder (compile_fx.cudagraphify_impl)"
    random_ops = sorted(
        {
            str(node.target)
            for node in (graph.nodes if graph is not None else ())
            if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()) and draws_random_numbers(node)
        }
    )
    if random_ops:
        return (
            f"flagos: random ops ({', '.join(random_ops[:3])}) are not captured: flagos's generator is "
            "not registered with CUDA graph capture, so replays would repeat the same numbers"
        )
    return None


def draws_random_numbers(node) -> bool:
    """Whether a call of a seeded op draws: the attention kernels are tagged seeded for their dropout,
    and with a constant ``dropout_p`` of 0 (every model in eval mode) they draw nothing."""
    schema = getattr(node.target, "_schema", None)
    for position, argument in enumerate(schema.arguments if schema is not None else ()):
        if argument.name == "dropout_p":
            if "dropout_p" in node.kwargs:
                value = node.kwargs["dropout_p"]
            else:
                value = node.args[position] if position < len(node.args) else argument.default_value
            return not (isinstance(value, (int, float)) and value == 0)
    return True


def report_skip(reason: str) -> None:
    """Log a skip reason once per process (inductor logs its own only for cuda graphs)."""
    if reason not in _reported:
        _reported.add(reason)
        log.warning("skipping CUDA graphs: %s", reason)


@contextlib.contextmanager
def _flagos_work_on_the_capture(device_index: int):
    """flagos's current stream is the capturing CUDA stream; its allocations come from CUDA's pool."""
    capture_stream = torch.cuda.current_stream(device_index)
    stream_id = _C._stream_from_native(capture_stream.cuda_stream, device_index)[0]
    previous_id = _C._current_stream(device_index)[0]
    _C._set_stream(stream_id, device_index)
    allocated_from_cuda = _C._allocate_from_compute_device(True)
    try:
        yield
    finally:
        _C._allocate_from_compute_device(allocated_from_cuda)
        _C._set_stream(previous_id, device_index)


def _capturable(model, device_index: int):
    def run(inputs):
        if torch.cuda.is_current_stream_capturing():
            with _flagos_work_on_the_capture(device_index):
                return model(inputs)
        return model(inputs)

    return run


def cudagraphify(
    model, static_input_idxs=(), *, device_index: int, mutated_input_idxs=(), is_backward=False, **_unused
):
    """inductor's ``compile_fx.cudagraphify`` for a flagos graph: records on the first call with each
    input signature, then replays."""
    if is_backward:
        # A backward's leading inputs are the forward's saved tensors, which inductor declares static
        # because cuda's trees keep forward outputs at fixed addresses; here the forward hands out
        # copies, new each step: copy them into the graph's buffers like any other input.
        static_input_idxs = ()
    if mutated_input_idxs:
        reason = "flagos: the graph mutates its inputs (the warm-up and the capture would apply it twice)"
        adapter.count_cuda_graph_skip()
        report_skip(reason)
        return model
    record = adapter.cuda_graph_recorder()

    def record_for(inputs):
        with adapter.preserved_rng_state():
            return record(_capturable(model, device_index), inputs, static_input_idxs)

    recordings = RecordingsBySignature(record_for, fixed=static_input_idxs)

    def run(new_inputs):
        # On flagos's current stream: flagos's streams, its default one too, are non-blocking CUDA
        # streams, so a replay on CUDA's own default stream would race the flagos work around it
        # (the input copies, the output copies, events).
        outputs = _C._on_compute_stream(device_index, recordings.replay, new_inputs)
        # The graph's output buffers are overwritten by the next replay: hand out copies.
        return _C._copies_of_outputs(outputs)

    return run


def _signature(inputs, positions=None) -> tuple:
    """What a recording holds fixed: each tensor input's shape and strides, each other input's value
    (of the inputs at ``positions``; all of them by default)."""
    chosen = inputs if positions is None else [inputs[i] for i in positions]
    return tuple((x.shape, x.stride()) if isinstance(x, torch.Tensor) else x for x in chosen)


class RecordingsBySignature:
    """One recording per input signature and thread, made by ``record(inputs)`` on first sight.

    A graph compiled with dynamic shapes takes its sizes as int inputs, and a recording replays the
    sizes it was captured with: another size's input does not fit its buffers (or, where it
    broadcasts, fills them), and its outputs keep the old size. cuda's trees record per shape as
    well; inductor's tree-less path instead specializes every size. The inputs at ``fixed``
    (inductor's static inputs: parameters and buffers, whose addresses a recording keeps) do not
    change between calls and are left out of the signature, which is computed on every call."""

    def __init__(self, record, fixed=()):
        self._record = record
        self._fixed = frozenset(fixed)
        self._varying = None  # the other positions, once the number of inputs is known
        self._per_thread = threading.local()

    def replay(self, inputs):
        if self._varying is None:
            self._varying = [i for i in range(len(inputs)) if i not in self._fixed]
        recordings = self._per_thread.__dict__.setdefault("recordings", {})
        key = _signature(inputs, self._varying)  # before the replay, which empties the list
        replay = recordings.get(key)
        if replay is None:
            replay = recordings[key] = self._record(inputs)
        return replay(inputs)
