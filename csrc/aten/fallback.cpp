// Running aten ops on the compute device: the boxed fallback that every op
// without a flagos kernel of its own reaches (it runs the compute device's
// kernel on views of the same memory, compute_views.h), and the compute
// overrides: the ops that the plain fallback does not serve as they are
// (aten routes convolution elsewhere for an unknown backend, dropout would
// draw from the wrong generator, batch and group norm need other layouts).
// registration.cpp registers all of them.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/native_batch_norm.h>
#include <ATen/ops/native_batch_norm_backward.h>
#include <ATen/ops/ones_like.h>
#include <c10/core/DeviceGuard.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../runtime/generator.h"
#include "../runtime/runtime.h"
#include "aten.h"
#include "compute_views.h"

namespace flagos {

void raise_unsupported(std::string_view op, c10::DeviceIndex index, const c10::NotImplementedError& e) {
  std::string detail = e.what_without_backtrace();
  detail = detail.substr(0, detail.find('\n'));
  TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: operator ", op, " is not supported on flagos:", static_cast<int>(index),
                              " for these arguments: its compute device (",
                              c10::DeviceTypeName(compute_device_type(), true), ") said: ", detail);
  TORCH_INTERNAL_ASSERT(false);  // unreachable: keeps [[noreturn]] true for the compiler
}

// ---------------------------------------------------------------- fallback

namespace {

bool is_generator_arg(const c10::Argument& arg) {
  const c10::TypePtr& type = arg.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  return type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

}  // namespace

void flagos_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t num_args = arguments.size();
  const size_t first = stack->size() - num_args;
  Aliases aliases(schema.operator_name().name);

  // Pass 1: which flagos device this call runs on; reject mixed devices.
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = (*stack)[first + i];
    if (v.isTensor()) {
      aliases.note_device_of(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) aliases.note_device_of(t);
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
        if (t) aliases.note_device_of(*t);
    } else if (v.isDevice() && v.toDevice().type() == kDeviceType) {
      aliases.note_device(index_or_current(v.toDevice()));
    }
  }
  const c10::DeviceIndex index = aliases.index();
  check_index(index);
  c10::DeviceGuard guard(c10::Device(kDeviceType, index));
  ComputeStreamGuard on_flagos_stream(index);

  // Pass 2: replace flagos tensors, devices and generators by compute-device ones.
  c10::SmallVector<size_t, 2> written;
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& v = (*stack)[first + i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (is_flagos(t)) {
        v = aliases.alias(t);
        if (arguments[i].alias_info() && arguments[i].alias_info()->isWrite()) written.push_back(i);
      } else {
        aliases.to_compute(t);  // checks it
      }
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) out.push_back(aliases.to_compute(t));
      v = out;
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list = v.toOptionalTensorList();
      c10::List<std::optional<at::Tensor>> out;
      out.reserve(list.size());
      for (const std::optional<at::Tensor>& t : list)
        out.push_back(t ? std::optional<at::Tensor>(aliases.to_compute(*t)) : t);
      v = out;
    } else if (v.isDevice()) {
      if (v.toDevice().type() == kDeviceType) v = compute_device(index);
    } else if (v.isGenerator()) {
      const at::Generator& g = v.toGenerator();
      if (g.device().type() == kDeviceType) v = compute_generator(g);
    } else if (v.isNone() && is_generator_arg(arguments[i])) {
      v = compute_generator(default_generator(index));  // the flagos device's own random stream
    }
  }

  // Keep the compute-device views of written arguments for write-back.
  c10::SmallVector<at::Tensor, 2> written_views;
  for (size_t i : written) written_views.push_back((*stack)[first + i].toTensor());

  try {
    op.callBoxed(stack);
  } catch (const c10::NotImplementedError& e) {
    raise_unsupported(c10::toString(schema.operator_name()), index, e);
  }

  for (const at::Tensor& a : written_views) aliases.write_back(a);

  const size_t num_returns = schema.returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      v = aliases.to_flagos(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) out.push_back(aliases.to_flagos(t));
      v = out;
    }
  }
}

// ---------------------------------------------------------------- boxed per-op adjustments

