// Which kernel each aten op reaches on flagos: every registration for
// PrivateUse1 in one place (besides attention.cpp's attention hooks,
// autocast.cpp's AutocastPrivateUse1 lists and rnn.cpp's cells).
//
// Native kernels only where the op's job is the device's own memory:
// allocation, views, resize, set_, copies (memory_ops.cpp; the views are
// aten's own kernels). Every other aten
// op reaches one boxed fallback that runs the compute device's kernel on views
// of the same memory (fallback.cpp, compute_views.h); the hottest ops have
// unboxed kernels doing the same with less host work per call
// (direct_kernels.cpp), registered at import by route_to_compute_kernels.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "../runtime/runtime.h"
#include "aten.h"
#include "compute_views.h"
#include "direct_kernels.h"

namespace flagos {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_", set_empty);
  m.impl("copy_", copy_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("record_stream", record_stream_op);
  m.impl("convolution", convolution);
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("convolution_backward", convolution_backward);
  m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
  m.impl("native_dropout", native_dropout);
  m.impl("native_batch_norm", native_batch_norm);
  m.impl("native_batch_norm_backward", native_batch_norm_backward);
}

// Ops whose CompositeExplicitAutogradNonFunctional kernel (empty output + the
// out= variant) misbehaves for a backend outside CPU/CUDA: mse_loss's out=
// meta treats the 0-dim reduced output as elementwise and warns "An output
// with one or more elements was resized". Send them straight to the compute
// device's functional kernel instead.
// Group norm: the fallback, with the layouts that fake tensors predict
// (fallback.cpp).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mse_loss", torch::CppFunction::makeFromBoxedFunction<&flagos_fallback>());
  m.impl("native_group_norm", torch::CppFunction::makeFromBoxedFunction<&native_group_norm_boxed>());
  m.impl("native_group_norm_backward", torch::CppFunction::makeFromBoxedFunction<&native_group_norm_backward_boxed>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&flagos_fallback>()); }

// Two kinds of aten ops get a kernel for a backend outside CPU/CUDA that
// decomposes them, where the compute device has a kernel of its own; on
// flagos the fallback runs the compute device's kernel instead (its output
// memory, from the compute device's allocator, is adopted):
// - CompositeExplicitAutograd decompositions (native_layer_norm as batch norm
//   and addcmul, ...): more kernels than the compute device runs, and other
//   rounding, so eager flagos would not compute what the compute device does.
//   Routed on every accelerator.
// - Structured ops (add, mul, mm, cat, softmax, ...): their
//   CompositeExplicitAutogradNonFunctional kernel allocates the output
//   through the device's allocator, then calls the out= form, so the meta
//   function runs twice (there and in the compute device's out= kernel), with
//   an extra dispatch and allocation call per op: the per-op host cost that
//   makes host-bound eager models slower than on the compute device itself.
//   Not on the CPU: the flagos caching allocator beats the CPU allocator on
//   large outputs, so there the composite kernel stays.
// Excluded: ops whose compute kernel lays its output out otherwise than the
// meta function predicts (upstream CUDA bugs the conformance suite reports
// on native cuda, conformance/expectations/cuda.toml); through the composite
// kernel they get the predicted layout.
namespace {
bool keeps_composite(const std::string& name) {
  static const std::set<std::string> names = {"aten::upsample_bilinear2d", "aten::upsample_trilinear3d",
                                              "aten::upsample_bilinear2d_backward",
                                              "aten::upsample_trilinear3d_backward"};
  return names.count(name) > 0;
}

bool routes_to_compute_kernel(const c10::OperatorHandle& op) {
  if (op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) || !op.hasKernelForDispatchKey(compute_key()))
    return false;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) return true;
  return compute_device_type() != c10::kCPU &&
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
}

// Ops with no kernel of their own for flagos at all (no composite either):
// every call reaches the boxed fallback.
bool has_no_flagos_kernel(const c10::OperatorHandle& op) {
  return !op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
}

// Where the fallback would run the op's compute kernel: routed here, or
// reached without routing.
bool reaches_compute_kernel(const c10::OperatorHandle& op) {
  if (keeps_composite(op.schema().operator_name().name)) return false;
  if (routes_to_compute_kernel(op)) return true;
  return has_no_flagos_kernel(op) && op.hasKernelForDispatchKey(compute_key());
}

std::set<std::string>& direct_kernels_registered() {
  static std::set<std::string> names;
  return names;
}
}  // namespace

int64_t route_to_compute_kernels() {
  static std::once_flag routed;
  static int64_t count = 0;
  std::call_once(routed, [] {
    // Leaked on purpose: the registrations must outlive every op call.
    auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    // The hottest ops first, unboxed; an op registered here has a flagos
    // kernel afterwards, so the loop below leaves it alone.
    direct_kernels_registered() = register_direct_kernels(*lib, reaches_compute_kernel);
    count += static_cast<int64_t>(direct_kernels_registered().size());
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0 || keeps_composite(name.name)) continue;
      std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
      if (!op || !routes_to_compute_kernel(*op)) continue;
      std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
      lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&flagos_fallback>());
      ++count;
    }
  });
  return count;
}

std::vector<std::string> direct_kernel_names() {
  route_to_compute_kernels();
  return {direct_kernels_registered().begin(), direct_kernels_registered().end()};
}

}  // namespace flagos
