// Eager ops for flagos.
//
// Native kernels only where the op's job is the device's own memory:
// allocation, views, resize, set_, copies. Every other aten op reaches one
// boxed fallback that runs the compute device's kernel on views of the same
// memory (compute_views.h); the hottest ops have unboxed kernels doing the
// same with less host work per call (direct_kernels.cpp).
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "../runtime/generator.h"
#include "../runtime/runtime.h"
#include "compute_views.h"
#include "direct_kernels.h"

namespace flagos {
namespace {

c10::Device compute_device(c10::DeviceIndex index) {
  c10::DeviceType type = compute_device_type();
  return type == c10::kCPU ? c10::Device(c10::kCPU) : c10::Device(type, index);
}

// The compute device's backend key (CPU, CUDA); it does not depend on the index.
c10::DispatchKey compute_key() {
  static const c10::DispatchKey key = c10::computeDispatchKey(std::nullopt, c10::kStrided, compute_device(0));
  return key;
}

c10::DeviceIndex index_or_current(std::optional<c10::Device> device) {
  c10::DeviceIndex index = device && device->has_index() ? device->index() : current_device();
  check_index(index);
  return index;
}

// A tensor of `keys` over `storage`, with the geometry and bits of `like`.
at::Tensor tensor_over(c10::Storage storage, c10::DispatchKeySet keys, const at::Tensor& like) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), keys, like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  at::Tensor out(std::move(impl));
  if (like.is_conj()) out._set_conj(true);
  if (like.is_neg()) out._set_neg(true);
  return out;
}

// A compute-device storage over a flagos storage's memory. It does not own the
// memory; resizable, so kernels that grow an out= tensor can (their new
// memory is adopted afterwards).
c10::Storage alias_storage(const c10::Storage& storage, c10::DeviceIndex index) {
  static c10::Allocator* const compute_allocator = c10::GetAllocator(compute_device_type());
  return c10::Storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                      c10::DataPtr(storage.unsafeGetStorageImpl()->data_ptr().get(), compute_device(index)),
                      compute_allocator, /*resizable=*/true);
}

c10::Storage adopted_storage(const c10::Storage& compute_storage, c10::DeviceIndex index) {
  return c10::Storage(c10::Storage::use_byte_size_t(), compute_storage.nbytes(), adopt(compute_storage, index),
                      allocator(), /*resizable=*/true);
}

// The compute-device view of one flagos tensor (used by copies).
at::Tensor as_compute(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "flagos: only strided tensors are supported, got ", t.layout());
  c10::DeviceIndex index = t.device().index();
  return tensor_over(alias_storage(t.storage(), index), compute_keys(), t);
}

}  // namespace

// ---------------------------------------------------------------- views for one call

bool is_flagos(const at::Tensor& t) { return t.defined() && t.device().type() == kDeviceType; }

c10::DispatchKeySet compute_keys() {
  static const c10::DispatchKeySet keys(compute_key());
  return keys;
}

namespace {
// Index ops accept CPU index tensors on GPUs too; elsewhere a non-scalar CPU
// tensor next to flagos tensors is a user error, as it is on CUDA.
bool accepts_host_tensors(std::string_view name) {
  return name == "aten::index" || name == "aten::index_put_" || name == "aten::_index_put_impl_" ||
         name == "aten::index_put";
}
}  // namespace

void Aliases::note_device(c10::DeviceIndex index) {
  if (!index_) {
    index_ = index;
    return;
  }
  TORCH_CHECK(*index_ == index, "flagos: ", name_, " got tensors on flagos:", static_cast<int>(*index_),
              " and flagos:", static_cast<int>(index),
              "; all flagos tensors of one op must be on the same device. Move them with .to() first.");
}

c10::DeviceIndex Aliases::index() {
  if (!index_) index_ = current_device();
  return *index_;
}

at::Tensor Aliases::alias(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "flagos: ", name_, " got a ", t.layout(),
              " flagos tensor; only strided tensors are supported");
  // One tensor passed twice stays one tensor: kernels test identity
  // (CUDA's multi-head attention takes its fused path only when query, key
  // and value are the same tensor).
  for (auto& [a, original] : tensors_)
    if (original.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return a;
  c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
  c10::Storage* view = nullptr;
  for (auto& [flagos_storage, compute_storage] : storages_)
    if (flagos_storage.unsafeGetStorageImpl() == key) view = &compute_storage;
  if (view == nullptr) {
    storages_.emplace_back(t.storage(), alias_storage(t.storage(), index()));
    view = &storages_.back().second;
  }
  at::Tensor a = tensor_over(*view, compute_keys(), t);
  tensors_.emplace_back(a, t);
  return a;
}

