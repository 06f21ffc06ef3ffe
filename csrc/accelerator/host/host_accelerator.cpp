// The host accelerator: flagos devices whose memory is host RAM and whose
// executor is the calling CPU thread. It runs on any machine (CI, laptops), so
// every layer above it can be tested without a GPU.
//
// Execution model: work is executed synchronously at submission, in submission
// order. That is a legal schedule for every stream program (like a GPU with
// blocking launches): work on one stream is ordered, a wait on an event is
// satisfied because the recorded work already finished, and an event records
// the time at which all work before it on its stream was done. query() is
// therefore truthfully always "ready".
//
// Deliberately free of torch headers: it is the template a vendor copies.

#include "flagos/accelerator.h"
#include "flagos/byte_size.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kAlignment = 64;  // cache line; also what vector kernels like
constexpr int32_t kMaxDevices = 64;

struct Stream {
  int32_t device;
};

struct Event {
  int32_t device;
  bool timing;
  bool recorded = false;
  std::chrono::steady_clock::time_point when;
};

struct DeviceMemory {
  std::mutex mu;
  std::unordered_map<void*, size_t> sizes;
  uint64_t used = 0;
};

uint64_t physical_memory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : (8ull << 30);
}

uint64_t read_cache_size(int index, uint64_t fallback) {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
  std::string text;
  if (!(in >> text)) return fallback;
  bool ok = false;
  uint64_t v = flagos::parse_byte_size(text.c_str(), &ok);
  return ok && v > 0 ? v : fallback;
}

struct HostState {
  int32_t count = 2;
  uint64_t limit = 0;  // 0: unlimited (bounded by physical memory)
  // A malformed variable, named with its value: the host then offers no
  // devices, and device_count's error string says why.
  std::string config_error;
  std::vector<DeviceMemory> memory;

  HostState() {
    if (const char* env = std::getenv("FLAGOS_HOST_DEVICE_COUNT")) {
      char* end = nullptr;
      long n = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && n >= 1 && n <= kMaxDevices) {
        count = static_cast<int32_t>(n);
      } else {
        count = 0;
        config_error = std::string("FLAGOS_HOST_DEVICE_COUNT='") + env +
                       "' is not a device count: use a whole number " + "from 1 to " + std::to_string(kMaxDevices);
      }
    }
    if (const char* env = std::getenv("FLAGOS_HOST_MEMORY_LIMIT")) {
      bool ok = false;
      limit = flagos::parse_byte_size(env, &ok);
      if (!ok) {
        count = 0;
        config_error = flagos::bad_byte_size_message("FLAGOS_HOST_MEMORY_LIMIT", env);
      }
    }
    memory = std::vector<DeviceMemory>(std::max<int32_t>(count, 0));
  }
  uint64_t capacity() const { return limit ? limit : physical_memory(); }
};

HostState& state() {
  static HostState s;
  return s;
}

thread_local int32_t current_device = 0;

bool valid(int32_t device) { return device >= 0 && device < state().count; }

