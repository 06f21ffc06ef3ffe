// The aten layer's routing header: what the Python module calls at import,
// and the kernels that registration.cpp registers for PrivateUse1 (defined in
// memory_ops.cpp and fallback.cpp). The runtime (csrc/runtime) knows nothing
// of aten; only this layer and the Python module include this header.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "../runtime/runtime.h"

namespace flagos {

// ---- routing (registration.cpp, rnn.cpp) ----
// Sends ops that aten would decompose for flagos straight to the compute
// device's kernels where it has them (through the eager fallback), and gives
// the hottest ops unboxed kernels; once per process, at import. Returns how
// many ops were registered.
int64_t route_to_compute_kernels();
// The ops that route_to_compute_kernels gave unboxed kernels (aten/direct_kernels.cpp).
std::vector<std::string> direct_kernel_names();
// Compiled code's extern matmuls on flagos (extern_kernels.mm/addmm/bmm with
// out=, which torch_fl/compile's wrapper imports from torch_fl._C): the op's
// unboxed flagos kernel called directly where the dispatcher's layers above
// it would only pass the call down, else the full dispatch (aten/direct_kernels.cpp).
void compiled_mm(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out);
void compiled_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const c10::Scalar& beta,
                    const c10::Scalar& alpha, at::Tensor& out);
void compiled_bmm(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out);
// Whether the dispatcher still holds, at flagos's keys, the kernels it held for
// those three ops when flagos registered its own; the entry points take the
// full dispatch (any kernel registered since) while not. Compiled code's
// wrapper asks when it is generated.
bool compiled_matmul_kernels_unchanged();
// How many calls of the three entry points took the full dispatch (tests).
int64_t compiled_matmul_full_dispatches();
// How many arguments of the calling thread took the view kept with an op's
// output, and this thread's kept view of their address (compute_views.h; tests).
std::pair<int64_t, int64_t> compute_view_reuses();
// Kernels for the fused RNN cells where the compute device has none (aten/rnn.cpp);
// once per process, at import. Returns how many ops were registered.
int64_t register_rnn_cells();

// The flagos device an op's `device=` argument names (the current one when it
// names none), checked.
inline c10::DeviceIndex index_or_current(std::optional<c10::Device> device) {
  c10::DeviceIndex index = device && device->has_index() ? device->index() : current_device();
  check_index(index);
  return index;
}

// ---- the boxed fallback (fallback.cpp) ----
// Runs any aten op's compute-device kernel on compute views (compute_views.h)
// of its flagos arguments, and maps the results back.
void flagos_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The compute device's NotImplementedError for `op`, restated with the flagos
// device and the op's name.
[[noreturn]] void raise_unsupported(std::string_view op, c10::DeviceIndex index, const c10::NotImplementedError& e);

// ---- compute overrides (fallback.cpp): ops the plain fallback does not serve as they are ----
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups);
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups);
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::OptionalIntArrayRef bias_sizes, c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask);
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask);
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train);
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(const at::Tensor& input,
                                                                 const std::optional<at::Tensor>& weight,
                                                                 const std::optional<at::Tensor>& bias,
                                                                 const std::optional<at::Tensor>& running_mean,
                                                                 const std::optional<at::Tensor>& running_var,
                                                                 bool training, double momentum, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> output_mask);
void native_group_norm_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void native_group_norm_backward_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// ---- the device's own memory (memory_ops.cpp) ----
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory);
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format);
at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source);
at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                                      c10::IntArrayRef stride);
at::Tensor& set_empty(at::Tensor& self);
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
// A copy of `t` in new memory with its strides, on the current stream: what a CUDA graph
// replay hands out of the graph's output buffers, which the next replay overwrites.
at::Tensor copy_of_output(const at::Tensor& t);
void record_stream_op(at::Tensor& self, c10::Stream stream);

}  // namespace flagos
