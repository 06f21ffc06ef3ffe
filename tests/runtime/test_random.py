"""One generator per device: seeding, state, independence from the CPU."""

import contextlib

import torch
from torch.utils._mode_utils import no_dispatch

from tests.requirements import two_devices


def test_manual_seed_reproduces_randn():
    torch.flagos.manual_seed(123)
    a = torch.randn(8, device="flagos")
    torch.flagos.manual_seed(123)
    b = torch.randn(8, device="flagos")
    assert torch.equal(a, b)
    assert not torch.equal(a, torch.randn(8, device="flagos"))


def test_torch_manual_seed_seeds_flagos_too():
    torch.manual_seed(7)
    a = torch.rand(5, device="flagos")
    torch.manual_seed(7)
    assert torch.equal(a, torch.rand(5, device="flagos"))


def test_rng_state_round_trip():
    state = torch.flagos.get_rng_state()
    a = torch.randn(4, device="flagos")
    torch.flagos.set_rng_state(state)
    assert torch.equal(a, torch.randn(4, device="flagos"))


def test_flagos_stream_is_independent_of_cpu_stream():
    torch.flagos.manual_seed(0)
    torch.manual_seed(0)
    expected = torch.randn(4, device="flagos")
    torch.flagos.manual_seed(0)
    torch.randn(100)  # CPU draws must not move the flagos generator
    assert torch.equal(torch.randn(4, device="flagos"), expected)


@two_devices
def test_devices_have_their_own_generators():
    gens = torch.flagos.default_generators
    assert len(gens) == torch.flagos.device_count()
    assert gens[0].device == torch.device("flagos", 0) and gens[1].device == torch.device("flagos", 1)
    gens[0].manual_seed(1)
    gens[1].manual_seed(2)
    assert gens[0].initial_seed() == 1 and gens[1].initial_seed() == 2


def test_explicit_generator_and_dropout():
    g = torch.Generator(device="flagos").manual_seed(5)
    a = torch.randn(6, device="flagos", generator=g)
    g.manual_seed(5)
    assert torch.equal(a, torch.randn(6, device="flagos", generator=g))
    torch.flagos.manual_seed(9)
    d1 = torch.nn.functional.dropout(torch.ones(64, device="flagos"), 0.5)
    torch.flagos.manual_seed(9)
    d2 = torch.nn.functional.dropout(torch.ones(64, device="flagos"), 0.5)
    assert torch.equal(d1, d2)
    assert 0 < (d1 == 0).sum().item() < 64


@contextlib.contextmanager
def _rng_state_frozen():
    # what torch.testing's freeze_rng_state (the OpInfos' wrapper_set_seed) does for a device;
    # the original needs expecttest
    with no_dispatch():
        state = torch.flagos.get_rng_state()
    try:
        yield
    finally:
        with no_dispatch():
            torch.flagos.set_rng_state(state)


def test_compiled_code_that_saves_and_restores_the_rng_state_graph_breaks_like_cuda():
    # dynamo must skip the device module's get/set_rng_state as it skips torch.cuda's, not trace
    # into them and fail converting the state tensor to a fake one under no_dispatch().
    def f(x):
        with _rng_state_frozen():
            torch.manual_seed(42)
            return x.log_normal_()

    x = torch.ones(8, device="flagos")
    out = torch.compile(f, backend="eager")(x.clone())
    assert out.device == x.device and bool((out > 0).all())
