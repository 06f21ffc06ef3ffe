// Compute-device views of flagos tensors for one op call: what the boxed
// fallback (fallback.cpp), the unboxed kernels of the hottest ops
// (direct_kernels.cpp), the copies (memory_ops.cpp) and the rnn cells share.
// A flagos tensor is viewed as a tensor of the accelerator's compute device
// (CPU for host, CUDA for cuda) over the same memory; the kernel's results are
// mapped back:
//   - an argument returned as-is (in-place, out=)   -> the original flagos tensor
//   - a view into an argument's memory               -> a flagos view of that storage
//   - memory the kernel allocated                    -> adopted as flagos memory (no copy)
// Adopted memory keeps its compute-device side (the owning storage and the
// kernel's output tensor): an unboxed kernel reading it later passes those
// instead of building a view (Aliases::reuse_kept_views). Views of other
// memory that unboxed kernels get (weights, compiled code's buffers, out=
// and in-place arguments) are kept per thread (thread_view()).
// Header-only: each piece is small, and a translation unit of its own would
// cost a compile of the torch headers for a page of code.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>

#include "../runtime/runtime.h"

namespace flagos {

// The compute device's backend key (CPU, CUDA); it does not depend on the index.
inline c10::DispatchKey compute_key() {
  static const c10::DispatchKey key = c10::computeDispatchKey(std::nullopt, c10::kStrided, compute_device(0));
  return key;
}

inline bool is_flagos(const at::Tensor& t) { return t.defined() && t.device().type() == kDeviceType; }

// The compute device's backend key set (CPU or CUDA; the same for every index).
inline c10::DispatchKeySet compute_keys() {
  static const c10::DispatchKeySet keys(compute_key());
  return keys;
}

// A tensor of `keys` over `storage`, with the geometry and bits of `like`.
inline at::Tensor tensor_over(c10::Storage storage, c10::DispatchKeySet keys, const at::Tensor& like) {
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
inline c10::Storage alias_storage(const c10::Storage& storage, c10::DeviceIndex index) {
  static c10::Allocator* const compute_allocator = c10::GetAllocator(compute_device_type());
  return c10::Storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                      c10::DataPtr(storage.unsafeGetStorageImpl()->data_ptr().get(), compute_device(index)),
                      compute_allocator, /*resizable=*/true);
}

// `kernel_output`, the compute-device tensor over `compute_storage`, is kept
// with the memory for its next use as an argument.
inline c10::Storage adopted_storage(const c10::Storage& compute_storage, c10::DeviceIndex index,
                                    const at::Tensor& kernel_output = {}) {
  return c10::Storage(c10::Storage::use_byte_size_t(), compute_storage.nbytes(),
                      adopt(compute_storage, index, kernel_output.getIntrusivePtr()), allocator(),
                      /*resizable=*/true);
}

// Whether `kept`, a compute-device tensor kept for a flagos memory, can stand
// for flagos tensor `t` there: over `storage` (the compute-device storage `t`
// is viewed through), with `t`'s geometry.
inline bool fits(const c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>& kept, const c10::Storage& storage,
                 const at::Tensor& t) {
  return kept && kept->storage().unsafeGetStorageImpl() == storage.unsafeGetStorageImpl() &&
         kept->dtype() == t.dtype() && kept->storage_offset() == t.storage_offset() && kept->sizes() == t.sizes() &&
         kept->strides() == t.strides() && !kept->is_conj() && !kept->is_neg() && !t.is_conj() && !t.is_neg();
}

// Views that unboxed kernels get, kept per thread and keyed by address: a
// view's storage holds only the address, the size and the compute device, so
// an entry left behind by freed memory is the right storage for memory later
// handed out at the same address with the same size, and wrong for no other
// (checked on use). `view` is the last tensor made over it, reused for an
// argument of the same geometry (checked on use too: a kernel may restride a
// written argument). The storage owns nothing, but a kernel that grows a
// written argument puts new memory into it: write_back adopts that memory
// and drops the entry (forget_thread_view), which would otherwise keep the
// memory alive after the flagos tensor that owns it is gone.
struct ThreadView {
  c10::Storage storage;
  c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> view;
};

// How many arguments of this thread took a kept view instead of a new one:
// the one kept with an op's output, or this thread's view of the address.
// Tests read them (torch_fl._C._compute_view_reuses): a reuse that stopped
// happening costs host time per op and changes no result.
struct ViewReuses {
  int64_t kept_with_output = 0;
  int64_t thread_view = 0;
};

inline ViewReuses& view_reuses() {
  thread_local ViewReuses counts;
  return counts;
}

inline ska::flat_hash_map<const void*, ThreadView>& thread_views() {
  thread_local ska::flat_hash_map<const void*, ThreadView> views;
  return views;
}

inline ThreadView& thread_view(const c10::Storage& storage, c10::DeviceIndex index) {
  // Bounded: a process that keeps allocating new memory must not grow it
  // forever; a working set (a model's weights and buffers) fits.
  constexpr size_t kMaxEntries = 4096;
  auto& views = thread_views();
  const void* address = storage.data();
  auto found = views.find(address);
  if (found != views.end()) {
    const c10::Storage& kept = found->second.storage;
    if (kept.data() == address && kept.nbytes() == storage.nbytes() && kept.device() == compute_device(index))
      return found->second;
    views.erase(found);
  }
  if (views.size() >= kMaxEntries) views.clear();
  return views.emplace(address, ThreadView{alias_storage(storage, index), {}}).first->second;
}

// Drops the entry for `address` if `storage` is its storage (a kernel grew
// it into new memory).
inline void forget_thread_view(const void* address, const c10::StorageImpl* storage) {
  auto& views = thread_views();
  auto found = views.find(address);
  if (found != views.end() && found->second.storage.unsafeGetStorageImpl() == storage) views.erase(found);
}

// The compute-device view of one flagos tensor (used by copies).
inline at::Tensor as_compute(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "flagos: only strided tensors are supported, got ", t.layout());
  c10::DeviceIndex index = t.device().index();
  return tensor_over(alias_storage(t.storage(), index), compute_keys(), t);
}

