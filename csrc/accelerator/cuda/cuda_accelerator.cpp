// The cuda accelerator: flagos devices that are NVIDIA GPUs, driven through
// the CUDA runtime. flagos:N is CUDA device N; its memory is device memory,
// its streams are CUDA streams (a flagos_stream *is* the cudaStream_t, so the
// raw stream compiled code receives launches Triton kernels on it) and its
// events are CUDA events. The compute device is "cuda": the eager fallback
// runs torch's CUDA kernels on the same memory.
//
// FLAGOS_CUDA_MEMORY_LIMIT (e.g. 512M, 2G) caps what flagos may allocate per
// device (the reported total memory shrinks to it), so out-of-memory can be
// provoked safely, as FLAGOS_HOST_MEMORY_LIMIT does on the host.
//
// Built only where torch is a CUDA build and a CUDA toolkit is present
// (setup.py defines FLAGOS_WITH_CUDA). A NULL stream means the calling
// thread's per-thread default stream, never the legacy default stream, which
// would serialize against every other stream.

#include "flagos/accelerator.h"
#include "flagos/byte_size.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {

// The last CUDA error of this thread, for error_string().
thread_local std::string last_error;

flagos_status status_of(cudaError_t err) {
  if (err == cudaSuccess) return FLAGOS_SUCCESS;
  if (err == cudaErrorNotReady) return FLAGOS_ERROR_NOT_READY;  // not an error: work pending
  last_error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  cudaGetLastError();  // clear the sticky-free error so the next call starts clean
  switch (err) {
    case cudaErrorMemoryAllocation: return FLAGOS_ERROR_OUT_OF_MEMORY;
    case cudaErrorInvalidDevice: return FLAGOS_ERROR_INVALID_DEVICE;
    case cudaErrorInvalidValue: return FLAGOS_ERROR_INVALID_VALUE;
    case cudaErrorNotSupported: return FLAGOS_ERROR_NOT_SUPPORTED;
    default: return FLAGOS_ERROR_UNKNOWN;
  }
}

// Runs `body` with `device` current, restoring the caller's device after.
template <typename Body>
flagos_status on_device(int32_t device, Body body) {
  int previous = 0;
  cudaError_t err = cudaGetDevice(&previous);
  if (err != cudaSuccess) return status_of(err);
  if (previous != device && (err = cudaSetDevice(device)) != cudaSuccess) return status_of(err);
  cudaError_t result = body();
  if (previous != device) cudaSetDevice(previous);
  return status_of(result);
}

// Bytes flagos holds per device, kept only under FLAGOS_CUDA_MEMORY_LIMIT.
struct Budget {
  uint64_t limit = 0;  // 0: none; UINT64_MAX: the variable is malformed
  std::mutex mu;
  std::unordered_map<void*, size_t> sizes;
  std::unordered_map<int32_t, uint64_t> used;

  std::string malformed;  // the message for a malformed variable, with its value

  Budget() {
    if (const char* env = std::getenv("FLAGOS_CUDA_MEMORY_LIMIT")) {
      bool ok = false;
      limit = flagos::parse_byte_size(env, &ok);
      if (!ok) {
        limit = UINT64_MAX;
        malformed = flagos::bad_byte_size_message("FLAGOS_CUDA_MEMORY_LIMIT", env);
      }
    }
  }
};

Budget& budget() {
  static Budget* b = new Budget();  // used by frees during static destruction
  return *b;
}

cudaStream_t as_cuda(flagos_stream stream) {
  return stream ? reinterpret_cast<cudaStream_t>(stream) : cudaStreamPerThread;
}
cudaEvent_t as_cuda(flagos_event event) { return reinterpret_cast<cudaEvent_t>(event); }

const char* cuda_error_string(flagos_status status) {
  if (!last_error.empty()) return last_error.c_str();
  switch (status) {
    case FLAGOS_SUCCESS: return "success";
    case FLAGOS_ERROR_NOT_READY: return "work still pending";
    case FLAGOS_ERROR_NOT_SUPPORTED: return "not supported";
    default: return "CUDA error";
  }
}