flagos_status host_device_count(int32_t* count) {
  if (count == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  if (state().count <= 0) {
    *count = 0;
    return FLAGOS_ERROR_INVALID_VALUE;
  }
  *count = state().count;
  return FLAGOS_SUCCESS;
}

flagos_status host_get_device(int32_t* device) {
  if (device == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  *device = current_device;
  return FLAGOS_SUCCESS;
}

flagos_status host_set_device(int32_t device) {
  if (!valid(device)) return FLAGOS_ERROR_INVALID_DEVICE;
  current_device = device;
  return FLAGOS_SUCCESS;
}

flagos_status host_device_synchronize(int32_t device) {
  return valid(device) ? FLAGOS_SUCCESS : FLAGOS_ERROR_INVALID_DEVICE;
}

flagos_status host_get_device_properties(int32_t device, flagos_device_properties* p) {
  if (!valid(device)) return FLAGOS_ERROR_INVALID_DEVICE;
  if (p == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "flagos host (CPU executor)");
  p->total_memory = state().capacity();
  // The executor runs one Triton program at a time per core.
  p->multi_processor_count = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  // Triton programs run as whole-block vector operations; 32 lanes keeps
  // inductor's num_warps arithmetic meaningful.
  p->warp_size = 32;
  p->max_threads_per_block = 1024;
  p->max_threads_per_multi_processor = 2048;
  p->regs_per_multiprocessor = 65536;
  p->shared_memory_per_block = read_cache_size(1, 48u << 10);  // L1d stands in for shared memory
  p->l2_cache_size = read_cache_size(2, 1u << 20);
  p->major = 1;
  p->minor = 0;
  return FLAGOS_SUCCESS;
}

flagos_status host_mem_get_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  if (!valid(device)) return FLAGOS_ERROR_INVALID_DEVICE;
  DeviceMemory& m = state().memory[device];
  std::lock_guard<std::mutex> lock(m.mu);
  uint64_t total = state().capacity();
  if (total_bytes) *total_bytes = total;
  if (free_bytes) *free_bytes = total > m.used ? total - m.used : 0;
  return FLAGOS_SUCCESS;
}

flagos_status host_malloc(int32_t device, void** ptr, size_t size) {
  if (!valid(device)) return FLAGOS_ERROR_INVALID_DEVICE;
  if (ptr == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  *ptr = nullptr;
  if (size == 0) return FLAGOS_SUCCESS;
  DeviceMemory& m = state().memory[device];
  std::lock_guard<std::mutex> lock(m.mu);
  if (state().limit && m.used + size > state().limit) return FLAGOS_ERROR_OUT_OF_MEMORY;
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, size) != 0 || p == nullptr) return FLAGOS_ERROR_OUT_OF_MEMORY;
  m.sizes.emplace(p, size);
  m.used += size;
  *ptr = p;
  return FLAGOS_SUCCESS;
}

flagos_status host_free(int32_t device, void* ptr) {
  if (!valid(device)) return FLAGOS_ERROR_INVALID_DEVICE;
  if (ptr == nullptr) return FLAGOS_SUCCESS;
  DeviceMemory& m = state().memory[device];
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.sizes.find(ptr);
  if (it == m.sizes.end()) return FLAGOS_ERROR_INVALID_VALUE;  // not ours, or freed twice
  m.used -= it->second;
  m.sizes.erase(it);
  std::free(ptr);
  return FLAGOS_SUCCESS;
}

