"""The unboxed kernels of the hottest ops (csrc/aten/direct_kernels.cpp).

They replace the boxed fallback for about forty op overloads, so they must do
everything it does: the compute device's own result, in-place and out=
arguments returned as the caller's tensor, out= resized, aliasing declared in
the schema and nothing more, errors that name the op and the device.
"""

import pytest
import torch
from torch.library import opcheck

import torch_fl
from tests.helpers import kernel_over_flagos
from tests.requirements import accelerator, two_devices

COMPUTE_DEVICE = {"host": "cpu", "cuda": "cuda"}[accelerator]
DIRECT = set(torch_fl._C._direct_kernels())


def _randn(*shape, positive=False):
    t = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    return t.abs() + 0.5 if positive else t


def _on_compute_device(fn, *cpu_args):
    """fn's result on the compute device, brought back to the CPU: what flagos must equal bit for bit
    (the CPU's own kernels round differently from a GPU's, exp and matmul in the last bits)."""
    return fn(*(a.to(COMPUTE_DEVICE) for a in cpu_args)).cpu()


def _empty():
    return torch.empty(0)  # out= of the wrong size: the kernel must resize it


# op overload name -> (args, kwargs) on the CPU; the test moves them to each device.
CASES = {
    "aten::mm": lambda: ((_randn(4, 3), _randn(3, 5)), {}),
    "aten::mm.out": lambda: ((_randn(4, 3), _randn(3, 5)), {"out": _empty()}),
    "aten::addmm": lambda: ((_randn(5), _randn(4, 3), _randn(3, 5)), {"beta": 0.5, "alpha": 2.0}),
    "aten::addmm.out": lambda: ((_randn(5), _randn(4, 3), _randn(3, 5)), {"out": _empty()}),
    "aten::bmm": lambda: ((_randn(2, 4, 3), _randn(2, 3, 5)), {}),
    "aten::bmm.out": lambda: ((_randn(2, 4, 3), _randn(2, 3, 5)), {"out": _empty()}),
    "aten::add.Tensor": lambda: ((_randn(6, 5), _randn(5)), {"alpha": 2}),
    "aten::add_.Tensor": lambda: ((_randn(6, 5), _randn(5)), {"alpha": 2}),
    "aten::add.out": lambda: ((_randn(6, 5), _randn(6, 5)), {"out": _empty()}),
    "aten::sub.Tensor": lambda: ((_randn(6, 5), _randn(6, 5)), {}),
    "aten::sub.out": lambda: ((_randn(6, 5), _randn(6, 5)), {"out": _empty()}),
    "aten::mul.Tensor": lambda: ((_randn(6, 5), torch.tensor(3.0)), {}),  # with a 0-dim CPU scalar
    "aten::mul_.Tensor": lambda: ((_randn(6, 5), _randn(6, 5)), {}),
    "aten::mul.out": lambda: ((_randn(6, 5), _randn(6, 5)), {"out": _empty()}),
    "aten::div.Tensor": lambda: ((_randn(6, 5), _randn(6, 5, positive=True)), {}),
    "aten::div.out": lambda: ((_randn(6, 5), _randn(6, 5, positive=True)), {"out": _empty()}),
    "aten::pow.Tensor_Scalar": lambda: ((_randn(9, positive=True), 1.7), {}),
    "aten::pow.Tensor_Scalar_out": lambda: ((_randn(9, positive=True), 1.7), {"out": _empty()}),
    "aten::mean.dim": lambda: ((_randn(6, 7), [1], True), {}),
    "aten::mean.out": lambda: ((_randn(6, 7), [1], False), {"out": _empty()}),
    "aten::sum.dim_IntList": lambda: ((_randn(6, 7), [0]), {}),
    "aten::sum.IntList_out": lambda: ((_randn(6, 7), [0, 1]), {"out": _empty()}),
    "aten::rsqrt": lambda: ((_randn(8, positive=True),), {}),
    "aten::rsqrt.out": lambda: ((_randn(8, positive=True),), {"out": _empty()}),
    "aten::neg": lambda: ((_randn(8),), {}),
    "aten::neg.out": lambda: ((_randn(8),), {"out": _empty()}),
    "aten::exp": lambda: ((_randn(8),), {}),
    "aten::exp.out": lambda: ((_randn(8),), {"out": _empty()}),
    "aten::silu": lambda: ((_randn(8),), {}),
    "aten::silu.out": lambda: ((_randn(8),), {"out": _empty()}),
    "aten::sigmoid": lambda: ((_randn(8),), {}),
    "aten::sigmoid.out": lambda: ((_randn(8),), {"out": _empty()}),
    "aten::tanh": lambda: ((_randn(8),), {}),
    "aten::tanh.out": lambda: ((_randn(8),), {"out": _empty()}),
    "aten::relu": lambda: ((_randn(8),), {}),
    # Once per Qwen3 forward: the rotary embedding's cos and sin, and the causal mask's tril.
    "aten::cos": lambda: ((_randn(8),), {}),
    "aten::cos.out": lambda: ((_randn(8),), {"out": _empty()}),
    "aten::sin": lambda: ((_randn(8),), {}),
    "aten::sin.out": lambda: ((_randn(8),), {"out": _empty()}),
    "aten::tril": lambda: ((_randn(5, 5), -1), {}),
    "aten::tril.out": lambda: ((_randn(4, 6),), {"out": _empty()}),
    "aten::cat": lambda: (([_randn(3, 2), _randn(1, 2), _randn(2, 2)], 0), {}),
    "aten::cat.out": lambda: (([_randn(3, 2), _randn(3, 4)], 1), {"out": _empty()}),
    "aten::where.self": lambda: ((_randn(6) > 0, _randn(6), _randn(6)), {}),
    "aten::where.self_out": lambda: ((_randn(6) > 0, _randn(6), _randn(6)), {"out": _empty()}),
    "aten::fill_.Scalar": lambda: ((_randn(5, 3), 2.5), {}),
    "aten::_softmax": lambda: ((_randn(4, 10), -1, False), {}),
    "aten::_softmax.out": lambda: ((_randn(4, 10), 0, False), {"out": _empty()}),
    "aten::gelu": lambda: ((_randn(8),), {"approximate": "tanh"}),
    "aten::gelu.out": lambda: ((_randn(8),), {"out": _empty()}),
    # Output, mean and rstd; with and without the optional weight and bias.
    "aten::native_layer_norm": lambda: ((_randn(3, 8), [8], _randn(8), None, 1e-5), {}),
    "aten::index_select": lambda: ((_randn(7, 4), 0, torch.tensor([6, 0, 6, 2])), {}),  # an embedding's lookup
    "aten::index_select.out": lambda: ((_randn(7, 4), 1, torch.tensor([3, 1])), {"out": _empty()}),
    # nn.MultiheadAttention's inference path: query, key, value, embed dim, heads, the in and out
    # projections' weights and biases, no mask; with the attention weights.
    "aten::_native_multi_head_attention": lambda: (
        (_randn(2, 5, 8), _randn(2, 5, 8), _randn(2, 5, 8), 8, 2, _randn(24, 8), _randn(24), _randn(8, 8), _randn(8)),
        {"need_weights": True},
    ),
}