flagos_status cuda_device_count(int32_t* count) {
  if (budget().limit == UINT64_MAX) {
    *count = 0;
    last_error = budget().malformed;
    return FLAGOS_ERROR_INVALID_VALUE;
  }
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  *count = err == cudaSuccess ? n : 0;
  return status_of(err);
}

flagos_status cuda_get_device(int32_t* device) {
  int d = 0;
  cudaError_t err = cudaGetDevice(&d);
  *device = d;
  return status_of(err);
}

// Every flagos op restores the device on exit (c10's DeviceGuard); skipping
// the redundant cudaSetDevice there is what c10::cuda::SetDevice does too.
flagos_status cuda_set_device(int32_t device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return FLAGOS_SUCCESS;
  return status_of(cudaSetDevice(device));
}

flagos_status cuda_device_synchronize(int32_t device) {
  return on_device(device, [] { return cudaDeviceSynchronize(); });
}

int attribute(cudaDeviceAttr attr, int device) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attr, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return value;
}

flagos_status cuda_get_device_properties(int32_t device, flagos_device_properties* p) {
  if (p == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  std::memset(p, 0, sizeof(*p));
  cudaDeviceProp prop;
  cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return status_of(err);
  std::snprintf(p->name, sizeof(p->name), "%s", prop.name);
  p->total_memory = budget().limit ? std::min<uint64_t>(budget().limit, prop.totalGlobalMem) : prop.totalGlobalMem;
  // Attributes rather than cudaDeviceProp fields: CUDA 13 dropped some fields
  // (clockRate) from the struct; the attributes exist in every version.
  p->multi_processor_count = attribute(cudaDevAttrMultiProcessorCount, device);
  p->warp_size = attribute(cudaDevAttrWarpSize, device);
  p->max_threads_per_block = attribute(cudaDevAttrMaxThreadsPerBlock, device);
  p->max_threads_per_multi_processor = attribute(cudaDevAttrMaxThreadsPerMultiProcessor, device);
  p->regs_per_multiprocessor = attribute(cudaDevAttrMaxRegistersPerMultiprocessor, device);
  p->shared_memory_per_block = static_cast<uint64_t>(attribute(cudaDevAttrMaxSharedMemoryPerBlock, device));
  p->l2_cache_size = static_cast<uint64_t>(attribute(cudaDevAttrL2CacheSize, device));
  p->major = attribute(cudaDevAttrComputeCapabilityMajor, device);
  p->minor = attribute(cudaDevAttrComputeCapabilityMinor, device);
  p->clock_rate_khz = attribute(cudaDevAttrClockRate, device);
  return FLAGOS_SUCCESS;
}

flagos_status cuda_mem_get_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  size_t free_ = 0, total = 0;
  flagos_status status = on_device(device, [&] { return cudaMemGetInfo(&free_, &total); });
  if (budget().limit) {
    std::lock_guard<std::mutex> lock(budget().mu);
    uint64_t used = budget().used[device];
    total = std::min<uint64_t>(budget().limit, total);
    free_ = std::min<uint64_t>(free_, total > used ? total - used : 0);
  }
  if (free_bytes) *free_bytes = free_;
  if (total_bytes) *total_bytes = total;
  return status;
}

// cudaMalloc, and once more after torch's CUDA caching allocator returned
// its cached blocks: the eager fallback's outputs (adopted as flagos memory)
// and native cuda tensors come from that pool, whose free blocks the GPU
// cannot give flagos until they are released.
cudaError_t device_malloc(void** ptr, size_t size) {
  cudaError_t err = cudaMalloc(ptr, size);
  if (err != cudaErrorMemoryAllocation) return err;
  cudaGetLastError();
  c10::cuda::CUDACachingAllocator::emptyCache();
  return cudaMalloc(ptr, size);
}