flagos_status host_memcpy_async(void* dst, const void* src, size_t size, flagos_memcpy_kind kind, flagos_stream) {
  if (kind < FLAGOS_MEMCPY_HOST_TO_DEVICE || kind > FLAGOS_MEMCPY_DEVICE_TO_DEVICE) return FLAGOS_ERROR_INVALID_VALUE;
  if (size == 0) return FLAGOS_SUCCESS;
  if (dst == nullptr || src == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  std::memmove(dst, src, size);
  return FLAGOS_SUCCESS;
}

flagos_status host_memset_async(void* dst, int value, size_t size, flagos_stream) {
  if (size == 0) return FLAGOS_SUCCESS;
  if (dst == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  std::memset(dst, value, size);
  return FLAGOS_SUCCESS;
}

flagos_status host_stream_create(int32_t device, int32_t, flagos_stream* stream) {
  if (!valid(device)) return FLAGOS_ERROR_INVALID_DEVICE;
  if (stream == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  *stream = reinterpret_cast<flagos_stream>(new Stream{device});
  return FLAGOS_SUCCESS;
}

flagos_status host_stream_destroy(flagos_stream stream) {
  delete reinterpret_cast<Stream*>(stream);
  return FLAGOS_SUCCESS;
}

// Work completes at submission, so a stream is never behind.
flagos_status host_stream_query(flagos_stream) { return FLAGOS_SUCCESS; }
flagos_status host_stream_synchronize(flagos_stream) { return FLAGOS_SUCCESS; }

flagos_status host_stream_wait_event(flagos_stream, flagos_event event) {
  return event == nullptr ? FLAGOS_ERROR_INVALID_VALUE : FLAGOS_SUCCESS;
}

flagos_status host_event_create(int32_t device, uint32_t flags, flagos_event* event) {
  if (!valid(device)) return FLAGOS_ERROR_INVALID_DEVICE;
  if (event == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  *event = reinterpret_cast<flagos_event>(new Event{device, (flags & FLAGOS_EVENT_DISABLE_TIMING) == 0});
  return FLAGOS_SUCCESS;
}

flagos_status host_event_destroy(flagos_event event) {
  delete reinterpret_cast<Event*>(event);
  return FLAGOS_SUCCESS;
}

flagos_status host_event_record(flagos_event event, flagos_stream stream) {
  auto* e = reinterpret_cast<Event*>(event);
  if (e == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  if (stream != nullptr && reinterpret_cast<Stream*>(stream)->device != e->device) return FLAGOS_ERROR_INVALID_DEVICE;
  e->when = std::chrono::steady_clock::now();
  e->recorded = true;
  return FLAGOS_SUCCESS;
}

flagos_status host_event_query(flagos_event event) {
  return event == nullptr ? FLAGOS_ERROR_INVALID_VALUE : FLAGOS_SUCCESS;
}

flagos_status host_event_synchronize(flagos_event event) {
  return event == nullptr ? FLAGOS_ERROR_INVALID_VALUE : FLAGOS_SUCCESS;
}

flagos_status host_event_elapsed_time(float* ms, flagos_event start, flagos_event end) {
  auto* s = reinterpret_cast<Event*>(start);
  auto* e = reinterpret_cast<Event*>(end);
  if (ms == nullptr || s == nullptr || e == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  if (!s->timing || !e->timing) return FLAGOS_ERROR_NOT_SUPPORTED;
  if (!s->recorded || !e->recorded) return FLAGOS_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(e->when - s->when).count();
  return FLAGOS_SUCCESS;
}

// Pinned host memory. The host executor copies synchronously (memcpy), so
// page-locking would buy nothing and count against RLIMIT_MEMLOCK: pinned
// memory is an aligned host allocation of its own, which the runtime knows as
// pinned. The handle is the pointer.
flagos_status host_pinned_alloc(size_t size, void** ptr, void** handle) {
  if (ptr == nullptr || handle == nullptr) return FLAGOS_ERROR_INVALID_VALUE;
  *ptr = *handle = nullptr;
  if (size == 0) return FLAGOS_SUCCESS;
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, size) != 0 || p == nullptr) return FLAGOS_ERROR_OUT_OF_MEMORY;
  *ptr = *handle = p;
  return FLAGOS_SUCCESS;
}

flagos_status host_pinned_free(void* handle) {
  std::free(handle);
  return FLAGOS_SUCCESS;
}

const char* host_error_string(flagos_status status) {
  switch (status) {
    case FLAGOS_SUCCESS: return "success";
    case FLAGOS_ERROR_INVALID_VALUE:
      return state().config_error.empty() ? "invalid value" : state().config_error.c_str();
    case FLAGOS_ERROR_INVALID_DEVICE: return "invalid device";
    case FLAGOS_ERROR_OUT_OF_MEMORY: return "out of memory";
    case FLAGOS_ERROR_NOT_READY: return "not ready";
    case FLAGOS_ERROR_NOT_SUPPORTED: return "not supported";
    default: return "unknown error";
  }
}

const flagos_accelerator kHostAccelerator = {
    FLAGOS_ABI_VERSION,
    sizeof(flagos_accelerator),
    "host",
    "cpu",
    host_error_string,
    host_device_count,
    host_get_device,
    host_set_device,
    host_device_synchronize,
    host_get_device_properties,
    host_mem_get_info,
    host_malloc,
    host_free,
    host_memcpy_async,
    host_memset_async,
    host_stream_create,
    host_stream_destroy,
    host_stream_query,
    host_stream_synchronize,
    host_stream_wait_event,
    host_event_create,
    host_event_destroy,
    host_event_record,
    host_event_query,
    host_event_synchronize,
    host_event_elapsed_time,
    nullptr,  // compute_stream_id: the CPU runs kernels on the calling thread
    host_pinned_alloc,
    host_pinned_free,
};

}  // namespace

extern "C" const flagos_accelerator* flagos_host_accelerator(void) { return &kHostAccelerator; }