def _overload(name):
    op, _, overload = name.removeprefix("aten::").partition(".")
    return getattr(getattr(torch.ops.aten, op), overload or "default")


def _moved(value, device):
    if isinstance(value, torch.Tensor):
        return value if value.dim() == 0 else value.to(device)  # 0-dim CPU scalars stay on the CPU
    if isinstance(value, list):
        return [_moved(v, device) for v in value]
    return value


def _on(device, args, kwargs):
    return tuple(_moved(a, device) for a in args), {k: _moved(v, device) for k, v in kwargs.items()}


def _written(op, args, kwargs):
    """The argument an in-place or out= op writes and returns, else None."""
    if "out" in kwargs:
        return kwargs["out"]
    first = op._schema.arguments[0].alias_info
    return args[0] if first is not None and first.is_write else None


def test_the_hottest_ops_have_unboxed_kernels_on_this_accelerator():
    # Which forms reach flagos depends on the accelerator (on host, structured
    # ops allocate on flagos and call the out= form), but some form of each
    # matmul and of add must, and each is a flagos kernel now.
    for family in ("aten::mm", "aten::addmm", "aten::bmm", "aten::add"):
        assert {n for n in DIRECT if n.split(".")[0] == family}, f"no unboxed kernel for any form of {family}"
    for name in DIRECT:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"), name