flagos_status cuda_malloc(int32_t device, void** ptr, size_t size) {
  if (ptr == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  *ptr = nullptr;
  if (size == 0) return FLAGOS_SUCCESS;
  Budget& b = budget();
  if (!b.limit) return on_device(device, [&] { return device_malloc(ptr, size); });
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.used[device] + size > b.limit) return FLAGOS_ERROR_OUT_OF_MEMORY;
  flagos_status status = on_device(device, [&] { return device_malloc(ptr, size); });
  if (status == FLAGOS_SUCCESS) {
    b.sizes[*ptr] = size;
    b.used[device] += size;
  }
  return status;
}

flagos_status cuda_free(int32_t device, void* ptr) {
  if (ptr == nullptr) return FLAGOS_SUCCESS;
  Budget& b = budget();
  if (b.limit) {
    std::lock_guard<std::mutex> lock(b.mu);
    auto it = b.sizes.find(ptr);
    if (it != b.sizes.end()) {
      b.used[device] -= it->second;
      b.sizes.erase(it);
    }
  }
  return on_device(device, [&] { return cudaFree(ptr); });
}

flagos_status cuda_memcpy_async(void* dst, const void* src, size_t size, flagos_memcpy_kind kind,
                                flagos_stream stream) {
  cudaMemcpyKind k = kind == FLAGOS_MEMCPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                     : kind == FLAGOS_MEMCPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyDeviceToDevice;
  return status_of(cudaMemcpyAsync(dst, src, size, k, as_cuda(stream)));
}

flagos_status cuda_memset_async(void* dst, int value, size_t size, flagos_stream stream) {
  return status_of(cudaMemsetAsync(dst, value, size, as_cuda(stream)));
}

flagos_status cuda_stream_create(int32_t device, int32_t priority, flagos_stream* stream) {
  // c10 priorities: 0 is normal, negative is higher, as in CUDA; clamp to the device's range.
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  int p = std::min(least, std::max(greatest, static_cast<int>(priority)));
  cudaStream_t s = nullptr;
  flagos_status status = on_device(device, [&] { return cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, p); });
  *stream = reinterpret_cast<flagos_stream>(s);
  return status;
}

flagos_status cuda_stream_destroy(flagos_stream stream) {
  return stream ? status_of(cudaStreamDestroy(as_cuda(stream))) : FLAGOS_SUCCESS;
}
flagos_status cuda_stream_query(flagos_stream stream) { return status_of(cudaStreamQuery(as_cuda(stream))); }
flagos_status cuda_stream_synchronize(flagos_stream stream) {
  return status_of(cudaStreamSynchronize(as_cuda(stream)));
}
flagos_status cuda_stream_wait_event(flagos_stream stream, flagos_event event) {
  return status_of(cudaStreamWaitEvent(as_cuda(stream), as_cuda(event), 0));
}

flagos_status cuda_event_create(int32_t device, uint32_t flags, flagos_event* event) {
  unsigned cuda_flags = (flags & FLAGOS_EVENT_DISABLE_TIMING) ? cudaEventDisableTiming : cudaEventDefault;
  cudaEvent_t e = nullptr;
  flagos_status status = on_device(device, [&] { return cudaEventCreateWithFlags(&e, cuda_flags); });
  *event = reinterpret_cast<flagos_event>(e);
  return status;
}

flagos_status cuda_event_destroy(flagos_event event) {
  return event ? status_of(cudaEventDestroy(as_cuda(event))) : FLAGOS_SUCCESS;
}
flagos_status cuda_event_record(flagos_event event, flagos_stream stream) {
  return status_of(cudaEventRecord(as_cuda(event), as_cuda(stream)));
}
flagos_status cuda_event_query(flagos_event event) { return status_of(cudaEventQuery(as_cuda(event))); }
flagos_status cuda_event_synchronize(flagos_event event) { return status_of(cudaEventSynchronize(as_cuda(event))); }

