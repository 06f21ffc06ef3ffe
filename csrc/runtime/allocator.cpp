// Caching allocator over the accelerator's malloc/free. Freed blocks are kept
// per device and reused for requests of a similar size, so steady-state
// training and compiled code do not call into the accelerator. Out of memory
// frees the cache, retries once, then raises torch.OutOfMemoryError.
//
// Stream-ordered, like CUDA's caching allocator: a block belongs to the
// stream current when it was allocated and is reused only for that stream, so
// a free followed by a reuse needs no synchronization (the stream orders
// them). Memory that other streams used (record_stream) is held back after
// its free until events recorded on those streams have completed.
#include "runtime.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/flat_hash_map.h>

#include <algorithm>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace flagos {
namespace {

constexpr size_t kRound = 512;              // block granularity
constexpr size_t kMaxSlackSmall = 1 << 20;  // reuse a cached block at most this much bigger

size_t round_size(size_t n) { return n == 0 ? 0 : (n + kRound - 1) / kRound * kRound; }

std::string format_bytes(int64_t n) {
  char buf[64];
  if (n >= (1ll << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ll << 30));
  else if (n >= (1ll << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ll << 20));
  else if (n >= (1ll << 10)) std::snprintf(buf, sizeof buf, "%.2f KiB", n / double(1ll << 10));
  else std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(n));
  return buf;
}

struct Block {
  c10::DeviceIndex device;
  size_t size;
  flagos_stream stream;              // where it was allocated; reused only there
  std::vector<flagos_stream> users;  // other streams that used it (record_stream)
};

// A freed block waiting for the work of its other streams.
struct Pending {
  void* ptr;
  Block block;
  std::vector<flagos_event> events;
};

// Free blocks of one device: by allocation stream, then by size.
using StreamCache = std::map<flagos_stream, std::multimap<size_t, void*>>;

// Memory taken over from a compute-device kernel's output (see adopt()).
struct Adopted {
  ComputeSide side;  // side.owner keeps the memory alive
  c10::DeviceIndex device;
  size_t size;
  void* ptr;  // as adopted (owners_'s key), whatever becomes of the owner
};

thread_local bool allocate_from_compute_device = false;

// nbytes from the compute device's allocator on `device`, on its current
// stream (a CUDA graph capture's, while one runs), as a flagos allocation.
c10::DataPtr compute_device_allocation(size_t nbytes, c10::DeviceIndex device);