def test_every_unboxed_kernel_has_a_case_here():
    assert DIRECT <= set(CASES), f"add cases for {sorted(DIRECT - set(CASES))}"


@pytest.mark.parametrize("name", sorted(DIRECT))
def test_unboxed_kernel_computes_what_the_compute_device_computes(name):
    op = _overload(name)
    args, kwargs = CASES[name]()
    ref_args, ref_kwargs = _on(COMPUTE_DEVICE, args, kwargs)
    fl_args, fl_kwargs = _on("flagos", args, kwargs)
    expected = op(*ref_args, **ref_kwargs)
    got = op(*fl_args, **fl_kwargs)
    # The compute device's own kernel ran on the same values: equal bit for bit.
    results = zip(got, expected, strict=True) if isinstance(got, tuple) else [(got, expected)]
    for result, reference in results:
        assert result.device.type == "flagos"
        assert torch.equal(result.cpu(), reference.cpu())
    written = _written(op, fl_args, fl_kwargs)
    if written is not None:
        assert got is written, "in-place and out= ops return the caller's tensor"
        assert written.shape == expected.shape and torch.equal(written.cpu(), expected.cpu())


@pytest.mark.parametrize("name", sorted(DIRECT))
def test_unboxed_kernel_mutates_and_aliases_only_as_its_schema_says(name):
    args, kwargs = CASES[name]()
    fl_args, fl_kwargs = _on("flagos", args, kwargs)
    opcheck(_overload(name), fl_args, fl_kwargs, test_utils=("test_schema",))


def test_an_unsupported_dtype_names_the_op_and_the_device():
    a = torch.ones(2, 2, dtype=torch.bool, device="flagos")
    with pytest.raises(NotImplementedError, match=r"aten::mm(\.out)? is not supported on flagos:0 for these arguments"):
        torch.mm(a, a)


def test_a_cpu_tensor_among_flagos_arguments_is_named():
    a = torch.ones(2, 2, device="flagos")
    with pytest.raises(RuntimeError, match=r"aten::mm(\.out)? got a tensor on cpu together with flagos tensors"):
        torch.mm(a, torch.ones(2, 2))


def test_a_tensor_given_twice_is_read_and_written_as_one():
    x = torch.arange(6.0, device="flagos")
    assert torch.mul(x, x, out=x) is x
    assert x.cpu().tolist() == [v * v for v in range(6)]
    y = torch.arange(4.0, device="flagos")
    y.add_(y, alpha=2)
    assert y.cpu().tolist() == [3.0 * v for v in range(4)]


# A kernel's output memory keeps the compute device's tensor over it, and the unboxed kernels pass
# that tensor when they read the memory again; only where the argument has its geometry, and never
# for memory the call writes.
KEPT_OUTPUT_READS = {
    "as it came out": lambda r: torch.exp(r),
    "transposed": lambda r: torch.mm(r.t(), r),
    "narrowed, with an offset": lambda r: torch.exp(r[1:, 2:]),
    "twice, as two tensors": lambda r: torch.add(r, r.view(r.shape), alpha=2),
    "restrided in place": lambda r: torch.mm(r.t_(), torch.ones(3, 2, device=r.device)),
    "reshaped in place": lambda r: torch.exp(r.resize_(2, 6)),
    "in a list": lambda r: torch.cat([r, r[:1], r], dim=0),
    # A copy's source is read through the same kept views.
    "copied to another dtype": lambda r: r.to(torch.float64),
    "copied transposed": lambda r: r.t().contiguous(),
    "copied to the host and back": lambda r: r.cpu().to(r.device) + r[1:].cpu().sum().item(),
}


# Memory an op's kernel allocated (adopted, its tensor kept with it) and memory of flagos's own
# allocator (a weight, a compiled graph's buffer: a view kept per thread).
MEMORY = {"an op's output": torch.relu, "flagos's own": torch.Tensor.clone}