flagos_status cuda_event_elapsed_time(float* milliseconds, flagos_event start, flagos_event end) {
  cudaError_t err = cudaEventElapsedTime(milliseconds, as_cuda(start), as_cuda(end));
  // Events created without timing report an invalid handle here.
  if (err == cudaErrorInvalidResourceHandle) {
    cudaGetLastError();
    return FLAGOS_ERROR_NOT_SUPPORTED;
  }
  return status_of(err);
}

flagos_status cuda_compute_stream_id(int32_t device, flagos_stream stream, int64_t* stream_id) {
  // c10 knows foreign CUDA streams as "external" streams; their id encodes the handle.
  *stream_id = c10::cuda::getStreamFromExternal(as_cuda(stream), static_cast<c10::DeviceIndex>(device)).id();
  return FLAGOS_SUCCESS;
}

// Pinned memory comes from torch's CUDA caching host allocator (cudaHostAlloc
// blocks, cached): CUDA's copy kernel records an event on the block a
// non_blocking copy uses (found by the memory's context, the handle, or by its
// pointer), so a block freed while a copy is in flight is not handed out again
// before the copy is done, and no free synchronizes the device.
struct PinnedBlocks {
  std::mutex mu;
  std::unordered_map<void*, at::DataPtr> by_handle;
};

PinnedBlocks& pinned_blocks() {
  static PinnedBlocks* blocks = new PinnedBlocks();  // used by frees during static destruction
  return *blocks;
}

flagos_status cuda_pinned_alloc(size_t size, void** ptr, void** handle) {
  if (ptr == nullptr || handle == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  *ptr = *handle = nullptr;
  if (size == 0) return FLAGOS_SUCCESS;
  at::DataPtr block;
  try {
    block = at::getHostAllocator(at::kCUDA)->allocate(size);
  } catch (const std::exception& e) {
    last_error = e.what();
    return FLAGOS_ERROR_OUT_OF_MEMORY;
  }
  *ptr = block.get();
  *handle = block.get_context() ? block.get_context() : block.get();
  PinnedBlocks& blocks = pinned_blocks();
  std::lock_guard<std::mutex> lock(blocks.mu);
  blocks.by_handle.emplace(*handle, std::move(block));
  return FLAGOS_SUCCESS;
}

flagos_status cuda_pinned_free(void* handle) {
  if (handle == nullptr) return FLAGOS_SUCCESS;
  at::DataPtr block;  // released (back to the cache) outside the lock
  PinnedBlocks& blocks = pinned_blocks();
  std::lock_guard<std::mutex> lock(blocks.mu);
  auto it = blocks.by_handle.find(handle);
  if (it == blocks.by_handle.end()) return FLAGOS_ERROR_INVALID_VALUE;
  block = std::move(it->second);
  blocks.by_handle.erase(it);
  return FLAGOS_SUCCESS;
}

const flagos_accelerator kCudaAccelerator = {
    FLAGOS_ABI_VERSION,
    sizeof(flagos_accelerator),
    "cuda",
    "cuda",
    cuda_error_string,
    cuda_device_count,
    cuda_get_device,
    cuda_set_device,
    cuda_device_synchronize,
    cuda_get_device_properties,
    cuda_mem_get_info,
    cuda_malloc,
    cuda_free,
    cuda_memcpy_async,
    cuda_memset_async,
    cuda_stream_create,
    cuda_stream_destroy,
    cuda_stream_query,
    cuda_stream_synchronize,
    cuda_stream_wait_event,
    cuda_event_create,
    cuda_event_destroy,
    cuda_event_record,
    cuda_event_query,
    cuda_event_synchronize,
    cuda_event_elapsed_time,
    cuda_compute_stream_id,
    cuda_pinned_alloc,
    cuda_pinned_free,
};

}  // namespace

extern "C" const flagos_accelerator* flagos_cuda_accelerator(void) { return &kCudaAccelerator; }
