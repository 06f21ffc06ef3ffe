// Native kernels for the device's own memory: allocation, resize, set_,
// copies, record_stream. Every other aten op computes on the compute device
// (fallback.cpp, direct_kernels.cpp); registration.cpp registers these.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

#include <optional>

#include "../runtime/generator.h"
#include "../runtime/runtime.h"
#include "aten.h"
#include "compute_views.h"

namespace flagos {
namespace {

// Makes sure `self`'s storage holds `bytes`, growing it if needed.
void ensure_storage_bytes(const at::Tensor& self, size_t bytes) {
  if (bytes > self.storage().nbytes()) resize_storage_bytes(self.storage(), bytes);
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
  size_t bytes = stride.empty() ? at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(), offset)
                                : at::detail::computeStorageNbytes(size, stride, self.dtype().itemsize(), offset);
  ensure_storage_bytes(self, bytes);
  return self;
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

}  // namespace

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
  return at::detail::empty_strided_generic(
      size, stride, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype));
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

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const at::Tensor& flagos_side = is_flagos(dst) ? dst : self;
  c10::DeviceGuard guard(flagos_side.device());
  ComputeStreamGuard on_flagos_stream(flagos_side.device().index());
  at::Tensor out = is_flagos(dst) ? as_compute(dst) : dst;
  at::Tensor src = self;
  if (is_flagos(self)) {
    // Only read, and on other memory than `out`: the view kept for its memory.
    src = is_flagos(dst) && same_memory(self.storage(), dst.storage())
              ? tensor_over(out.storage(), compute_keys(), self)
              : read_only_view(self);
  }
  out.copy_(src, non_blocking);
  return dst;
}

// copy_ itself, not only _copy_from: aten's composite copy_ hands a PrivateUse1 copy to
// _copy_from, which the Conjugate and Negative keys do not let through. Their fallback
// resolves a conj/neg source with clone(), whose copy_ came back to _copy_from: an endless
// recursion (`x.conj().clone()` overflowed the stack). copy_ passes those keys, and the
// compute device's copy_ resolves the bits (the compute views keep them). It also saves
// copy_impl's redispatch on every copy.
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  TORCH_CHECK(!self._is_zerotensor(),
              "ZeroTensors are immutable. Please materialize the tensor using "
              "`.clone()`, if you want a mutable zero tensor.");
  if (src._is_zerotensor()) return self.zero_();
  if (self.is_same(src)) return self;
  copy_from(src, self, non_blocking);
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (is_flagos(dst)) resize_(dst, self.sizes(), std::nullopt);
  else dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Tensor copy_of_output(const at::Tensor& t) {
  // One device-to-device memcpy where the elements are one dense block (permuted strides
  // included): a replay's outputs skip clone's dispatch and the compute device's copy_.
  if (!is_flagos(t) || t.requires_grad() || t.is_conj() || t.is_neg() || !t.is_non_overlapping_and_dense())
    return t.clone();
  at::Tensor out = empty_strided(t.sizes(), t.strides(), t.scalar_type(), std::nullopt, t.device(), std::nullopt);
  size_t bytes = static_cast<size_t>(t.numel()) * t.itemsize();
  if (bytes > 0) {
    c10::DeviceGuard guard(t.device());
    allocator()->copy_data(out.mutable_data_ptr(), t.const_data_ptr(), bytes);
  }
  return out;
}

// The memory stays reserved until the work queued on `stream` is done.
void record_stream_op(at::Tensor& self, c10::Stream stream) { record_stream(self.storage().data_ptr(), stream); }

}  // namespace flagos