@pytest.mark.parametrize("memory", MEMORY.values(), ids=MEMORY.keys())
@pytest.mark.parametrize("read", KEPT_OUTPUT_READS.values(), ids=KEPT_OUTPUT_READS.keys())
def test_memory_read_again_gives_the_compute_device_result(read, memory):
    x = _randn(3, 4)
    expected = read(memory(x.to(COMPUTE_DEVICE)))
    got = read(memory(x.to("flagos")))
    assert got.device.type == "flagos"
    assert torch.equal(got.cpu(), expected.cpu())


@pytest.mark.parametrize("memory", MEMORY.values(), ids=MEMORY.keys())
def test_an_out_argument_resized_over_read_memory_moves_it_as_on_the_compute_device(memory):
    def run(device):
        r = memory(_randn(6, positive=True).to(device))
        b = memory(_randn(2, 1, positive=True).to(device))
        torch.exp(r)  # read once: its view is kept
        read, out = r[:3], r[3:]  # one memory; the (2, 3) result needs 9 elements from offset 3
        with pytest.warns(UserWarning, match="resized"):
            torch.add(read, b, out=out)
        return r, read, out, torch.exp(r)

    expected = run(COMPUTE_DEVICE)
    got = run("flagos")
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.storage_offset() == e.storage_offset()
        assert torch.equal(g.cpu(), e.cpu())
    r, read, out, _ = got
    assert r.untyped_storage().nbytes() == 9 * 4, "the out= argument's storage grew, for every tensor on it"
    assert read.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()


def _reuses_during(call):
    """(arguments that took the tensor kept with an op's output, those that took this thread's kept
    view of their address) during call()."""
    before = torch_fl._C._compute_view_reuses()
    call()
    return tuple(after - b for after, b in zip(torch_fl._C._compute_view_reuses(), before, strict=True))


def test_arguments_read_again_take_the_views_kept_for_their_memory():
    # What the unboxed kernels save per op: no new compute-device tensor for an argument read again.
    # A reuse that stopped happening would change no result, only the host time of every op.
    output = torch.relu(_randn(8).to("flagos"))  # memory the kernel allocated, its tensor kept with it
    weight = _randn(8).to("flagos")  # flagos's own memory
    assert _reuses_during(lambda: torch.relu(output)) == (1, 0), "the tensor kept with an op's output"
    torch.relu(weight)  # the first read makes this thread's view of the address
    assert _reuses_during(lambda: torch.relu(weight)) == (0, 1), "this thread's kept view"


