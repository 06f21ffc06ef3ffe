// Pinned host memory: what Tensor.pin_memory(), torch.empty(..., pin_memory=True)
// and DataLoader(pin_memory=True) allocate when flagos is the accelerator, and
// what is_pinned() recognises. The memory comes from the accelerator's
// pinned_alloc (cuda: page-locked blocks that make non_blocking copies
// asynchronous); this file keeps the live ranges so that is_pinned() answers
// for any pointer into them (views of pinned tensors are pinned too).
#include "runtime.h"

#include <map>
#include <mutex>

namespace flagos {
namespace {

struct Ranges {
  std::mutex mu;
  std::map<const char*, size_t> by_start;  // start -> size
  std::map<void*, const char*> start_of;   // handle -> start
};

Ranges& ranges() {
  static Ranges* r = new Ranges();  // used by frees during static destruction
  return *r;
}

void free_pinned(void* handle) {
  {
    Ranges& r = ranges();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.start_of.find(handle);
    if (it != r.start_of.end()) {
      r.by_start.erase(it->second);
      r.start_of.erase(it);
    }
  }
  accelerator().pinned_free(handle);
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t size) override {
    const flagos_accelerator& acc = accelerator();
    TORCH_CHECK(FLAGOS_HAS_ENTRY(&acc, pinned_alloc) && FLAGOS_HAS_ENTRY(&acc, pinned_free), "flagos: the '", acc.name,
                "' accelerator has no pinned host memory (its table has no pinned_alloc); "
                "use pageable tensors (pin_memory=False).");
    if (size == 0) return {nullptr, nullptr, &free_pinned, c10::Device(c10::kCPU)};
    void* ptr = nullptr;
    void* handle = nullptr;
    flagos_status status = acc.pinned_alloc(size, &ptr, &handle);
    if (status == FLAGOS_ERROR_OUT_OF_MEMORY) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "flagos: out of pinned host memory allocating ", size,
                       " bytes on the '", acc.name, "' accelerator: ", acc.error_string(status),
                       ". Free pinned tensors or pin less (DataLoader: fewer workers or prefetched batches).");
    }
    check(status, "pinned_alloc");
    Ranges& r = ranges();
    std::lock_guard<std::mutex> lock(r.mu);
    r.by_start[static_cast<const char*>(ptr)] = size;
    r.start_of[handle] = static_cast<const char*>(ptr);
    return {ptr, handle, &free_pinned, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

c10::Allocator* pinned_allocator() {
  static PinnedAllocator allocator;
  return &allocator;
}

bool is_pinned(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  Ranges& r = ranges();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_start.upper_bound(p);  // first block starting after p
  if (it == r.by_start.begin()) return false;
  --it;
  return p < it->first + it->second;
}

}  // namespace flagos