// Index ops accept CPU index tensors on GPUs too; elsewhere a non-scalar CPU
// tensor next to flagos tensors is a user error, as it is on CUDA.
inline bool accepts_host_tensors(std::string_view name) {
  return name == "aten::index" || name == "aten::index_put_" || name == "aten::_index_put_impl_" ||
         name == "aten::index_put";
}

// The compute-device views made for one op call, and what they stand for.
class Aliases {
 public:
  explicit Aliases(std::string_view op_name) : name_(op_name) {}

  // Lets arguments take the views kept for their memory instead of new ones:
  // a read argument on no storage passed to mark_written the view kept with
  // adopted memory, any other argument this thread's thread_view. Only for
  // kernels whose written arguments are known (the unboxed ones): adopted
  // memory's kept storage owns the memory, and a kernel that resized a
  // written argument over it would free memory a flagos tensor owns.
  void reuse_kept_views() { reuse_ = true; }
  void mark_written(const at::Tensor& t) {
    if (t.defined() && t.has_storage()) written_.push_back(t.storage().unsafeGetStorageImpl());
  }

  // Records the flagos device of one argument; all must agree.
  void note_device(c10::DeviceIndex index);
  // The same for tensor arguments; tensors of other devices are not recorded.
  void note_device_of(const at::Tensor& t) {
    if (is_flagos(t)) note_device(t.device().index());
  }
  void note_devices_of(std::initializer_list<const at::Tensor*> tensors) {
    for (const at::Tensor* t : tensors) note_device_of(*t);
  }
  // The call's flagos device (the current one when no argument named one).
  c10::DeviceIndex index();

  // The compute-device view of a flagos tensor; `written` if the kernel may
  // write it (in-place self, out=).
  at::Tensor alias(const at::Tensor& t, bool written = true);
  // What the compute kernel gets for an argument: the view of a flagos tensor;
  // another tensor as it is, once checked (0-dim CPU scalars and CPU indices).
  at::Tensor to_compute(const at::Tensor& t, bool written = true);
  // Maps one compute-device result back to flagos.
  at::Tensor to_flagos(const at::Tensor& r);
  // After the kernel: an out=/in-place argument the kernel resized or
  // restrided must show the same change on the flagos side.
  void write_back(const at::Tensor& alias);