# layer -> (the module, how many of its tensors the kernel reads besides the input)
LAYERS = {
    "conv2d": (lambda: torch.nn.Conv2d(4, 4, 3), 2),  # weight, bias
    "batch_norm": (lambda: torch.nn.BatchNorm2d(4).eval(), 4),  # weight, bias, running mean and variance
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layers_read_the_previous_output_and_their_weights_through_kept_views(layer):
    # Like the unboxed kernels, flagos's convolution and batch norm kernels (csrc/aten/fallback.cpp)
    # take the views kept for their arguments' memory: in a model's forward, the op before's output
    # and the layer's weights.
    make, weights = LAYERS[layer]
    module = make().to("flagos")
    output = torch.relu(_randn(1, 4, 6, 6).to("flagos"))
    module(output)  # the first read makes this thread's views of the weights
    assert _reuses_during(lambda: module(output)) == (1, weights)


def test_a_kept_output_written_in_place_is_read_with_its_new_values():
    r = torch.relu(_randn(5).to("flagos"))
    r.mul_(r)

    def expected(x):
        x = torch.relu(x)
        return torch.exp(x.mul_(x))

    assert torch.equal(torch.exp(r).cpu(), _on_compute_device(expected, _randn(5)))


def test_an_output_made_in_inference_mode_is_read_outside_it():
    with torch.inference_mode():
        r = torch.relu(_randn(4).to("flagos"))
    assert torch.equal(torch.exp(r).cpu(), _on_compute_device(lambda x: torch.exp(torch.relu(x)), _randn(4)))


def test_memory_handed_out_again_at_the_same_address_is_read_with_its_own_size_and_values():
    # Sizes no other test allocates: the freed block is the one the allocator hands out next.
    a = _randn(3001).to("flagos")
    kept = torch.exp(a)  # a view of a's memory is kept for this thread
    address = a.data_ptr()
    del a
    b = _randn(3000).to("flagos")
    assert b.data_ptr() == address, "the allocator hands the freed block out again (the case under test)"
    assert torch.equal(torch.exp(b).cpu(), _on_compute_device(torch.exp, _randn(3000)))
    assert torch.equal(kept.cpu(), _on_compute_device(torch.exp, _randn(3001)))


def test_an_out_argument_grown_by_its_kernel_leaves_its_old_address_to_the_next_tensor_there():
    # out= and in-place arguments take the thread's kept view of their address too; a kernel that
    # grows one puts new memory into that view. The next tensor at the old address must not see it.
    # No cached blocks, and the inputs kept alive: out's old block is the one the allocator hands
    # out next.
    torch.flagos.empty_cache()
    small, large = _randn(4093).to("flagos"), _randn(4099).to("flagos")
    out = torch.empty(4093, device="flagos")
    torch.exp(small, out=out)  # the view of out's address is kept
    address = out.data_ptr()
    with pytest.warns(UserWarning, match="resized"):
        torch.exp(large, out=out)
    assert out.data_ptr() != address, "the kernel grew out= into new memory (the case under test)"
    assert torch.equal(out.cpu(), _on_compute_device(torch.exp, _randn(4099)))
    b = _randn(4093, positive=True).to("flagos")
    assert b.data_ptr() == address, "the allocator hands the old block out again (the case under test)"
    torch.add(b, 1.0, out=b)
    assert torch.equal(b.cpu(), _on_compute_device(lambda x: x + 1.0, _randn(4093, positive=True)))
    expected = _on_compute_device(lambda x: torch.exp(torch.exp(x)), _randn(4099))
    assert torch.equal(torch.exp(out).cpu(), expected), "out= kept its new memory"


def test_memory_an_out_argument_grew_into_is_freed_with_the_tensor():
    # The grown memory comes from the compute device's allocator, which reports to the profiler.
    from torch.profiler import ProfilerActivity, profile

    small, large = _randn(8).to("flagos"), _randn(1 << 20).to("flagos")
    out = torch.empty(8, device="flagos")
    torch.exp(small, out=out)  # the view of out's address is kept
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with pytest.warns(UserWarning, match="resized"):
            torch.exp(large, out=out)
        grown = out.untyped_storage().nbytes()
        del out
    events = prof.events()
    # Inclusive figures: a CUDA kernel grows out= in a nested aten::resize_, the CPU's in exp itself.
    allocated = sum(e.cpu_memory_usage + e.device_memory_usage for e in events if e.name == "aten::exp")
    assert allocated >= grown == 4 << 20, "the kernel grew out= in its device's memory (the case under test)"
    still_held = sum(e.self_cpu_memory_usage + e.self_device_memory_usage for e in events)
    assert still_held == 0, f"{still_held} bytes of the grown memory outlived its tensor"


def test_a_weight_read_in_turn_with_two_geometries_gives_the_compute_device_results():
    def run(device):
        w, x, y = (_randn(*shape).to(device) for shape in ((4, 3), (5, 3), (3, 2)))
        return [torch.mm(x, w.t()), torch.mm(w, y), torch.mm(x, w.t()), torch.addmm(y[0], w, y)]

    for got, expected in zip(run("flagos"), run(COMPUTE_DEVICE), strict=True):
        assert torch.equal(got.cpu(), expected.cpu())


def test_threads_reading_one_weight_each_get_the_compute_device_result():
    from concurrent.futures import ThreadPoolExecutor

    w, x = _randn(16, 8).to("flagos"), _randn(4, 8).to("flagos")
    expected = _on_compute_device(lambda a, b: torch.mm(a, b.t()), _randn(4, 8), _randn(16, 8))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: torch.mm(x, w.t()).cpu(), range(32)))
    assert all(torch.equal(r, expected) for r in results)


