// scaled_dot_product_attention on flagos: which attention kernel runs.
//
// aten's scaled_dot_product_attention asks a per-device DispatchStub
// (_fused_sdp_choice_stub) for a backend, and a device without one gets the
// math composition (matmul, softmax, matmul) -- every PrivateUse1 device, in
// eager and under torch.compile alike, since the choice is made while tracing,
// on fake tensors. Registering the stub for PrivateUse1 lets flagos choose:
//   - host accelerator: math, which torch.compile turns into flagos kernels;
//   - cuda accelerator: what CUDA would choose for the same tensors. CUDA's
//     selection is asked with metadata-only CUDA stand-ins of the arguments
//     (it reads shapes, strides, dtypes and flags, never data; fake tensors
//     have no data), then the chosen op runs through the eager fallback.
// Flash attention is the exception: aten calls its CUDA kernel for CUDA
// tensors only (any other device gets the CPU flash kernel), so for flagos
// the flash choice becomes `overrideable`, aten's hook for a backend's own
// fused attention, implemented below with CUDA's flash kernel.
#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "../runtime/runtime.h"

namespace flagos {
namespace {

using at::SDPBackend;

// A CUDA tensor with `t`'s geometry, dtype and requires_grad, and no memory.
at::Tensor cuda_stand_in(const at::Tensor& t, c10::Device device) {
  c10::Storage no_memory(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, device), nullptr, false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(no_memory), c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                                   t.dtype());
  impl->set_sizes_and_strides(t.sym_sizes(), t.sym_strides(), t.sym_storage_offset());
  at::Tensor stand_in(std::move(impl));
  if (t.requires_grad()) stand_in.set_requires_grad(true);
  return stand_in;
}

// Inductor lays out an attention mask with the alignment CUDA's fused kernels
// need only for CUDA and XPU tensors (torch/_inductor/lowering.py,
// sdpa_constraint); a flagos mask whose last dim is not a multiple of 8 could
// reach the kernel unaligned in compiled code, so it takes math instead.
constexpr int64_t kMaskAlignment = 8;

int64_t choose_backend(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                       const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                       std::optional<double> scale, bool enable_gqa) {
  const auto math = static_cast<int64_t>(SDPBackend::math);
  // Dropout: the fused kernels draw from the compute device's global
  // generator (they take no generator argument) and would ignore
  // torch.flagos.manual_seed; math's dropout draws from the flagos generator.
  if (compute_device_type() != c10::kCUDA || dropout_p > 0.0) return math;
  const c10::Device cuda(c10::kCUDA, query.device().index());
  c10::DeviceGuard guard(cuda);  // CUDA's selection reads the current device's properties
  const bool has_mask = attn_mask && attn_mask->defined();
  std::optional<at::Tensor> mask = has_mask ? std::optional<at::Tensor>(cuda_stand_in(*attn_mask, cuda)) : std::nullopt;
  // Straight to CUDA's kernel: the stand-ins must not meet a Python mode
  // (fake tensors, functionalization) that is tracing this call.
  const int64_t choice = at::_ops::_fused_sdp_choice::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CUDA), cuda_stand_in(query, cuda), cuda_stand_in(key, cuda),
      cuda_stand_in(value, cuda), mask, dropout_p, is_causal, scale, enable_gqa);
  switch (static_cast<SDPBackend>(choice)) {
    case SDPBackend::flash_attention: {
      // aten pads the head dim to a multiple of 8 for CUDA's flash kernel;
      // the flagos hook does not, so other head dims take math.
      bool aligned = query.sym_size(-1) % 8 == 0 && key.sym_size(-1) % 8 == 0 && value.sym_size(-1) % 8 == 0;
      return aligned ? static_cast<int64_t>(SDPBackend::overrideable) : math;
    }
    case SDPBackend::efficient_attention:
    case SDPBackend::cudnn_attention: return has_mask && attn_mask->sym_size(-1) % kMaskAlignment != 0 ? math : choice;
    default: return choice;
  }
}

void check_cuda_compute(const char* op, const at::Tensor& query) {
  TORCH_CHECK_NOT_IMPLEMENTED(compute_device_type() == c10::kCUDA, "flagos: ", op, " is not supported on ",
                              query.device(), ": it runs CUDA's flash attention, and this accelerator computes on ",
                              c10::DeviceTypeName(compute_device_type(), true),
                              ". scaled_dot_product_attention uses the math backend here.");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
fused_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal, bool return_debug_mask,
                std::optional<double> scale) {
  check_cuda_compute("aten::_scaled_dot_product_fused_attention_overrideable", query);
  TORCH_CHECK(!(attn_bias && attn_bias->defined()),
              "flagos: the fused attention hook runs CUDA's flash kernel, which takes no attention mask; "
              "scaled_dot_product_attention chooses it only without one. Call scaled_dot_product_attention instead.");
  auto [out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_mask] =
      at::_scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask, scale);
  // No debug mask unless asked: what the op's meta function (what compiled
  // code plans with) returns.
  return {out,         logsumexp,     cum_seq_q,
          cum_seq_k,   max_q,         max_k,
          philox_seed, philox_offset, return_debug_mask ? debug_mask : at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q, const at::Tensor& cum_seq_k, c10::SymInt max_q,
    c10::SymInt max_k, double dropout_p, bool is_causal, const at::Tensor& philox_seed, const at::Tensor& philox_offset,
    std::optional<double> scale) {
  check_cuda_compute("aten::_scaled_dot_product_fused_attention_overrideable_backward", query);
  auto [grad_q, grad_k, grad_v] = at::_scaled_dot_product_flash_attention_backward_symint(
      grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, std::move(max_q), std::move(max_k), dropout_p,
      is_causal, philox_seed, philox_offset, scale);
  return {grad_q, grad_k, grad_v, at::Tensor()};  // no mask, so no mask gradient
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", fused_attention);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", fused_attention_backward);
}

}  // namespace flagos

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &flagos::choose_backend)
}  // namespace at::native