// A c10::DeviceAllocator, so that torch.accelerator's memory API (memory_allocated,
// memory_stats, empty_cache, ...) reaches this pool as it reaches CUDA's.
class CachingAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex device = current_device();
    check_index(device);
    if (allocate_from_compute_device) return compute_device_allocation(nbytes, device);
    size_t size = round_size(nbytes);
    void* ptr = size ? take(device, size, nbytes, current_native_stream(device)) : nullptr;
    return {ptr, ptr, &CachingAllocator::release, c10::Device(kDeviceType, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CachingAllocator::release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    flagos_stream stream = current_native_stream(current_device());
    check(accelerator().memcpy_async(dest, src, count, FLAGOS_MEMCPY_DEVICE_TO_DEVICE, stream), "memcpy");
  }

  static const ComputeSide* side_of(const c10::DataPtr& data) {
    if (data.get_deleter() != &CachingAllocator::release_adopted) return nullptr;
    return &static_cast<const Adopted*>(data.get_context())->side;
  }

  static CachingAllocator& instance() {
    static CachingAllocator* a = new CachingAllocator();  // outlives static tensors
    return *a;
  }

  // The statistics entry points check the index here, so that torch.flagos and torch.accelerator
  // (the DeviceAllocator methods below) both reject an index out of range.
  DeviceStats stats(c10::DeviceIndex device) {
    check_index(device);
    std::lock_guard<std::mutex> lock(mu_);
    return stats_for(device);
  }

  void reset_peaks(c10::DeviceIndex device) {
    check_index(device);
    std::lock_guard<std::mutex> lock(mu_);
    DeviceStats& s = stats_for(device);
    s.allocated_peak = s.allocated;
    s.reserved_peak = s.reserved;
  }

  void reset_accumulated(c10::DeviceIndex device) {
    check_index(device);
    std::lock_guard<std::mutex> lock(mu_);
    DeviceStats& s = stats_for(device);
    s.num_allocs = s.num_frees = s.num_ooms = s.num_alloc_retries = s.num_device_mallocs = 0;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t d = 0; d < cached_.size(); ++d) release_cached(static_cast<c10::DeviceIndex>(d));
  }

  void record(const c10::DataPtr& data, const c10::Stream& stream) {
    void* ptr = data.get();
    if (ptr == nullptr) return;
    if (const ComputeSide* side = side_of(data)) return record_adopted(*side, stream);
    flagos_stream handle = native_stream(stream);
    std::lock_guard<std::mutex> lock(mu_);
    auto blk = active_.find(ptr);
    if (blk == active_.end()) return;  // not flagos's memory
    Block& b = blk->second;
    if (handle != b.stream && std::find(b.users.begin(), b.users.end(), handle) == b.users.end())
      b.users.push_back(handle);
  }

  // Adopted memory belongs to the compute device's allocator: tell it. The
  // DataPtr carries its owner, so no lookup (and no lock) is needed.
  static void record_adopted(const ComputeSide& side, const c10::Stream& stream) {
    if (std::optional<c10::Stream> compute = compute_stream(stream))
      c10::impl::getDeviceGuardImpl(compute->device_type())->recordDataPtrOnStream(side.owner.data_ptr(), *compute);
  }

  // ---- c10::DeviceAllocator ----
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t /*mempool_id: no pools*/) override { empty_cache(); }
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override { record(ptr, stream); }
  void resetAccumulatedStats(c10::DeviceIndex device) override { reset_accumulated(device); }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peaks(device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override { return memory_info(device); }
  // Our counters under c10's names (pool "all"; the same numbers torch.flagos.memory_stats shows).
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const DeviceStats s = stats(device);
    c10::CachingDeviceAllocator::DeviceStats out;
    constexpr auto all = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
    auto set = [](c10::CachingDeviceAllocator::Stat& stat, int64_t current, int64_t peak) {
      stat.current = current;
      stat.peak = peak;
    };
    set(out.allocated_bytes[all], s.allocated, s.allocated_peak);
    set(out.active_bytes[all], s.allocated, s.allocated_peak);
    set(out.requested_bytes[all], s.allocated, s.allocated_peak);
    set(out.reserved_bytes[all], s.reserved, s.reserved_peak);
    set(out.active[all], s.active_blocks, s.active_blocks);
    set(out.inactive_split[all], s.cached_blocks, s.cached_blocks);
    out.allocation[all].allocated = s.num_allocs;
    out.allocation[all].freed = s.num_frees;
    out.allocation[all].current = s.num_allocs - s.num_frees;
    out.num_ooms = s.num_ooms;
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_device_alloc = s.num_device_mallocs;
    return out;
  }

  c10::DataPtr adopt(c10::Storage owner, c10::DeviceIndex device,
                     c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> view) {
    check_index(device);
    size_t size = owner.nbytes();
    void* ptr = owner.mutable_data();
    auto ctx = std::make_unique<Adopted>(Adopted{{std::move(owner), std::move(view)}, device, size, ptr});
    {
      std::lock_guard<std::mutex> lock(mu_);
      DeviceStats& s = stats_for(device);
      uint64_t capacity = capacity_of(device);
      if (static_cast<uint64_t>(s.reserved) + size > capacity) {
        release_cached(device);
      }
      if (static_cast<uint64_t>(s.reserved) + size > capacity) {
        s.num_ooms++;
        oom(device, size, s, capacity);
      }
      s.adopted += size;
      s.reserved += size;
      s.allocated += size;
      s.active_blocks++;
      s.num_allocs++;
      s.reserved_peak = std::max(s.reserved_peak, s.reserved);
      s.allocated_peak = std::max(s.allocated_peak, s.allocated);
      if (ptr) owners_[ptr] = ctx.get();
    }
    return {ptr, ctx.release(), &CachingAllocator::release_adopted, c10::Device(kDeviceType, device)};
  }

  bool owner_of(const void* ptr, c10::DeviceIndex* device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = owners_.find(const_cast<void*>(ptr));
    if (it == owners_.end()) {
      auto blk = active_.find(const_cast<void*>(ptr));
      if (blk == active_.end()) return false;
      *device = blk->second.device;
      return true;
    }
    *device = it->second->device;
    return true;
  }

 private:
  // The device's total memory; asked once (properties can be costly to read).
  uint64_t capacity_of(c10::DeviceIndex device) {
    if (capacity_.size() <= static_cast<size_t>(device)) capacity_.resize(device + 1, 0);
    if (capacity_[device] == 0) capacity_[device] = device_properties(device).total_memory;
    return capacity_[device];
  }

  DeviceStats& stats_for(c10::DeviceIndex device) {
    if (stats_.size() <= static_cast<size_t>(device)) stats_.resize(device + 1);
    return stats_[device];
  }

  StreamCache& cache_for(c10::DeviceIndex device) {
    if (cached_.size() <= static_cast<size_t>(device)) cached_.resize(device + 1);
    return cached_[device];
  }

  // Moves freed blocks whose other streams are done into the cache; with
  // `wait`, waits for them first. Caller holds mu_.
  void settle_pending(bool wait) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool done = true;
      for (flagos_event e : it->events) {
        flagos_status status = wait ? accelerator().event_synchronize(e) : accelerator().event_query(e);
        done = done && status != FLAGOS_ERROR_NOT_READY;
      }
      if (!done) {
        ++it;
        continue;
      }
      for (flagos_event e : it->events) accelerator().event_destroy(e);
      cache_for(it->block.device)[it->block.stream].emplace(it->block.size, it->ptr);
      stats_for(it->block.device).cached_blocks++;
      it = pending_.erase(it);
    }
  }

  void* take(c10::DeviceIndex device, size_t size, size_t requested, flagos_stream stream) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pending_.empty()) settle_pending(/*wait=*/false);
    DeviceStats& s = stats_for(device);
    auto& cache = cache_for(device)[stream];
    void* ptr = nullptr;
    size_t block_size = size;
    auto it = cache.lower_bound(size);
    if (it != cache.end() && it->first - size <= std::max(kMaxSlackSmall, size / 8)) {
      block_size = it->first;
      ptr = it->second;
      cache.erase(it);
      s.cached_blocks--;
    } else {
      flagos_status status = accelerator().malloc(device, &ptr, size);
      if (status == FLAGOS_ERROR_OUT_OF_MEMORY) {
        s.num_alloc_retries++;
        release_cached(device);
        status = accelerator().malloc(device, &ptr, size);
      }
      if (status == FLAGOS_ERROR_OUT_OF_MEMORY) {
        s.num_ooms++;
        uint64_t total = 0;
        accelerator().mem_get_info(device, nullptr, &total);
        oom(device, requested, s, total);
      }
      check(status, "malloc");
      s.num_device_mallocs++;
      s.reserved += block_size;
      s.reserved_peak = std::max(s.reserved_peak, s.reserved);
    }
    active_[ptr] = Block{device, block_size, stream, {}};
    s.allocated += block_size;
    s.allocated_peak = std::max(s.allocated_peak, s.allocated);
    s.active_blocks++;
    s.num_allocs++;
    return ptr;
  }

  [[noreturn]] void oom(c10::DeviceIndex device, size_t requested, const DeviceStats& s, uint64_t capacity) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "flagos: out of memory on flagos:", static_cast<int>(device),
                     ": tried to allocate ", format_bytes(requested), "; ", format_bytes(s.allocated),
                     " already allocated, ", format_bytes(s.reserved), " reserved, device capacity ",
                     format_bytes(static_cast<int64_t>(capacity)),
                     ". Free tensors you no longer need, call torch.flagos.empty_cache(), or raise the "
                     "limit (FLAGOS_HOST_MEMORY_LIMIT on the host accelerator).");
  }

  // Returns every cached block of a device to the accelerator (after the
  // work of streams that still use freed blocks). Caller holds mu_.
  void release_cached(c10::DeviceIndex device) {
    settle_pending(/*wait=*/true);
    DeviceStats& s = stats_for(device);
    for (auto& [stream, blocks] : cache_for(device)) {
      for (auto& [size, ptr] : blocks) {
        accelerator().free(device, ptr);
        s.reserved -= size;
      }
      s.cached_blocks -= static_cast<int64_t>(blocks.size());
    }
    cache_for(device).clear();
  }

  // Events on each stream that used a freed block, so it is reused only
  // after their work. Caller holds mu_. Where an event cannot be made, waits.
  std::vector<flagos_event> fence(const Block& b) {
    std::vector<flagos_event> events;
    for (flagos_stream user : b.users) {
      flagos_event e = nullptr;
      if (accelerator().event_create(b.device, FLAGOS_EVENT_DISABLE_TIMING, &e) == FLAGOS_SUCCESS &&
          accelerator().event_record(e, user) == FLAGOS_SUCCESS) {
        events.push_back(e);
      } else {
        if (e) accelerator().event_destroy(e);
        accelerator().stream_synchronize(user);
      }
    }
    return events;
  }

  void give_back(void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = active_.find(ptr);
    TORCH_INTERNAL_ASSERT(it != active_.end(), "flagos: freeing a pointer the allocator does not own");
    Block b = it->second;
    active_.erase(it);
    DeviceStats& s = stats_for(b.device);
    s.allocated -= b.size;
    s.active_blocks--;
    s.num_frees++;
    if (!b.users.empty()) {
      std::vector<flagos_event> events = fence(b);
      if (!events.empty()) {
        pending_.push_back(Pending{ptr, std::move(b), std::move(events)});
        return;
      }
    }
    s.cached_blocks++;
    cache_for(b.device)[b.stream].emplace(b.size, ptr);
  }

  void forget_adopted(Adopted* a) {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceStats& s = stats_for(a->device);
    s.adopted -= a->size;
    s.reserved -= a->size;
    s.allocated -= a->size;
    s.active_blocks--;
    s.num_frees++;
    owners_.erase(a->ptr);
  }

  static void release(void* ptr) {
    if (ptr) instance().give_back(ptr);
  }

  static void release_adopted(void* ctx) {
    auto* a = static_cast<Adopted*>(ctx);
    instance().forget_adopted(a);
    delete a;  // drops the compute-device storage
  }

  std::mutex mu_;
  // Open addressing: no node to allocate and free per block, on every allocation and adoption.
  ska::flat_hash_map<void*, Block> active_;
  ska::flat_hash_map<void*, Adopted*> owners_;  // adopted pointers
  std::vector<StreamCache> cached_;
  std::list<Pending> pending_;
  std::vector<DeviceStats> stats_;
  std::vector<uint64_t> capacity_;
};