@two_devices
def test_an_op_on_another_device_runs_there_and_leaves_the_current_device_as_it_was():
    x = _randn(4, 3).to("flagos:1")
    y = torch.relu(torch.mm(x, x.t()))
    assert y.device == torch.device("flagos", 1)
    assert torch.flagos.current_device() == 0
    expected = _on_compute_device(lambda x: torch.relu(torch.mm(x, x.t())), _randn(4, 3))
    assert torch.equal(y.cpu(), expected)
    assert torch.flagos.memory_allocated(1) >= y.untyped_storage().nbytes(), "its memory counts on flagos:1"


# Compiled code's extern matmuls on flagos call these instead of torch.mm(..., out=buf) and its kind:
# name -> (entry point, torch's function, arguments on the CPU, keywords)
COMPILED_MATMULS = {
    "mm": (torch_fl._C._compiled_mm, torch.mm, lambda: (_randn(4, 3), _randn(3, 5)), {}),
    "addmm": (
        torch_fl._C._compiled_addmm,
        torch.addmm,
        lambda: (_randn(5), _randn(4, 3), _randn(3, 5)),
        {"beta": 0.5, "alpha": 2},
    ),
    "bmm": (torch_fl._C._compiled_bmm, torch.bmm, lambda: (_randn(2, 4, 3), _randn(2, 3, 5)), {}),
}


@pytest.mark.parametrize("name", COMPILED_MATMULS)
def test_compiled_codes_matmul_entry_does_what_the_out_form_does(name):
    entry, function, make, keywords = COMPILED_MATMULS[name]
    args = [t.to("flagos") for t in make()]
    out, expected = _empty().to("flagos"), _empty().to("flagos")
    assert entry(*args, **keywords, out=out) is None
    function(*args, **keywords, out=expected)
    assert torch.equal(out.cpu(), expected.cpu()) and out.shape == expected.shape
    assert out._version == expected._version, "out's version moves as with the out= form (autograd checks it)"
    torch.testing.assert_close(out.cpu(), function(*make(), **keywords))


def test_compiled_codes_matmul_entry_moves_versions_only_where_the_out_form_does():
    # Below ADInplaceOrView (as inside some kernels) the out= form leaves the version alone; in
    # inference mode it still bumps a normal tensor's.
    a, b = _randn(4, 3).to("flagos"), _randn(3, 5).to("flagos")
    out, expected = torch.empty(4, 5, device="flagos"), torch.empty(4, 5, device="flagos")
    with torch._C._AutoDispatchBelowADInplaceOrView():
        torch_fl._C._compiled_mm(a, b, out=out)
        torch.mm(a, b, out=expected)
    assert out._version == expected._version == 0
    with torch.inference_mode():
        torch_fl._C._compiled_mm(a, b, out=out)
        torch.mm(a, b, out=expected)
    assert out._version == expected._version == 1
    torch.testing.assert_close(out.cpu(), expected.cpu(), rtol=0, atol=0)


def test_compiled_codes_matmul_entry_writes_into_a_view_of_a_buffer():
    # How compiled code writes a matmul into part of a larger buffer (out=reinterpret_tensor(...))
    a, b = _randn(4, 3).to("flagos"), _randn(3, 5).to("flagos")
    buffer = torch.full((4, 8), 7.0, device="flagos")
    torch_fl._C._compiled_mm(a, b, out=buffer[:, 2:7])
    expected = torch.full((4, 8), 7.0)
    torch.mm(_randn(4, 3), _randn(3, 5), out=expected[:, 2:7])
    torch.testing.assert_close(buffer.cpu(), expected)


def test_compiled_codes_matmul_entry_shows_in_the_profiler_and_in_dispatch_modes():
    from torch.utils.flop_counter import FlopCounterMode

    a, b = _randn(4, 3).to("flagos"), _randn(3, 5).to("flagos")
    out = torch.empty(4, 5, device="flagos")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        torch_fl._C._compiled_mm(a, b, out=out)
    assert "aten::mm" in {event.name for event in profile.events()}
    with FlopCounterMode(display=False) as flops:
        torch_fl._C._compiled_mm(a, b, out=out)
    assert flops.get_total_flops() == 2 * 4 * 3 * 5