at::Tensor Aliases::to_compute(const at::Tensor& t) {
  if (is_flagos(t)) return alias(t);
  if (!t.defined() || (t.device().is_cpu() && (t.dim() == 0 || accepts_host_tensors(name_)))) return t;
  TORCH_CHECK(false, "flagos: ", name_, " got a tensor on ", t.device(),
              " together with flagos tensors; expected all tensors on the flagos device (0-dim CPU scalars "
              "excepted). Move it with .to('flagos') first.");
}

at::Tensor Aliases::to_flagos(const at::Tensor& r) {
  if (!r.defined() || r.device().type() != compute_device_type()) return r;
  for (auto& [a, original] : tensors_)
    if (a.unsafeGetTensorImpl() == r.unsafeGetTensorImpl()) return original;
  c10::StorageImpl* key = r.storage().unsafeGetStorageImpl();
  for (auto& [flagos_storage, compute_storage] : storages_)
    if (compute_storage.unsafeGetStorageImpl() == key)
      return tensor_over(flagos_storage, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), r);
  // Memory the kernel allocated: adopt it, once per storage.
  storages_.emplace_back(adopted_storage(r.storage(), index()), r.storage());
  return tensor_over(storages_.back().first, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), r);
}

void Aliases::write_back(const at::Tensor& a) {
  for (auto& [alias, original] : tensors_) {
    if (alias.unsafeGetTensorImpl() != a.unsafeGetTensorImpl()) continue;
    auto* impl = original.unsafeGetTensorImpl();
    const void* now = alias.storage().unsafeGetStorageImpl()->data_ptr().get();
    if (now != original.storage().unsafeGetStorageImpl()->data_ptr().get()) {
      c10::StorageImpl* target = original.storage().unsafeGetStorageImpl();
      target->set_data_ptr_noswap(adopt(alias.storage(), index()));
      target->set_nbytes(alias.storage().nbytes());
    }
    if (alias.sizes() != original.sizes() || alias.strides() != original.strides() ||
        alias.storage_offset() != original.storage_offset())
      impl->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
    return;
  }
}

void raise_unsupported(std::string_view op, c10::DeviceIndex index, const c10::NotImplementedError& e) {
  std::string detail = e.what_without_backtrace();
  detail = detail.substr(0, detail.find('\n'));
  TORCH_CHECK_NOT_IMPLEMENTED(false, "flagos: operator ", op, " is not supported on flagos:", static_cast<int>(index),
                              " for these arguments: its compute device (",
                              c10::DeviceTypeName(compute_device_type(), true), ") said: ", detail);
  TORCH_INTERNAL_ASSERT(false);  // unreachable: keeps [[noreturn]] true for the compiler
}

namespace {

// ---------------------------------------------------------------- native ops

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "flagos: only strided tensors are supported, got ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "flagos: pin_memory applies to host tensors, not flagos tensors");
  c10::DeviceIndex index = index_or_current(device);
  c10::DeviceGuard guard(c10::Device(kDeviceType, index));
  return at::detail::empty_generic(size, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided, "flagos: only strided tensors are supported, got ",
              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "flagos: pin_memory applies to host tensors, not flagos tensors");
  c10::DeviceIndex index = index_or_current(device);
  c10::DeviceGuard guard(c10::Device(kDeviceType, index));
  return at::detail::empty_strided_generic(size, stride, allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// Makes sure `self`'s storage holds `bytes`, growing it if needed.
void ensure_storage_bytes(const at::Tensor& self, size_t bytes) {
  if (bytes > self.storage().nbytes()) resize_storage_bytes(self.storage(), bytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  size_t bytes = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(), self.storage_offset());
  ensure_storage_bytes(self, bytes);
  if (memory_format && *memory_format != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(*memory_format);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kDeviceType, "flagos: set_ expects a flagos storage, got one on ",
              source.device());
  TORCH_CHECK(source.device() == self.device(), "flagos: set_ cannot move a tensor from ", self.device(), " to ",
              source.device(), "; use .to() instead");
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (stride.empty()) impl->set_sizes_contiguous(size);
  else impl->set_sizes_and_strides(size, stride);
  size_t bytes = stride.empty()
                     ? at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(), offset)
                     : at::detail::computeStorageNbytes(size, stride, self.dtype().itemsize(), offset);
  ensure_storage_bytes(self, bytes);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                                      c10::IntArrayRef stride) {
  return set_storage(self, std::move(source), offset, size, stride);
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, self.device()), allocator(), true);
  return set_storage(self, std::move(empty), 0, {0}, {});
}

