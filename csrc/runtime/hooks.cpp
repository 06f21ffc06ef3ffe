// PrivateUse1 hooks (what at::globalContext() asks about the device) and the
// per-device random generator.
//
// The eager fallback runs compute-device kernels, which only accept that
// device's generator type. So each flagos generator owns a generator of the
// compute device (CPU for host, CUDA for cuda) and
// the fallback hands that one to the kernel: one stream of random numbers per
// flagos device, seeded and saved independently of the CPU's.
#include "runtime.h"
#include "generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include <mutex>
#include <vector>

namespace flagos {

namespace {

// A fresh generator of the compute device (what its random kernels accept).
at::Generator new_compute_generator(c10::DeviceIndex index, uint64_t seed) {
  if (compute_device_type() == c10::kCPU) return at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Generator g = at::globalContext().getAcceleratorHooksInterface(compute_device_type()).getNewGenerator(index);
  g.set_current_seed(seed);
  return g;
}

}  // namespace

FlagosGeneratorImpl::FlagosGeneratorImpl(c10::DeviceIndex index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kDeviceType, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      engine_(new_compute_generator(index, seed)) {}

void FlagosGeneratorImpl::set_current_seed(uint64_t seed) { engine_.set_current_seed(seed); }
void FlagosGeneratorImpl::set_offset(uint64_t offset) { engine_.set_offset(offset); }
uint64_t FlagosGeneratorImpl::get_offset() const { return engine_.get_offset(); }
uint64_t FlagosGeneratorImpl::current_seed() const { return engine_.current_seed(); }
uint64_t FlagosGeneratorImpl::seed() { return engine_.seed(); }
void FlagosGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  engine_.unsafeGetGeneratorImpl()->set_state(new_state);
}
c10::intrusive_ptr<c10::TensorImpl> FlagosGeneratorImpl::get_state() const {
  return engine_.get_state().getIntrusivePtr();
}

FlagosGeneratorImpl* FlagosGeneratorImpl::clone_impl() const {
  auto* copy = new FlagosGeneratorImpl(device().index(), 0);
  copy->engine_ = engine_.clone();
  return copy;
}

at::Generator compute_generator(const at::Generator& generator) {
  TORCH_CHECK(generator.device().type() == kDeviceType, "flagos: expected a flagos generator, got one for ",
              generator.device());
  return generator.get<FlagosGeneratorImpl>()->engine();
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i)
      generators.push_back(at::make_generator<FlagosGeneratorImpl>(i, c10::default_rng_seed_val));
  });
  if (index < 0) index = current_device();
  check_index(index);
  return generators[index];
}

namespace {

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  void init() const override { device_count(); }
  bool hasPrimaryContext(c10::DeviceIndex index) const override { return index >= 0 && index < device_count(); }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override { return exchange_device(index); }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override { return default_generator(index); }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = current_device();
    check_index(index);
    return at::make_generator<FlagosGeneratorImpl>(index, c10::default_rng_seed_val);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    c10::DeviceIndex index = -1;
    TORCH_CHECK(device_of(data, &index), "flagos: pointer ", data, " was not allocated by flagos");
    return c10::Device(kDeviceType, index);
  }
  // On the cuda accelerator of a CUDA build, factories given pin_memory=True
  // take CUDA's pinned allocator (aten prefers CUDA's in
  // GetCPUAllocatorMaybePinned), while is_pinned() asks the accelerator,
  // flagos: those blocks are pinned memory too.
  bool isPinnedPtr(const void* data) const override {
    if (is_pinned(data)) return true;
    return compute_device_type() == c10::kCUDA &&
           at::globalContext().getAcceleratorHooksInterface(c10::kCUDA).isPinnedPtr(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    resize_storage_bytes(storage, new_bytes);
  }
};

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new Hooks()); }
};
RegisterHooks register_hooks;

}  // namespace

void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "flagos: trying to resize storage that is not resizable");
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  c10::DataPtr fresh;
  {
    c10::DeviceGuard guard(storage.device());
    fresh = allocator()->allocate(new_bytes);
  }
  size_t keep = std::min(new_bytes, impl->nbytes());
  if (keep > 0) {
    flagos_stream stream = current_native_stream(storage.device().index());
    check(accelerator().memcpy_async(fresh.get(), impl->data(), keep, FLAGOS_MEMCPY_DEVICE_TO_DEVICE, stream),
          "memcpy (resize)");
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
}

}  // namespace flagos
