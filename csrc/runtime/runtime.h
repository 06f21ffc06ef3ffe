// c10 glue shared by the runtime's translation units. Everything here talks to
// the accelerator only through the C table in flagos/accelerator.h.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "flagos/accelerator.h"

namespace flagos {

constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;

// ---- accelerator selection (accelerator.cpp) ----
// The accelerator chosen at start-up by FLAGOS_ACCELERATOR (default: the best
// one present). Throws with the list of known accelerators on a bad name.
const flagos_accelerator& accelerator();
// Names compiled into this build, in order of preference.
std::string available_accelerators();
// Throws a c10::Error naming `what` and the accelerator's message unless ok.
void check(flagos_status status, const char* what);
c10::DeviceIndex device_count();
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);
// Makes `index` current (only if it is not already); returns the previous current device.
c10::DeviceIndex exchange_device(c10::DeviceIndex index);
// Throws "flagos:N is out of range" with the device count. An int64_t, so that
// an index from Python beyond c10::DeviceIndex's range is reported as given.
// Inline: every op checks its device, some twice, and the message's set-up
// cost an out-of-line call 20-30 instructions each time (cachegrind).
[[noreturn]] void raise_index_out_of_range(int64_t index);
inline void check_index(int64_t index) {
  if (C10_LIKELY(index >= 0 && index < device_count())) return;
  raise_index_out_of_range(index);
}
// How check_index reports an index out of range. The Python module installs
// one that raises torch_fl's DeviceIndexError (an IndexError that is also the
// RuntimeError cuda code catches); without one: c10::IndexError. It must throw.
using IndexErrorRaiser = void (*)(const std::string& message);
void set_index_error_raiser(IndexErrorRaiser raiser);
flagos_device_properties device_properties(c10::DeviceIndex index);
// torch device type the eager fallback computes on ("cpu" for host).
c10::DeviceType compute_device_type();
// The compute device that flagos:index computes on (the CPU has no index).
inline c10::Device compute_device(c10::DeviceIndex index) {
  c10::DeviceType type = compute_device_type();
  return type == c10::kCPU ? c10::Device(c10::kCPU) : c10::Device(type, index);
}
// torch initializes a GPU device type lazily, on its own first use (for cuda:
// the caching allocator, generators); flagos work may come first. Once per process.
void init_compute_device();

// ---- streams (streams.cpp) ----
// StreamId 0 is the device's default stream, a real accelerator stream.
flagos_stream native_stream(const c10::Stream& stream);
c10::Stream current_stream(c10::DeviceIndex index);
// The accelerator's handle of a device's current stream (what work is submitted to).
flagos_stream current_native_stream(c10::DeviceIndex index);
c10::Stream exchange_stream(const c10::Stream& stream);
c10::Stream new_stream(c10::DeviceIndex index, int priority);
c10::Stream pool_stream(c10::DeviceIndex index);
// The flagos stream whose handle is `handle` (an accelerator stream made
// outside flagos, e.g. the CUDA stream a CUDA graph is captured on); known
// from then on, never destroyed by flagos.
c10::Stream stream_of_native(c10::DeviceIndex index, flagos_stream handle);
// The compute device's stream that a flagos stream is (accelerators whose
// compute device has streams, e.g. cuda); nullopt where it has none (cpu).
std::optional<c10::Stream> compute_stream(const c10::Stream& stream);

// Makes the current flagos stream of a device the compute device's current
// stream while the guard lives, so compute-device kernels (the eager
// fallback, copies) run in order with the rest of the flagos work. A no-op on
// a compute device without streams.
class ComputeStreamGuard {
 public:
  explicit ComputeStreamGuard(c10::DeviceIndex index);
  ~ComputeStreamGuard();
  ComputeStreamGuard(const ComputeStreamGuard&) = delete;
  ComputeStreamGuard& operator=(const ComputeStreamGuard&) = delete;

 private:
  const c10::impl::DeviceGuardImplInterface* impl_ = nullptr;
  std::optional<c10::Stream> previous_;
};

// ---- allocator (allocator.cpp) ----
struct DeviceStats {
  int64_t allocated = 0, allocated_peak = 0;  // bytes in live tensors
  int64_t reserved = 0, reserved_peak = 0;    // bytes held from the accelerator (+ adopted)
  int64_t adopted = 0;                        // bytes of compute-device outputs taken over
  int64_t active_blocks = 0, cached_blocks = 0;
  int64_t num_allocs = 0, num_frees = 0, num_ooms = 0, num_alloc_retries = 0, num_device_mallocs = 0;
};
c10::Allocator* allocator();
DeviceStats memory_stats(c10::DeviceIndex index);
void reset_peak_stats(c10::DeviceIndex index);
void reset_accumulated_stats(c10::DeviceIndex index);
void empty_cache();
// (free, total) bytes of the device, as the accelerator reports them.
std::pair<uint64_t, uint64_t> memory_info(c10::DeviceIndex index);
// Makes memory that a compute-device kernel allocated (kept alive by `owner`)
// a flagos allocation on `index`, counted in the stats and checked against the
// device's capacity. No copy. `view`, if given, is the kernel's output over
// `owner`, kept for the memory's next use as a kernel argument.
c10::DataPtr adopt(c10::Storage owner, c10::DeviceIndex index,
                   c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> view = {});
// The compute-device side of adopted memory, fixed at adoption: the storage
// that owns it and the kernel output adopted with it (if any). An eager op
// reading the memory can pass these to its kernel instead of building a view.
struct ComputeSide {
  c10::Storage owner;
  c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> view;
};
// nullptr unless `data` is adopted memory.
const ComputeSide* compute_side(const c10::DataPtr& data);
// Device owning a pointer handed out (or adopted) by the allocator, if any.
bool device_of(const void* ptr, c10::DeviceIndex* index);
// Marks memory as used by work on `stream` (Tensor.record_stream): it is not
// reused until that work is done.
void record_stream(const c10::DataPtr& data, const c10::Stream& stream);
// While on (per thread), allocations come from the compute device's allocator
// on its current stream and are adopted, instead of from flagos's own pool:
// what a CUDA graph capture needs, whose memory must come from the graph's
// private pool of torch's CUDA caching allocator. Returns the previous value.
bool set_allocate_from_compute_device(bool on);

// ---- pinned host memory (pinned.cpp) ----
// The accelerator's pinned host memory as a CPU allocator (pin_memory()).
c10::Allocator* pinned_allocator();
// Whether `ptr` points into pinned memory that pinned_allocator() handed out.
bool is_pinned(const void* ptr);

}  // namespace flagos