 private:
  // Whether the kernel only reads `t`'s memory in this call: a read argument
  // on no written argument's storage, in a call that reuses views.
  bool only_read(const at::Tensor& t, bool written) const;
  // Whether the view `kept` can stand for `t` in this call.
  bool stands_for(const c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>& kept, const at::Tensor& t,
                  const c10::Storage& view) const;

  std::string_view name_;
  std::optional<c10::DeviceIndex> index_;
  bool reuse_ = false;
  c10::SmallVector<const c10::StorageImpl*, 2> written_;
  // Small inline vectors: most ops have a handful of tensors, and the
  // per-call heap traffic shows up in small-op overhead.
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 4> storages_;  // (flagos, compute)
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 4> tensors_;       // (compute view, flagos)
};

// What an unboxed kernel sets up before its compute-device op, for the
// call's device (Aliases::index, so note every argument's device first): the
// device made current only where it is not (a DeviceGuard sets the device
// back on every exit, one more device query per op: cudaGetDevice on cuda),
// its current flagos stream made the compute device's, and read arguments
// taking the views kept for their memory.
class OnFlagosDevice {
 public:
  // Inlined, and the device guard emplaced here: both measured (cachegrind,
  // relu) against the same steps written out in the kernel, and each other
  // form cost 30-50 more instructions a call.
  C10_ALWAYS_INLINE explicit OnFlagosDevice(Aliases& aliases) : index_(aliases.index()), stream_(checked(index_)) {
    if (index_ != current_device()) guard_.emplace(c10::Device(kDeviceType, index_));
    aliases.reuse_kept_views();
  }

 private:
  static c10::DeviceIndex checked(c10::DeviceIndex index) {
    check_index(index);
    return index;
  }

  c10::DeviceIndex index_;
  // Set before the device: a device's current stream does not depend on the
  // current device (cuda's streams are per device index).
  ComputeStreamGuard stream_;
  std::optional<c10::DeviceGuard> guard_;
};

inline void Aliases::note_device(c10::DeviceIndex index) {
  if (!index_) {
    index_ = index;
    return;
  }
  TORCH_CHECK(*index_ == index, "flagos: ", name_, " got tensors on flagos:", static_cast<int>(*index_),
              " and flagos:", static_cast<int>(index),
              "; all flagos tensors of one op must be on the same device. Move them with .to() first.");
}

inline c10::DeviceIndex Aliases::index() {
  if (!index_) index_ = current_device();
  return *index_;
}

inline bool Aliases::only_read(const at::Tensor& t, bool written) const {
  if (!reuse_ || written) return false;
  const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  for (const c10::StorageImpl* w : written_)
    if (w == storage) return false;
  return true;
}

// The compute-device side kept with `t`'s memory, if it is adopted memory.
inline const ComputeSide* kept_side(const at::Tensor& t) {
  const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const ComputeSide* side = compute_side(storage->data_ptr());
  // Adopted memory's storage keeps its size and pointer; checked all the same.
  if (side == nullptr || side->owner.nbytes() != storage->nbytes() || side->owner.data() != storage->data())
    return nullptr;
  return side;
}

inline bool Aliases::stands_for(const c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>& kept,
                                const at::Tensor& t, const c10::Storage& view) const {
  if (!fits(kept, view, t)) return false;
  for (auto& [a, original] : tensors_)
    if (a.unsafeGetTensorImpl() == kept.get()) return false;  // another argument of this call has it
  return true;
}