// native_group_norm(_backward) have a CompositeExplicitAutograd math kernel
// that a backend without its own kernel gets; it views its input as
// contiguous and fails on channels_last, where the compute device's kernel
// works. CUDA's kernels further require contiguous (NCHW) tensors: aten's
// group_norm makes its input so for every device but the CPU, a direct call
// need not; and the fake kernel (torch/_refs native_group_norm) predicts a
// contiguous output for such devices, which a contiguous input gives.
namespace {
void make_contiguous(torch::jit::Stack* stack, size_t index) {
  const at::Tensor t = (*stack)[index].toTensor();
  if (t.defined() && !t.is_contiguous()) (*stack)[index] = t.contiguous();
}
}  // namespace

void native_group_norm_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t first = stack->size() - op.schema().arguments().size();
  if (compute_device_type() != c10::kCPU) make_contiguous(stack, first);  // input
  flagos_fallback(op, stack);
}

void native_group_norm_backward_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t first = stack->size() - op.schema().arguments().size();
  if (compute_device_type() != c10::kCPU) {
    make_contiguous(stack, first);      // grad_out
    make_contiguous(stack, first + 1);  // input
  }
  flagos_fallback(op, stack);
}

// ---------------------------------------------------------------- compute overrides

namespace {

// One call of a compute override that runs one compute-device op, unboxed,
// set up as direct_kernels.cpp's kernels are (OnFlagosDevice).
class OverrideCall {
 public:
  OverrideCall(std::string_view op, std::initializer_list<const at::Tensor*> tensors)
      : aliases(noting_devices(op, tensors)), on_device_(aliases), op_(op) {}

  // The compute-device tensor for an argument the op only reads.
  at::Tensor read(const at::Tensor& t) { return aliases.to_compute(t, /*written=*/false); }
  at::Tensor read(const std::optional<at::Tensor>& t) { return t && t->defined() ? read(*t) : at::Tensor(); }

  // Runs the compute device's op; its "not implemented" names flagos's op and device.
  template <class Kernel>
  auto run(const Kernel& kernel) {
    try {
      return kernel();
    } catch (const c10::NotImplementedError& e) {
      raise_unsupported(op_, aliases.index(), e);
    }
  }

  Aliases aliases;

 private:
  static Aliases noting_devices(std::string_view op, std::initializer_list<const at::Tensor*> tensors) {
    Aliases aliases(op);
    aliases.note_devices_of(tensors);
    return aliases;
  }

  OnFlagosDevice on_device_;
  std::string_view op_;
};

const at::Tensor& or_undefined(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t ? *t : undefined;
}

// Convolution: for a device outside CPU/CUDA/MKLDNN, aten::_convolution
// routes to the *_overrideable ops, whose default kernels only raise. flagos
// has kernels for those, and for aten::convolution and
// aten::convolution_backward themselves: they run the compute device's own
// convolution on views of the same memory. The latter two spare a call the
// first pass of aten's convolution front end (checks, backend selection),
// which the compute device's convolution runs again.
//
// Strides: fake tensors (what inductor plans with) predict a convolution's
// output layout with _determine_backend_memory_format(input, weight,
// backend), and for a flagos tensor the backend is Overrideable. The compute
// device may choose otherwise (the CPU keeps channels_last), which is the
// known convolution stride-mismatch bug; so results are laid out in the format
// that same function names for Overrideable.

// The layout the fake convolution predicts (torch_fl.compile._inductor_adapter,
// conv_layout_of_compute_device): cuDNN's suggestion on the cuda accelerator,
// so a channels-last convolution stays channels-last without a copy.
at::MemoryFormat predicted_conv_format(const at::Tensor& input, const at::Tensor& weight) {
  const auto backend =
      compute_device_type() == c10::kCUDA ? at::native::ConvBackend::Cudnn : at::native::ConvBackend::Overrideable;
  at::MemoryFormat format = at::native::_determine_backend_memory_format(input, weight, backend);
  bool fits = (format == at::MemoryFormat::ChannelsLast && input.dim() == 4) ||
              (format == at::MemoryFormat::ChannelsLast3d && input.dim() == 5);
  return fits ? format : at::MemoryFormat::Contiguous;
}

at::Tensor in_format(const at::Tensor& t, at::MemoryFormat format) {
  return t.defined() && !t.is_contiguous(format) ? t.contiguous(format) : t;
}

}  // namespace

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  OverrideCall call("aten::convolution", {&input, &weight, &or_undefined(bias)});
  at::Tensor out = call.run([&] {
    return at::convolution(call.read(input), call.read(weight), call.read(bias), stride, padding, dilation, transposed,
                           output_padding, groups);
  });
  return call.aliases.to_flagos(in_format(out, predicted_conv_format(input, weight)));
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  return flagos::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::OptionalIntArrayRef bias_sizes, c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  OverrideCall call("aten::convolution_backward", {&grad_output, &input, &weight});
  auto [gi, gw, gb] = call.run([&] {
    return at::convolution_backward(call.read(grad_output), call.read(input), call.read(weight), bias_sizes, stride,
                                    padding, dilation, transposed, output_padding, groups, output_mask);
  });
  const at::MemoryFormat format = predicted_conv_format(input, weight);
  return {call.aliases.to_flagos(in_format(gi, format)), call.aliases.to_flagos(in_format(gw, format)),
          call.aliases.to_flagos(gb)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const int64_t bias_size = transposed ? weight.size(1) * groups : weight.size(0);
  return flagos::convolution_backward(grad_output, input, weight, c10::IntArrayRef(bias_size), stride, padding,
                                      dilation, transposed, output_padding, groups, output_mask);
}