c10::DataPtr compute_device_allocation(size_t nbytes, c10::DeviceIndex device) {
  const c10::DeviceType compute = compute_device_type();
  init_compute_device();
  c10::Allocator* compute_allocator = c10::GetAllocator(compute);
  c10::DataPtr memory;
  {
    // The compute device's allocator serves its current device (CUDA's caching allocator does).
    c10::DeviceGuard on_device(compute_device(device));
    memory = compute_allocator->allocate(nbytes);
  }
  c10::Storage owner(c10::Storage::use_byte_size_t(), nbytes, std::move(memory), compute_allocator,
                     /*resizable=*/false);
  return CachingAllocator::instance().adopt(std::move(owner), device, {});
}

}  // namespace

c10::Allocator* allocator() { return &CachingAllocator::instance(); }
bool set_allocate_from_compute_device(bool on) { return std::exchange(allocate_from_compute_device, on); }
DeviceStats memory_stats(c10::DeviceIndex index) { return CachingAllocator::instance().stats(index); }
void reset_peak_stats(c10::DeviceIndex index) { CachingAllocator::instance().reset_peaks(index); }
void reset_accumulated_stats(c10::DeviceIndex index) { CachingAllocator::instance().reset_accumulated(index); }
std::pair<uint64_t, uint64_t> memory_info(c10::DeviceIndex index) {
  check_index(index);
  uint64_t free_bytes = 0, total = 0;
  check(accelerator().mem_get_info(index, &free_bytes, &total), "mem_get_info");
  return {free_bytes, total};
}
void empty_cache() { CachingAllocator::instance().empty_cache(); }
c10::DataPtr adopt(c10::Storage owner, c10::DeviceIndex index,
                   c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> view) {
  return CachingAllocator::instance().adopt(std::move(owner), index, std::move(view));
}
const ComputeSide* compute_side(const c10::DataPtr& data) { return CachingAllocator::side_of(data); }
bool device_of(const void* ptr, c10::DeviceIndex* index) { return CachingAllocator::instance().owner_of(ptr, index); }
void record_stream(const c10::DataPtr& data, const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kDeviceType, "flagos: record_stream expects a flagos stream, got one on ",
              stream.device());
  CachingAllocator::instance().record(data, stream);
}

// Registered so that c10::GetAllocator(PrivateUse1) (storage resize, pinned
// copies, torch.UntypedStorage(device=...)) reaches the same pool.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &CachingAllocator::instance());

}  // namespace flagos
