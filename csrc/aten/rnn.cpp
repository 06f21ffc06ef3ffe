// Recurrent cells on the host accelerator.
//
// aten's LSTM and GRU cells (nn.LSTM, nn.GRU, LSTMCell, GRUCell) call the
// fused cell ops _thnn_fused_lstm_cell / _thnn_fused_gru_cell for every
// PrivateUse1 tensor, as for cuda; their backward formulas
// (derivatives.yaml) call _thnn_fused_lstm_cell_backward_impl and
// _thnn_fused_gru_cell_backward. Only CUDA has kernels for them. On the cuda
// accelerator the fallback runs CUDA's; on a compute device without them
// (the CPU) these kernels compute the same thing from its pointwise kernels,
// on compute-device views of the flagos memory, with the same workspace
// layouts as CUDA's (the backward reads what the forward saved).
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <tuple>

#include "../runtime/runtime.h"
#include "aten.h"
#include "compute_views.h"

namespace flagos {
namespace {

at::Tensor view_or_undefined(Aliases& aliases, const std::optional<at::Tensor>& t) {
  return t && t->defined() ? aliases.to_compute(*t) : at::Tensor();
}

// Gates [B, k*H] with both biases added, in float32 or wider (as CUDA
// accumulates half and bfloat16 in float).
at::Tensor summed_gates(const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& input_bias,
                        const at::Tensor& hidden_bias) {
  at::ScalarType acc = at::toOpMathType(input_gates.scalar_type());
  at::Tensor gates = input_gates.to(acc) + hidden_gates.to(acc);
  if (input_bias.defined()) gates = gates + input_bias.to(acc) + hidden_bias.to(acc);
  return gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  Aliases aliases("aten::_thnn_fused_lstm_cell");
  aliases.note_devices_of({&input_gates, &hidden_gates, &cx});
  c10::DeviceGuard guard(c10::Device(kDeviceType, aliases.index()));
  const c10::ScalarType dtype = input_gates.scalar_type();
  at::Tensor gates = summed_gates(aliases.to_compute(input_gates), aliases.to_compute(hidden_gates),
                                  view_or_undefined(aliases, input_bias), view_or_undefined(aliases, hidden_bias));
  auto chunks = gates.chunk(4, 1);
  at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(), o = chunks[3].sigmoid();
  at::Tensor cy = f * aliases.to_compute(cx).to(gates.scalar_type()) + i * g;
  at::Tensor hy = o * cy.tanh();
  at::Tensor workspace = at::cat({i, f, g, o}, 1).to(dtype);
  return {aliases.to_flagos(hy.to(dtype)), aliases.to_flagos(cy.to(dtype)), aliases.to_flagos(workspace)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy_opt, const std::optional<at::Tensor>& grad_cy_opt, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const bool has_hy = grad_hy_opt && grad_hy_opt->defined(), has_cy = grad_cy_opt && grad_cy_opt->defined();
  if (!has_hy && !has_cy) return {};
  Aliases aliases("aten::_thnn_fused_lstm_cell_backward_impl");
  aliases.note_devices_of({&cx, &cy, &workspace});
  c10::DeviceGuard guard(c10::Device(kDeviceType, aliases.index()));
  const c10::ScalarType dtype = workspace.scalar_type();
  const c10::ScalarType acc = at::toOpMathType(dtype);
  auto gates = aliases.to_compute(workspace).to(acc).chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  at::Tensor c_in = aliases.to_compute(cx).to(acc);
  at::Tensor tanh_cy = aliases.to_compute(cy).to(acc).tanh();
  at::Tensor go = has_hy ? aliases.to_compute(*grad_hy_opt).to(acc) : at::zeros_like(tanh_cy);
  at::Tensor gc = go * o * (1 - tanh_cy * tanh_cy);
  if (has_cy) gc = gc + aliases.to_compute(*grad_cy_opt).to(acc);
  at::Tensor grad_gates =
      at::cat({gc * g * i * (1 - i), gc * c_in * f * (1 - f), gc * i * (1 - g * g), go * tanh_cy * o * (1 - o)}, 1)
          .to(dtype);
  at::Tensor grad_cx = (gc * f).to(dtype);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0, /*keepdim=*/false) : at::Tensor();
  return {aliases.to_flagos(grad_gates), aliases.to_flagos(grad_cx), aliases.to_flagos(grad_bias)};
}

// Workspace [B, 5H]: reset gate, update gate, new gate, hx, and the hidden
// new-gate pre-activation with its bias (CUDA's layout).
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  Aliases aliases("aten::_thnn_fused_gru_cell");
  aliases.note_devices_of({&input_gates, &hidden_gates, &hx});
  c10::DeviceGuard guard(c10::Device(kDeviceType, aliases.index()));
  const c10::ScalarType dtype = input_gates.scalar_type();
  const c10::ScalarType acc = at::toOpMathType(dtype);
  at::Tensor in_gates = aliases.to_compute(input_gates).to(acc);
  at::Tensor h_gates = aliases.to_compute(hidden_gates).to(acc);
  at::Tensor ib = view_or_undefined(aliases, input_bias), hb = view_or_undefined(aliases, hidden_bias);
  if (ib.defined()) {
    in_gates = in_gates + ib.to(acc);
    h_gates = h_gates + hb.to(acc);
  }
  auto in = in_gates.chunk(3, 1);
  auto h = h_gates.chunk(3, 1);
  at::Tensor h_prev = aliases.to_compute(hx).to(acc);
  at::Tensor r = (in[0] + h[0]).sigmoid();
  at::Tensor z = (in[1] + h[1]).sigmoid();
  at::Tensor n = (in[2] + r * h[2]).tanh();
  at::Tensor hy = n + z * (h_prev - n);
  at::Tensor workspace = at::cat({r, z, n, h_prev, h[2]}, 1).to(dtype);
  return {aliases.to_flagos(hy.to(dtype)), aliases.to_flagos(workspace)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  Aliases aliases("aten::_thnn_fused_gru_cell_backward");
  aliases.note_devices_of({&grad_hy, &workspace});
  c10::DeviceGuard guard(c10::Device(kDeviceType, aliases.index()));
  const c10::ScalarType dtype = grad_hy.scalar_type();
  const c10::ScalarType acc = at::toOpMathType(dtype);
  auto saved = aliases.to_compute(workspace).to(acc).chunk(5, 1);
  const at::Tensor &r = saved[0], &z = saved[1], &n = saved[2], &h_prev = saved[3], &hn = saved[4];
  at::Tensor go = aliases.to_compute(grad_hy).to(acc);
  at::Tensor gz = go * (h_prev - n) * (1 - z) * z;
  at::Tensor ghx = go * z;
  at::Tensor gn = go * (1 - z) * (1 - n * n);
  at::Tensor ghn = gn * r;
  at::Tensor gr = gn * hn * (1 - r) * r;
  at::Tensor grad_input_gates = at::cat({gr, gz, gn}, 1).to(dtype);
  at::Tensor grad_hidden_gates = at::cat({gr, gz, ghn}, 1).to(dtype);
  at::Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = grad_input_gates.sum(0, /*keepdim=*/false);
    grad_hidden_bias = grad_hidden_gates.sum(0, /*keepdim=*/false);
  }
  return {aliases.to_flagos(grad_input_gates), aliases.to_flagos(grad_hidden_gates), aliases.to_flagos(ghx.to(dtype)),
          aliases.to_flagos(grad_input_bias), aliases.to_flagos(grad_hidden_bias)};
}

}  // namespace

int64_t register_rnn_cells() {
  static std::once_flag once;
  static int64_t count = 0;
  std::call_once(once, [] {
    // Where the compute device has the fused cells (CUDA), the fallback runs them.
    c10::DispatchKey compute = c10::computeDispatchKey(std::nullopt, c10::kStrided, c10::Device(compute_device_type()));
    auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    auto has_compute_kernel = [&](const char* name) {
      auto op = c10::Dispatcher::singleton().findOp({name, ""});
      return op && op->hasKernelForDispatchKey(compute);
    };
    if (!has_compute_kernel("aten::_thnn_fused_lstm_cell")) {
      lib->impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
      lib->impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward_impl));
      count += 2;
    }
    if (!has_compute_kernel("aten::_thnn_fused_gru_cell")) {
      lib->impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
      lib->impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
      count += 2;
    }
  });
  return count;
}

}  // namespace flagos