// Batch norm: the compute device's kernel computes, then the results take the
// shapes and strides that fake tensors (torch/_decomp's native_batch_norm and
// its backward for a non-CPU device) predict: the output and grad_input laid
// out like the input (a transposed input stays transposed; the CPU kernels
// return them contiguous), and C-element save_mean/save_invstd in eval mode
// (the CPU kernel returns 0 elements). Training updates the running
// statistics in place: they are the written arguments.
namespace {
at::Tensor laid_out_like(const at::Tensor& result, const at::Tensor& input) {
  if (!result.defined() || result.strides() == input.strides() || !input.is_non_overlapping_and_dense()) return result;
  return at::empty_strided(input.sizes(), input.strides(), result.options()).copy_(result);
}
}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(const at::Tensor& input,
                                                                 const std::optional<at::Tensor>& weight,
                                                                 const std::optional<at::Tensor>& bias,
                                                                 const std::optional<at::Tensor>& running_mean,
                                                                 const std::optional<at::Tensor>& running_var,
                                                                 bool training, double momentum, double eps) {
  OverrideCall call("aten::native_batch_norm", {&input, &or_undefined(weight), &or_undefined(bias),
                                                &or_undefined(running_mean), &or_undefined(running_var)});
  if (training) {
    call.aliases.mark_written(or_undefined(running_mean));
    call.aliases.mark_written(or_undefined(running_var));
  }
  auto statistic = [&](const std::optional<at::Tensor>& t) {
    return training && t && t->defined() ? call.aliases.to_compute(*t) : call.read(t);
  };
  at::Tensor mean = statistic(running_mean), var = statistic(running_var);
  auto [out, save_mean, save_invstd] = call.run([&] {
    return at::native_batch_norm(call.read(input), call.read(weight), call.read(bias), mean, var, training, momentum,
                                 eps);
  });
  for (const at::Tensor& stat : {mean, var})
    if (training && stat.defined()) call.aliases.write_back(stat);
  const int64_t channels = input.dim() > 1 ? input.size(1) : 1;
  for (at::Tensor* saved : {&save_mean, &save_invstd})
    if (!training && saved->numel() == 0 && channels > 0) *saved = at::empty({channels}, saved->options());
  return {call.aliases.to_flagos(laid_out_like(out, input)), call.aliases.to_flagos(save_mean),
          call.aliases.to_flagos(save_invstd)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> output_mask) {
  OverrideCall call("aten::native_batch_norm_backward",
                    {&grad_out, &input, &or_undefined(weight), &or_undefined(running_mean), &or_undefined(running_var),
                     &or_undefined(save_mean), &or_undefined(save_invstd)});
  auto [grad_input, grad_weight, grad_bias] = call.run([&] {
    return at::native_batch_norm_backward(call.read(grad_out), call.read(input), call.read(weight),
                                          call.read(running_mean), call.read(running_var), call.read(save_mean),
                                          call.read(save_invstd), train, eps, output_mask);
  });
  return {call.aliases.to_flagos(laid_out_like(grad_input, input)), call.aliases.to_flagos(grad_weight),
          call.aliases.to_flagos(grad_bias)};
}

// Dropout: the compute device's kernel draws its mask from the compute
// device's *global* generator (no generator argument to swap), which would
// make flagos dropout ignore torch.flagos.manual_seed. Built from flagos ops
// instead, so bernoulli_ reaches the fallback and the flagos generator.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input)};
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  double keep = 1.0 - p;
  double scale = keep == 0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool), at::MemoryFormat::Contiguous);
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(scale), mask};
}

}  // namespace flagos