// Copies between flagos devices and to/from other devices: both sides are
// viewed on the compute device, whose copy_ handles dtype, strides,
// broadcasting and (for cuda) host<->device transfers. Two sides in one
// flagos allocation share one compute storage: the compute device's copy_
// detects overlapping source and destination by comparing storages, and
// separate views of the same memory would make an overlapping copy silently
// wrong instead of an error.
bool same_memory(const c10::Storage& a, const c10::Storage& b) {
  return a.is_alias_of(b) || (a.data() != nullptr && a.data() == b.data());
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const at::Tensor& flagos_side = is_flagos(dst) ? dst : self;
  c10::DeviceGuard guard(flagos_side.device());
  ComputeStreamGuard on_flagos_stream(flagos_side.device().index());
  at::Tensor out = is_flagos(dst) ? as_compute(dst) : dst;
  at::Tensor src = self;
  if (is_flagos(self)) {
    src = is_flagos(dst) && same_memory(self.storage(), dst.storage())
              ? tensor_over(out.storage(), compute_keys(), self)
              : as_compute(self);
  }
  out.copy_(src, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (is_flagos(dst)) resize_(dst, self.sizes(), std::nullopt);
  else dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

// The memory stays reserved until the work queued on `stream` is done.
void record_stream_op(at::Tensor& self, c10::Stream stream) {
  record_stream(self.storage().data_ptr(), stream);
}

// Convolution: for a device outside CPU/CUDA/MKLDNN, aten::_convolution
// routes to the *_overrideable ops, whose default kernels only raise. Here they
// run the compute device's own convolution on views of the same memory.
//
// Strides: fake tensors (what inductor plans with) predict a convolution's
// output layout with _determine_backend_memory_format(input, weight,
// backend), and for a flagos tensor the backend is Overrideable. The compute
// device may choose otherwise (the CPU keeps channels_last), which is the
// known convolution stride-mismatch bug; so results are laid out in the format
// that same function names for Overrideable.
at::Tensor adopt_result(const at::Tensor& r, c10::DeviceIndex index) {
  if (!r.defined()) return r;
  return tensor_over(adopted_storage(r.storage(), index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), r);
}

// The layout the fake convolution predicts (torch_fl.compile._inductor_adapter,
// conv_layout_of_compute_device): cuDNN's suggestion on the cuda accelerator,
// so a channels-last convolution stays channels-last without a copy.
at::MemoryFormat predicted_conv_format(const at::Tensor& input, const at::Tensor& weight) {
  const auto backend = compute_device_type() == c10::kCUDA ? at::native::ConvBackend::Cudnn
                                                           : at::native::ConvBackend::Overrideable;
  at::MemoryFormat format = at::native::_determine_backend_memory_format(input, weight, backend);
  bool fits = (format == at::MemoryFormat::ChannelsLast && input.dim() == 4) ||
              (format == at::MemoryFormat::ChannelsLast3d && input.dim() == 5);
  return fits ? format : at::MemoryFormat::Contiguous;
}

at::Tensor in_format(const at::Tensor& t, at::MemoryFormat format) {
  return t.defined() && !t.is_contiguous(format) ? t.contiguous(format) : t;
}

std::optional<at::Tensor> as_compute_opt(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? std::optional<at::Tensor>(as_compute(*t)) : std::nullopt;
}

void check_same_device(const char* op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), "flagos: ", op, " got tensors on ", a.device(), " and ", b.device(),
              "; all tensors of one op must be on the same device. Move them with .to() first.");
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  check_same_device("aten::convolution", input, weight);
  if (bias && bias->defined()) check_same_device("aten::convolution", input, *bias);
  c10::DeviceGuard guard(input.device());
  ComputeStreamGuard on_flagos_stream(input.device().index());
  at::Tensor out = at::convolution(as_compute(input), as_compute(weight), as_compute_opt(bias), stride, padding,
                                   dilation, transposed, output_padding, groups);
  return adopt_result(in_format(out, predicted_conv_format(input, weight)), input.device().index());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  check_same_device("aten::convolution_backward", grad_output, input);
  check_same_device("aten::convolution_backward", input, weight);
  c10::DeviceGuard guard(input.device());
  ComputeStreamGuard on_flagos_stream(input.device().index());
  std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(as_compute(grad_output), as_compute(input), as_compute(weight),
                                               bias_sizes, stride, padding, dilation, transposed, output_padding,
                                               groups, output_mask);
  c10::DeviceIndex index = input.device().index();
  at::MemoryFormat format = predicted_conv_format(input, weight);
  return {adopt_result(in_format(gi, format), index), adopt_result(in_format(gw, format), index),
          adopt_result(gb, index)};
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

// ---------------------------------------------------------------- fallback

bool is_generator_arg(const c10::Argument& arg) {
  const c10::TypePtr& type = arg.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  return type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

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
      if (is_flagos(v.toTensor())) aliases.note_device(v.toTensor().device().index());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList())
        if (is_flagos(t)) aliases.note_device(t.device().index());
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
        if (t && is_flagos(*t)) aliases.note_device(t->device().index());
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

}  // namespace

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
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("record_stream", record_stream_op);
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("native_dropout", native_dropout);
  m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
}

