"""Recurrent layers on flagos: nn.LSTM, nn.GRU, nn.RNN and their cells, forward and backward,
against the same modules on the CPU."""

import pytest
import torch

MODULES = {
    "LSTM": lambda: torch.nn.LSTM(6, 8, num_layers=2),
    "LSTM-bidirectional-batch_first": lambda: torch.nn.LSTM(6, 8, bidirectional=True, batch_first=True),
    "LSTM-no-bias": lambda: torch.nn.LSTM(6, 8, bias=False),
    "LSTM-proj": lambda: torch.nn.LSTM(6, 8, proj_size=4),
    "GRU": lambda: torch.nn.GRU(6, 8, num_layers=2),
    "GRU-bidirectional": lambda: torch.nn.GRU(6, 8, bidirectional=True),
    "GRU-no-bias": lambda: torch.nn.GRU(6, 8, bias=False),
    "RNN-tanh": lambda: torch.nn.RNN(6, 8),
    "LSTMCell": lambda: torch.nn.LSTMCell(6, 8),
    "GRUCell": lambda: torch.nn.GRUCell(6, 8),
    "RNNCell": lambda: torch.nn.RNNCell(6, 8, nonlinearity="relu"),
}


def _outputs(result):
    """Flattens a module's (output, hidden) nesting into a list of tensors."""
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for item in result for t in _outputs(item)]


def _run(module, x, device):
    module = module.to(device)
    x = x.detach().to(device).requires_grad_()
    outputs = _outputs(module(x))
    sum(o.float().pow(2).sum() for o in outputs).backward()
    return outputs, x.grad, [p.grad for p in module.parameters()]


@pytest.mark.parametrize("name", list(MODULES))
def test_recurrent_module_matches_cpu_forward_and_backward(name):
    torch.manual_seed(0)
    cpu_module = MODULES[name]()
    flagos_module = MODULES[name]()
    flagos_module.load_state_dict(cpu_module.state_dict())
    x = torch.randn(3, 5, 6) if "Cell" not in name else torch.randn(5, 6)
    expected = _run(cpu_module, x, "cpu")
    actual = _run(flagos_module, x, "flagos")
    assert all(o.device.type == "flagos" for o in actual[0])
    torch.testing.assert_close([o.cpu() for o in actual[0]], expected[0], msg=f"{name}: outputs")
    torch.testing.assert_close(actual[1].cpu(), expected[1], msg=f"{name}: input gradient")
    torch.testing.assert_close([g.cpu() for g in actual[2]], expected[2], msg=f"{name}: parameter gradients")


def test_lstm_with_initial_state_and_packed_sequence():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 5)
    sequences = [torch.randn(4, 4), torch.randn(2, 4), torch.randn(1, 4)]
    h0, c0 = torch.randn(1, 3, 5), torch.randn(1, 3, 5)
    packed = torch.nn.utils.rnn.pack_sequence(sequences)
    expected, (h, c) = lstm(packed, (h0, c0))
    lstm.to("flagos")
    actual, (fh, fc) = lstm(packed.to("flagos"), (h0.to("flagos"), c0.to("flagos")))
    torch.testing.assert_close(actual.data.cpu(), expected.data)
    torch.testing.assert_close((fh.cpu(), fc.cpu()), (h, c))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_fused_cells_in_half_precision_match_float_math(cell):
    # The fused cell ops themselves, as aten's cells call them for a PrivateUse1 tensor.
    torch.manual_seed(0)
    gates = 4 if cell == "lstm" else 3
    args = [torch.randn(5, gates * 8), torch.randn(5, gates * 8), torch.randn(5, 8), torch.randn(gates * 8)]
    args.append(torch.randn(gates * 8))
    op = torch.ops.aten._thnn_fused_lstm_cell if cell == "lstm" else torch.ops.aten._thnn_fused_gru_cell
    reference = op(*[a.to("flagos") for a in args])
    half = op(*[a.to("flagos", torch.bfloat16) for a in args])
    for r, h in zip(reference, half, strict=False):
        assert h.dtype == torch.bfloat16
        torch.testing.assert_close(h.float().cpu(), r.cpu(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_fused_cell_backward_passes_gradcheck(cell):
    torch.manual_seed(0)
    gates = 4 if cell == "lstm" else 3
    shapes = [(3, gates * 4), (3, gates * 4), (3, 4), (gates * 4,), (gates * 4,)]
    args = [torch.randn(s, dtype=torch.float64, device="flagos", requires_grad=True) for s in shapes]
    op = torch.ops.aten._thnn_fused_lstm_cell if cell == "lstm" else torch.ops.aten._thnn_fused_gru_cell
    differentiable = 2 if cell == "lstm" else 1  # the workspace is not differentiable
    assert torch.autograd.gradcheck(lambda *a: op(*a)[:differentiable], args)
