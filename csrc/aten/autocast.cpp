// Autocast (torch.autocast("flagos", dtype=...)) for flagos: the
// AutocastPrivateUse1 kernels. flagos computes on CUDA or on a CPU that runs
// float16 and bfloat16 kernels, and code written for cuda expects cuda's
// policy, so flagos casts exactly the op lists that aten's autocast gives
// cuda (and xpu): the AT_FORALL_* lists of ATen/autocast_mode.h, with the same
// policy per list. Ops on no list fall through to the flagos kernels.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace flagos {
namespace {

// As for cuda: binary_cross_entropy is not safe in float16; the message
// names the safe alternative.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast on flagos "
              "(as on cuda). Combine the sigmoid and the loss with "
              "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, which are "
              "safe to autocast.");
}

// The op lists name their signatures as aten's own autocast_mode.cpp sees
// them, from inside namespace at::autocast.
// torch 2.11's lists also name DimnameList and TensorList; torch 2.13 has no
// named tensors, and no Dimname.h.
#if __has_include(<ATen/core/Dimname.h>)
using at::DimnameList;
#endif
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;
using at::TensorList;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define FLAGOS_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(FLAGOS_LOWER_PRECISION_FP)
#define FLAGOS_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(FLAGOS_FP32)
#define FLAGOS_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(FLAGOS_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define FLAGOS_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(FLAGOS_PROMOTE)
#undef FLAGOS_LOWER_PRECISION_FP
#undef FLAGOS_FP32
#undef FLAGOS_FP32_SET_OPT_DTYPE
#undef FLAGOS_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN((&binary_cross_entropy_banned)));
}

}  // namespace
}  // namespace flagos