inline at::Tensor Aliases::alias(const at::Tensor& t, bool written) {
  TORCH_CHECK(t.layout() == c10::kStrided, "flagos: ", name_, " got a ", t.layout(),
              " flagos tensor; only strided tensors are supported");
  // One tensor passed twice stays one tensor: kernels test identity
  // (CUDA's multi-head attention takes its fused path only when query, key
  // and value are the same tensor).
  for (auto& [a, original] : tensors_)
    if (original.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return a;
  // Memory the kernel only reads: the view kept with adopted memory. Any
  // other argument of an unboxed kernel: this thread's kept view of the
  // address (valid until the next thread_view).
  const ComputeSide* kept = only_read(t, written) ? kept_side(t) : nullptr;
  ThreadView* read = reuse_ && kept == nullptr ? &thread_view(t.storage(), index()) : nullptr;
  c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
  c10::Storage* view = nullptr;
  for (auto& [flagos_storage, compute_storage] : storages_)
    if (flagos_storage.unsafeGetStorageImpl() == key) view = &compute_storage;
  if (view == nullptr) {
    storages_.emplace_back(t.storage(), kept   ? kept->owner
                                        : read ? read->storage
                                               : alias_storage(t.storage(), index()));
    view = &storages_.back().second;
  }
  if (kept && stands_for(kept->view, t, *view)) {
    ++view_reuses().kept_with_output;
    tensors_.emplace_back(at::Tensor(kept->view), t);
    return tensors_.back().first;
  }
  if (read && stands_for(read->view, t, *view)) {
    ++view_reuses().thread_view;
    tensors_.emplace_back(at::Tensor(read->view), t);
    return tensors_.back().first;
  }
  at::Tensor a = tensor_over(*view, compute_keys(), t);
  if (read && view->unsafeGetStorageImpl() == read->storage.unsafeGetStorageImpl())
    read->view = a.getIntrusivePtr();  // for the next use of this geometry
  tensors_.emplace_back(a, t);
  return a;
}

inline at::Tensor Aliases::to_compute(const at::Tensor& t, bool written) {
  if (is_flagos(t)) return alias(t, written);
  if (!t.defined() || (t.device().is_cpu() && (t.dim() == 0 || accepts_host_tensors(name_)))) return t;
  TORCH_CHECK(false, "flagos: ", name_, " got a tensor on ", t.device(),
              " together with flagos tensors; expected all tensors on the flagos device (0-dim CPU scalars "
              "excepted). Move it with .to('flagos') first.");
}

inline at::Tensor Aliases::to_flagos(const at::Tensor& r) {
  if (!r.defined() || r.device().type() != compute_device_type()) return r;
  for (auto& [a, original] : tensors_)
    if (a.unsafeGetTensorImpl() == r.unsafeGetTensorImpl()) return original;
  c10::StorageImpl* key = r.storage().unsafeGetStorageImpl();
  for (auto& [flagos_storage, compute_storage] : storages_)
    if (compute_storage.unsafeGetStorageImpl() == key)
      return tensor_over(flagos_storage, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), r);
  // Memory the kernel allocated: adopt it, once per storage. An unboxed
  // kernel's output (C++, no Python object attached) is kept with it.
  storages_.emplace_back(adopted_storage(r.storage(), index(), reuse_ ? r : at::Tensor()), r.storage());
  return tensor_over(storages_.back().first, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), r);
}

inline void Aliases::write_back(const at::Tensor& a) {
  for (auto& [alias, original] : tensors_) {
    if (alias.unsafeGetTensorImpl() != a.unsafeGetTensorImpl()) continue;
    auto* impl = original.unsafeGetTensorImpl();
    const void* now = alias.storage().unsafeGetStorageImpl()->data_ptr().get();
    if (now != original.storage().unsafeGetStorageImpl()->data_ptr().get()) {
      c10::StorageImpl* target = original.storage().unsafeGetStorageImpl();
      forget_thread_view(target->data_ptr().get(), alias.storage().unsafeGetStorageImpl());
      target->set_data_ptr_noswap(adopt(alias.storage(), index()));
      target->set_nbytes(alias.storage().nbytes());
    }
    if (alias.sizes() != original.sizes() || alias.strides() != original.strides() ||
        alias.storage_offset() != original.storage_offset())
      impl->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
    return;
  }
}

// The compute-device view of `t` for a kernel that only reads it and is
// given no other view of its memory (a copy's source): the views kept for
// its memory, as Aliases::alias uses them for the unboxed kernels.
inline at::Tensor read_only_view(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "flagos: only strided tensors are supported, got ", t.layout());
  if (const ComputeSide* kept = kept_side(t)) {
    if (fits(kept->view, kept->owner, t)) return at::Tensor(kept->view);
    return tensor_over(kept->owner, compute_keys(), t);
  }
  ThreadView& read = thread_view(t.storage(), t.device().index());
  if (fits(read.view, read.storage, t)) return at::Tensor(read.view);
  at::Tensor a = tensor_over(read.storage, compute_keys(), t);
  read.view = a.getIntrusivePtr();
  return a;
}

}  // namespace flagos