def _full_dispatches_during(call) -> int:
    before = torch_fl._C._compiled_matmul_full_dispatches()
    call()
    return torch_fl._C._compiled_matmul_full_dispatches() - before


def test_compiled_codes_matmul_entry_skips_the_dispatcher_only_where_it_would_pass_the_call_down():
    from torch.utils.flop_counter import FlopCounterMode

    a, b = _randn(4, 3).to("flagos"), _randn(3, 5).to("flagos")
    out = torch.empty(4, 5, device="flagos")

    def mm():
        torch_fl._C._compiled_mm(a, b, out=out)

    assert _full_dispatches_during(mm) == 0, "a plain call runs flagos's kernel itself"
    with torch.no_grad():
        assert _full_dispatches_during(mm) == 0
    with torch.inference_mode():
        assert _full_dispatches_during(mm) == 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert _full_dispatches_during(mm) == 1, "the profiler's callbacks see the call"
    with FlopCounterMode(display=False):
        assert _full_dispatches_during(mm) == 1, "a dispatch mode sees the call"
    a.requires_grad_()
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        _full_dispatches_during(mm)  # autograd's kernel refuses it


def test_a_kernel_registered_over_flagos_matmul_runs_in_compiled_codes_entry():
    a, b = _randn(4, 3).to("flagos"), _randn(3, 5).to("flagos")
    out = torch.empty(4, 5, device="flagos")
    assert torch_fl._C._compiled_matmul_kernels_unchanged()
    with kernel_over_flagos("mm.out", lambda self, mat2, out: out.fill_(7.0)):
        assert not torch_fl._C._compiled_matmul_kernels_unchanged(), "the dispatcher holds another kernel"
        torch_fl._C._compiled_mm(a, b, out=out)
        assert torch.equal(out.cpu(), torch.full((4, 5), 7.0))
    assert torch_fl._C._compiled_matmul_kernels_unchanged(), "flagos's kernel is the dispatcher's again"
    torch_fl._C._compiled_mm(a, b, out=out)
    assert torch.equal(out.cpu(), _on_compute_device(torch.mm, _randn(4, 3), _randn(3, 5)))


def test_compiled_codes_matmul_entry_refuses_what_the_out_form_refuses():
    a, b = _randn(4, 3).to("flagos").requires_grad_(), _randn(3, 5).to("flagos")
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        torch_fl._C._compiled_mm(a, b, out=torch.empty(4, 5, device="flagos"))
    with torch.inference_mode():
        out = torch.empty(4, 5, device="flagos")
        torch_fl._C._compiled_mm(a, b, out=out)  # in inference mode, as the out= form
    torch.testing.assert_close(out.cpu(), _randn(4, 3) @ _randn(3, 5))
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        torch_fl._C._compiled_mm(a.detach(), b, out=out)
    with pytest.raises(RuntimeError, match="cpu"):
        torch_fl._C._compiled_mm(a.detach().cpu(), b, out=torch.empty(4, 5, device="flagos"))


def test_compiled_codes_matmul_entry_says_what_is_wrong_with_its_arguments():
    a, b, out = torch.ones(4, 3, device="flagos"), torch.ones(3, 5, device="flagos"), torch.empty(4, 5, device="flagos")
    with pytest.raises(TypeError, match="_compiled_mm needs out="):
        torch_fl._C._compiled_mm(a, b)
    with pytest.raises(TypeError, match="unexpected keyword argument 'alpha'"):
        torch_fl._C._compiled_mm(a, b, out=out, alpha=2)
    with pytest.raises(TypeError, match="expects a tensor for mat2, got int"):
        torch_fl._C._compiled_mm(a, 3, out=out)
    with pytest.raises(TypeError, match="takes 3 positional tensors and out=, got 2"):
        torch_fl._C._compiled_addmm(a, b, out=out)
    with pytest.raises(TypeError, match="expects a number for beta, got str"):
        torch_fl._C._compiled_addmm(out, a, b, beta="1", out=out)