// Ops whose CompositeExplicitAutogradNonFunctional kernel (empty output + the
// out= variant) misbehaves for a backend outside CPU/CUDA: mse_loss's out=
// meta treats the 0-dim reduced output as elementwise and warns "An output
// with one or more elements was resized". Send them straight to the compute
// device's functional kernel instead.
// Batch norm: the compute device's kernel computes, then the results take the
// shapes and strides that fake tensors (torch/_decomp's native_batch_norm and
// its backward for a non-CPU device) predict: the output and grad_input laid
// out like the input (a transposed input stays transposed; the CPU kernels
// return them contiguous), and C-element save_mean/save_invstd in eval mode
// (the CPU kernel returns 0 elements).
void lay_out_like(torch::jit::Stack* stack, size_t index, const at::Tensor& input) {
  const at::Tensor result = (*stack)[index].toTensor();
  if (!result.defined() || result.strides() == input.strides() || !input.is_non_overlapping_and_dense()) return;
  at::Tensor like = at::empty_like(input);
  like.copy_(result);
  (*stack)[index] = like;
}

void native_batch_norm_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t first = stack->size() - op.schema().arguments().size();
  const at::Tensor input = (*stack)[first].toTensor();
  const bool training = (*stack)[first + 5].toBool();
  flagos_fallback(op, stack);
  const size_t results = stack->size() - 3;
  lay_out_like(stack, results, input);
  const int64_t channels = input.dim() > 1 ? input.size(1) : 1;
  for (size_t i = results + 1; i < stack->size(); ++i) {
    at::Tensor saved = (*stack)[i].toTensor();
    if (!training && saved.numel() == 0 && channels > 0) (*stack)[i] = at::empty({channels}, saved.options());
  }
}

void native_batch_norm_backward_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t first = stack->size() - op.schema().arguments().size();
  const at::Tensor input = (*stack)[first + 1].toTensor();
  flagos_fallback(op, stack);
  lay_out_like(stack, stack->size() - 3, input);
}

// native_group_norm(_backward) have a CompositeExplicitAutograd math kernel
// that a backend without its own kernel gets; it views its input as
// contiguous and fails on channels_last, where the compute device's kernel
// works. CUDA's kernels further require contiguous (NCHW) tensors: aten's
// group_norm makes its input so for every device but the CPU, a direct call
// need not; and the fake kernel (torch/_refs native_group_norm) predicts a
// contiguous output for such devices, which a contiguous input gives.
void make_contiguous(torch::jit::Stack* stack, size_t index) {
  const at::Tensor t = (*stack)[index].toTensor();
  if (t.defined() && !t.is_contiguous()) (*stack)[index] = t.contiguous();
}

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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mse_loss", torch::CppFunction::makeFromBoxedFunction<&flagos_fallback>());
  m.impl("native_group_norm", torch::CppFunction::makeFromBoxedFunction<&native_group_norm_boxed>());
  m.impl("native_group_norm_backward", torch::CppFunction::makeFromBoxedFunction<&native_group_norm_backward_boxed>());
  m.impl("native_batch_norm", torch::CppFunction::makeFromBoxedFunction<&native_batch_norm_boxed>());
  m.impl("native_batch_norm_backward",
         torch::CppFunction::makeFromBoxedFunction<&native_batch_norm_backward_boxed>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&flagos_fallback>());
}

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
