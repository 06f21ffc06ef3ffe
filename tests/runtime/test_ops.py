"""Eager ops on flagos agree with the CPU, keep aliasing, and fail clearly."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import REPO, run_python
from tests.requirements import accelerator, host_only, two_devices

SEEDS = [0, 1, 2]


def _inputs(seed, *shapes, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype) for s in shapes]


# name -> (function, input shapes). Each runs once on CPU tensors and once on
# flagos copies of the same values; the results must agree.
OPS = {
    "add": (lambda a, b: a + b, [(8, 5), (8, 5)]),
    "sub_broadcast": (lambda a, b: a - b, [(8, 5), (5,)]),
    "mul_scalar": (lambda a: a * 3.5, [(7, 3)]),
    "div": (lambda a, b: a / (b.abs() + 1), [(4, 6), (4, 6)]),
    "pow": (lambda a: a.abs().pow(1.7), [(9,)]),
    "exp_log": (lambda a: torch.log1p(torch.exp(a)), [(5, 5)]),
    "tanh_sigmoid": (lambda a: torch.tanh(a) + torch.sigmoid(a), [(33,)]),
    "gelu_silu": (lambda a: F.gelu(a) * F.silu(a), [(4, 9)]),
    "where": (lambda a, b: torch.where(a > 0, a, b), [(6, 6), (6, 6)]),
    "clamp": (lambda a: a.clamp(-0.5, 0.5), [(100,)]),
    "sum_dim": (lambda a: a.sum(dim=1), [(6, 7)]),
    "mean_all": (lambda a: a.mean(), [(6, 7)]),
    "amax": (lambda a: a.amax(dim=0), [(6, 7)]),
    "var": (lambda a: a.var(dim=-1), [(3, 50)]),
    "softmax": (lambda a: torch.softmax(a, dim=-1), [(4, 10)]),
    "log_softmax": (lambda a: torch.log_softmax(a, dim=0), [(4, 10)]),
    "cumsum": (lambda a: a.cumsum(0), [(12,)]),
    "matmul": (lambda a, b: a @ b, [(16, 8), (8, 4)]),
    "bmm_transposed": (lambda a, b: torch.bmm(a, b.transpose(1, 2)), [(2, 5, 3), (2, 4, 3)]),
    "linear": (lambda x, w, b: F.linear(x, w, b), [(3, 4), (5, 4), (5,)]),
    "layer_norm": (lambda a: F.layer_norm(a, (8,)), [(3, 8)]),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), [(2, 3, 8, 8), (4, 3, 3, 3)]),
    "max_pool": (lambda x: F.max_pool2d(x, 2), [(1, 2, 6, 6)]),
    "cat_stack": (lambda a, b: torch.cat([a, torch.stack([b, b]).sum(0)], dim=1), [(3, 2), (3, 4)]),
    "sort": (lambda a: torch.sort(a, dim=-1).values, [(4, 9)]),
    "topk": (lambda a: torch.topk(a, 3).values, [(20,)]),
    "index_select": (lambda a: a.index_select(0, torch.tensor([2, 0], device=a.device)), [(4, 3)]),
    "gather": (lambda a: a.gather(1, torch.tensor([[0, 1], [2, 0]], device=a.device)), [(2, 3)]),
    "masked_fill": (lambda a: a.masked_fill(a < 0, 0.0), [(10,)]),
    "argmax": (lambda a: a.argmax(dim=1), [(5, 6)]),
    "nonzero": (lambda a: (a > 0).nonzero(), [(4, 4)]),
    "contiguous_of_permute": (lambda a: a.permute(2, 0, 1).contiguous(), [(2, 3, 4)]),
    "triu": (lambda a: torch.triu(a, 1), [(5, 5)]),
    "embedding": (lambda w: F.embedding(torch.tensor([1, 3, 1], device=w.device), w), [(5, 3)]),
    "half_to_float": (lambda a: a.half().float() * 2, [(7,)]),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_cpu(name, seed):
    fn, shapes = OPS[name]
    cpu_inputs = _inputs(seed, *shapes)
    expected = fn(*cpu_inputs)
    actual = fn(*[t.to("flagos") for t in cpu_inputs])
    assert actual.device.type == "flagos"
    torch.testing.assert_close(actual.cpu(), expected)


@two_devices
def test_factories_on_flagos():
    torch.testing.assert_close(torch.arange(5, device="flagos").cpu(), torch.arange(5))
    torch.testing.assert_close(torch.zeros(2, 3, device="flagos").cpu(), torch.zeros(2, 3))
    torch.testing.assert_close(torch.full((2,), 7.0, device="flagos").cpu(), torch.full((2,), 7.0))
    torch.testing.assert_close(torch.eye(3, device="flagos").cpu(), torch.eye(3))
    torch.testing.assert_close(torch.linspace(0, 1, 5, device="flagos").cpu(), torch.linspace(0, 1, 5))
    torch.testing.assert_close(torch.tril_indices(3, 3, device="flagos").cpu(), torch.tril_indices(3, 3))
    assert sorted(torch.randperm(6, device="flagos").cpu().tolist()) == list(range(6))
    assert torch.tensor([1, 2], device="flagos:1").device == torch.device("flagos", 1)


def test_scalar_item_and_python_numbers():
    x = torch.tensor([1.5, 2.5], device="flagos")
    assert x.sum().item() == 4.0
    assert x.tolist() == [1.5, 2.5]
    assert bool((x > 2).any())


def test_inplace_returns_the_same_tensor_and_changes_memory():
    x = torch.zeros(4, device="flagos")
    ptr = x.data_ptr()
    y = x.add_(1)
    assert y is x
    assert x.data_ptr() == ptr
    assert x.cpu().tolist() == [1.0] * 4


def test_inplace_on_a_view_updates_the_base():
    x = torch.ones(4, device="flagos")
    x[1:].mul_(2)
    assert x.cpu().tolist() == [1.0, 2.0, 2.0, 2.0]
    x[0] = 9.0
    assert x.cpu().tolist() == [9.0, 2.0, 2.0, 2.0]


@pytest.mark.parametrize(
    "make_view",
    [
        lambda x: x.t(),
        lambda x: x.view(-1),
        lambda x: x[1],
        lambda x: x[:, 1:],
        lambda x: x.unsqueeze(0),
        lambda x: x.diagonal(),
        lambda x: x.unfold(1, 2, 1),
        lambda x: x.expand(2, 3, 3),
        lambda x: torch.split(x, 1)[1],
        lambda x: x.unbind(0)[2],
        lambda x: x.view(torch.int32),
    ],
    ids=["t", "view", "select", "slice", "unsqueeze", "diagonal", "unfold", "expand", "split", "unbind", "view_dtype"],
)
def test_views_share_memory(make_view):
    x = torch.arange(9.0, device="flagos").reshape(3, 3)
    v = make_view(x)
    assert v.device == x.device
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x.fill_(5.0)
    expected = make_view(torch.full((3, 3), 5.0))
    torch.testing.assert_close(v.cpu(), expected)


def test_out_argument_is_resized_and_filled():
    a, b = _inputs(0, (3, 4), (3, 4))
    out = torch.empty(0, device="flagos")
    result = torch.add(a.to("flagos"), b.to("flagos"), out=out)
    assert result is out
    assert out.shape == (3, 4)
    torch.testing.assert_close(out.cpu(), a + b)


def test_resize_and_set():
    x = torch.arange(4.0, device="flagos")
    x.resize_(2, 5)
    assert x.shape == (2, 5)
    assert x.flatten()[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    y = torch.empty(0, device="flagos")
    y.set_(x.untyped_storage(), 0, (4,), (1,))
    assert y.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


@two_devices
def test_copies_between_devices_and_dtypes():
    a = torch.randn(5, 4)
    f0 = a.to("flagos:0")
    f1 = f0.to("flagos:1")
    back = f1.to(torch.float64).cpu()
    torch.testing.assert_close(back, a.double())
    dst = torch.empty(4, 5, device="flagos:1")
    dst.copy_(f0.t())
    torch.testing.assert_close(dst.cpu(), a.t())
    bcast = torch.empty(3, 4, device="flagos")
    bcast.copy_(torch.arange(4.0))
    torch.testing.assert_close(bcast.cpu(), torch.arange(4.0).expand(3, 4))


MATH_BIT_VIEWS = {
    "conj": lambda t: t.conj(),
    "neg_view": lambda t: torch._neg_view(t),
    "conj_of_transpose": lambda t: t.t().conj(),
}


@pytest.mark.parametrize("view", sorted(MATH_BIT_VIEWS))
def test_conjugate_and_negative_views_are_resolved_by_copies(view):
    # The math-bit fallbacks resolve a conj/neg view with clone(), which copies: a copy that
    # came back to the fallback recursed until the stack overflowed (a segfault), so run it
    # in a fresh interpreter and expect values, not a dead process.
    result = run_python(
        f"""
        import torch, torch_fl
        from tests.runtime.test_ops import MATH_BIT_VIEWS
        make = MATH_BIT_VIEWS[{view!r}]
        a = torch.randn(3, 4, dtype=torch.complex64)
        f = make(a.to("flagos"))
        expected = make(a).resolve_conj().resolve_neg()
        for got in (f.clone(), f.resolve_conj().resolve_neg(), f.cpu(), f + 0, f.to(torch.complex128)):
            torch.testing.assert_close(got.cpu().to(torch.complex64), expected)
        into = torch.empty(f.shape, dtype=torch.complex64, device="flagos")
        into.copy_(f)
        torch.testing.assert_close(into.cpu(), expected)
        back = make(torch.zeros(3, 4, dtype=torch.complex64, device="flagos"))
        back.copy_(expected)  # writes through the view: the base holds make^-1(expected)
        torch.testing.assert_close(back.resolve_conj().resolve_neg().cpu(), expected)
        print("ok")
    """,
        cwd=REPO,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", (result.returncode, result.stderr[-2000:])


def test_cpu_index_tensors_are_accepted_like_on_gpus():
    x = torch.arange(10.0, device="flagos")
    assert x[torch.tensor([1, 3])].cpu().tolist() == [1.0, 3.0]
    x[torch.tensor([0])] = -1.0
    assert x[0].item() == -1.0


@two_devices
def test_mixing_flagos_devices_is_an_error():
    a = torch.ones(3, device="flagos:0")
    b = torch.ones(3, device="flagos:1")
    with pytest.raises(RuntimeError, match=r"flagos:0 and flagos:1"):
        torch.maximum(a, b)
    with pytest.raises(RuntimeError, match=r"flagos:0 and flagos:1"):
        torch.cat([a, b])


def test_mixing_cpu_and_flagos_is_an_error_but_cpu_scalars_are_fine():
    a = torch.ones(3, device="flagos")
    with pytest.raises(RuntimeError, match=r"(?i)cpu"):
        torch.cat([a, torch.ones(3)])
    assert (a * torch.tensor(2.0)).cpu().tolist() == [2.0, 2.0, 2.0]


@pytest.fixture(scope="module")
def is_same():
    """An op whose kernel (on either compute device) says whether its two arguments are one tensor."""
    lib = torch.library.Library("flagos_identity", "DEF")
    lib.define("is_same(Tensor a, Tensor b) -> bool")
    for key in ("CPU", "CUDA"):
        lib.impl("is_same", lambda a, b: a is b, key)
    yield torch.ops.flagos_identity.is_same
    lib._destroy()


def test_a_tensor_passed_twice_reaches_the_kernel_as_one_tensor(is_same):
    # Kernels test identity: CUDA's multi-head attention takes its fused path
    # only when query, key and value are the same tensor.
    x = torch.randn(4, device="flagos")
    assert is_same(x, x)
    assert not is_same(x, x.view(4))
    assert not is_same(x, x.clone())


COMPUTE_DEVICE = {"host": "cpu", "cuda": "cuda"}[accelerator]


def _layer_norm():
    module = torch.nn.LayerNorm(64)
    with torch.no_grad():
        module.weight.normal_()
        module.bias.normal_()
    return module, lambda m, x: m(x), (2, 17, 64)


def _multi_head_attention():
    # The inference fast path (_native_multi_head_attention), self-attention.
    module = torch.nn.MultiheadAttention(64, 4, batch_first=True)
    return module, lambda m, x: m(x, x, x, need_weights=False)[0], (2, 17, 64)


def _conv_block():
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
    with torch.no_grad():
        module[1].running_mean.normal_()
        module[1].running_var.uniform_(0.5, 2.0)
    return module, lambda m, x: m(x), (2, 3, 9, 9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("make", [_layer_norm, _multi_head_attention, _conv_block], ids=lambda f: f.__name__.strip("_"))
def test_eager_flagos_computes_exactly_what_its_compute_device_computes(make, dtype):
    # Not a decomposition of the op: the compute device's own kernel, bit for bit.
    torch.manual_seed(0)
    module, call, shape = make()
    module.eval().to(dtype)
    x = torch.randn(*shape, dtype=dtype)
    with torch.inference_mode():
        expected = call(module.to(COMPUTE_DEVICE), x.to(COMPUTE_DEVICE)).cpu()
        got = call(module.to("flagos"), x.to("flagos")).cpu()
    assert torch.equal(got, expected), f"max difference {(got.float() - expected.float()).abs().max()}"


def test_batch_norm_in_training_updates_its_running_statistics_like_the_compute_device():
    def train_steps(device):
        torch.manual_seed(0)
        norm = torch.nn.BatchNorm2d(4, momentum=0.3).to(device)
        for step in range(3):
            norm(torch.randn(2, 4, 5, 5).mul(step + 1).to(device)).sum().backward()
        return norm.running_mean.cpu(), norm.running_var.cpu(), norm.num_batches_tracked.cpu()

    expected = train_steps(COMPUTE_DEVICE)
    assert not torch.equal(expected[0], torch.zeros(4)), "the steps must move the statistics"
    for got, want in zip(train_steps("flagos"), expected, strict=True):
        assert torch.equal(got, want)


def test_a_convolution_passes_atens_convolution_front_end_once():
    # flagos's own kernel for aten::convolution runs the compute device's convolution directly;
    # through aten's composite kernel, the front end (checks, backend selection) ran once for the
    # flagos tensors and again in the compute device's convolution: host time on every call.
    conv = torch.nn.Conv2d(3, 4, 3).to("flagos")
    x = torch.randn(1, 3, 6, 6, device="flagos")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        conv(x)
    names = [event.name for event in profile.events()]
    assert names.count("aten::_convolution") == 1, names
    assert "aten::convolution_overrideable" not in names, names


def test_a_direct_call_of_the_private_convolution_still_computes():
    # aten::_convolution (TorchScript and older exports call it) reaches flagos's overrideable kernels.
    x, w, b = _inputs(0, (2, 3, 7, 7), (4, 3, 3, 3), (4,))
    args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1, False, False, True, True)
    expected = torch._convolution(x, w, b, *args)
    got = torch._convolution(x.to("flagos"), w.to("flagos"), b.to("flagos"), *args)
    torch.testing.assert_close(got.cpu(), expected)


@host_only
def test_an_op_the_compute_device_lacks_names_op_and_device():
    x = torch.ones(8, device="flagos")
    with pytest.raises(
        NotImplementedError, match=r"aten::_fused_dropout is not supported on flagos:0.*compute device \(cpu\)"
    ):
        torch.ops.aten._fused_dropout(x, 0.5)


def _train(device, steps=4):
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(32, 10, generator=g).to(device)
    y = torch.randint(0, 3, (32,), generator=g).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()], [p.grad.cpu() for p in model.parameters()]


def test_two_linear_mlp_trains_like_on_cpu():
    cpu_losses, cpu_params, cpu_grads = _train("cpu")
    fl_losses, fl_params, fl_grads = _train("flagos")
    assert fl_losses[-1] < fl_losses[0]
    # float32 tolerances: the losses are float32 values (a GPU sums in another order)
    torch.testing.assert_close(torch.tensor(fl_losses), torch.tensor(cpu_losses))
    for a, b in zip(fl_params + fl_grads, cpu_params + cpu_grads, strict=False):
        torch.testing.assert_close(a, b)


def test_small_conv_net_forward_and_backward_match_cpu():
    g = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(4, 4, 3, groups=2, stride=2),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 2),
    )
    x = torch.randn(2, 3, 8, 8, generator=g)
    reference = net(x)
    reference.sum().backward()
    cpu_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    net.to("flagos")
    out = net(x.to("flagos"))
    out.sum().backward()
    torch.testing.assert_close(out.cpu(), reference)
    for p, expected in zip(net.parameters(), cpu_grads, strict=False):
        torch.testing.assert_close(p.grad.cpu(), expected)
