// fdev: a small PrivateUse1 device written the way a vendor new to PyTorch would write one.
//
// It exists to test the flagos kit on a device the kit knows nothing about. Deliberately
// less than flagos: device memory is host memory from malloc (no caching, no statistics),
// every aten op without a native kernel runs through aten's generic CPU fallback (copy to
// the CPU, run, copy back), streams and events exist only through the c10 DeviceGuardImpl
// (torch.Stream / torch.Event / torch.accelerator), and there is no inductor support at all.
//
// One translation unit on purpose: torch's headers cost most of the build.

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/resize_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace fdev {

constexpr c10::DeviceType kFdev = c10::DeviceType::PrivateUse1;
constexpr c10::DeviceIndex kDeviceCount = 2;
constexpr size_t kAlignment = 64;

thread_local c10::DeviceIndex current_device = 0;

// torch passes index -1 for "the current device" (torch.Stream(device="fdev")).
c10::DeviceIndex resolve(c10::DeviceIndex index) { return index < 0 ? current_device : index; }

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < kDeviceCount, "fdev: device index ", static_cast<int>(index),
              " out of range (fdev has ", static_cast<int>(kDeviceCount), " devices)");
}

// ---- memory: plain host memory -------------------------------------------------------

void free_block(void* ptr) { std::free(ptr); }

struct HostMemory final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
      ptr = std::aligned_alloc(kAlignment, rounded);
      TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "fdev: out of memory allocating ", nbytes, " bytes");
    }
    return {ptr, ptr, &free_block, c10::Device(kFdev, current_device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

HostMemory host_memory;
REGISTER_ALLOCATOR(kFdev, &host_memory);

// ---- streams and events: work runs at submission, so ordering holds trivially ----------

struct Event {
  bool timing;
  std::chrono::steady_clock::time_point recorded_at;
  bool recorded = false;
};

std::array<std::atomic<c10::StreamId>, kDeviceCount> next_stream_id{};
thread_local std::array<c10::StreamId, kDeviceCount> current_stream{};

struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kFdev; }

  c10::Device exchangeDevice(c10::Device device) const override {
    auto previous = getDevice();
    setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override { return {kFdev, current_device}; }
  void setDevice(c10::Device device) const override {
    check_index(device.index());
    current_device = device.index();
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override { current_device = device.index(); }
  c10::DeviceIndex deviceCount() const noexcept override { return kDeviceCount; }

  c10::Stream getStream(c10::Device device) const override {
    auto index = resolve(device.index());
    return c10::Stream(c10::Stream::UNSAFE, {kFdev, index}, current_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::UNSAFE, {kFdev, resolve(device.index())}, 0);
  }
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    auto index = resolve(device.index());
    check_index(index);
    return c10::Stream(c10::Stream::UNSAFE, {kFdev, index}, ++next_stream_id[index]);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool high_priority) const override {
    return getNewStream(device, 0);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    auto previous = getStream(stream.device());
    current_stream[resolve(stream.device_index())] = stream.id();
    return previous;
  }
  bool queryStream(const c10::Stream& stream) const override { return true; }
  void synchronizeStream(const c10::Stream& stream) const override {}
  void synchronizeDevice(const c10::DeviceIndex device_index) const override { check_index(resolve(device_index)); }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    if (*event == nullptr) {
      *event = new Event{flag == c10::EventFlag::BACKEND_DEFAULT};
    }
    auto* e = static_cast<Event*>(*event);
    e->recorded_at = std::chrono::steady_clock::now();
    e->recorded = true;
  }
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override { return true; }
  void synchronizeEvent(void* event) const override {}
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    delete static_cast<Event*>(event);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override {
    TORCH_CHECK(start && end, "fdev: both events must be recorded before elapsed_time");
    auto* a = static_cast<Event*>(start);
    auto* b = static_cast<Event*>(end);
    TORCH_CHECK(a->timing && b->timing, "fdev: elapsed_time needs events created with enable_timing=True");
    return std::chrono::duration<double, std::milli>(b->recorded_at - a->recorded_at).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

// ---- hooks ---------------------------------------------------------------------------

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return kDeviceCount; }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    check_index(device);
    current_device = device;
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto previous = current_device;
    setCurrentDevice(device);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  at::Device getDeviceFromPtr(void* data) const override { return {kFdev, current_device}; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    at::native::resize_bytes_nocuda(storage, newsize);
  }
};

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new Hooks()); }
} register_hooks;

// ---- native kernels: allocation, metadata, copies ------------------------------------

constexpr c10::DispatchKeySet kFdevKeys(c10::DispatchKey::PrivateUse1);

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_generic(size, &host_memory, kFdevKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, &host_memory, kFdevKeys, c10::dtype_or_default(dtype));
}

// A CPU tensor over the same memory: how this device's host memory is read and written.
at::Tensor host_view(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor src = self.is_cpu() ? self : host_view(self);
  at::Tensor out = dst.is_cpu() ? dst : host_view(dst);
  out.copy_(src);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) { return at::native::_local_scalar_dense_cpu(host_view(self)); }

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

const at::Tensor& resize(const at::Tensor& self, c10::SymIntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) { return at::native::set_tensor_(self, source); }
at::Tensor& set_storage(at::Tensor& self, at::Storage source) { return at::native::set_(self, source); }
at::Tensor& set_storage_offset(at::Tensor& self, at::Storage source, int64_t offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  return at::cpu::set_(self, source, offset, size, stride);
}

// Every other op: aten's generic CPU fallback (arguments copied to the CPU and results back).
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { at::native::cpu_fallback(op, stack); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>()); }

}  // namespace fdev

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("device_count", [] { return static_cast<int>(fdev::kDeviceCount); });
  m.def("current_device", [] { return static_cast<int>(fdev::current_device); });
  m.def("set_device", [](int index) {
    fdev::check_index(static_cast<c10::DeviceIndex>(index));
    fdev::current_device = static_cast<c10::DeviceIndex>(index);
  });
}
