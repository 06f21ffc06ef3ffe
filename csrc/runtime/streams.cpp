// Streams and events for c10: the DeviceGuardImpl that torch.Stream,
// torch.Event, torch.accelerator and inductor's device interface go through.
// Every operation is per stream or per event; nothing synchronizes a whole
// device unless asked to.
#include "runtime.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#if __has_include(<c10/core/DeviceCapability.h>)
#include <c10/core/DeviceCapability.h>
#define FLAGOS_HAS_DEVICE_CAPABILITY 1  // torch.accelerator.get_device_capability (not in every torch)
#endif

#include <algorithm>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <vector>

namespace flagos {
namespace {

constexpr size_t kPoolSize = 8;

struct DeviceStreams {
  std::mutex mu;
  // StreamId -> handle. Id 0, the default stream, is a real stream too, so the
  // raw handle given to compiled code is never a placeholder constant.
  std::deque<flagos_stream> handles;
  std::vector<c10::StreamId> pool;  // created on first use
  size_t next_pool = 0;
};

std::vector<std::unique_ptr<DeviceStreams>>& registry() {
  static std::vector<std::unique_ptr<DeviceStreams>> devices = [] {
    std::vector<std::unique_ptr<DeviceStreams>> v;
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      v.push_back(std::make_unique<DeviceStreams>());
      flagos_stream handle = nullptr;
      check(accelerator().stream_create(i, 0, &handle), "stream_create (default stream)");
      v.back()->handles.push_back(handle);
    }
    return v;
  }();
  return devices;
}

DeviceStreams& streams_of(c10::DeviceIndex index) {
  check_index(index);
  return *registry()[index];
}

// The current stream of each device, per thread (like CUDA).
std::vector<c10::StreamId>& current_ids() {
  thread_local std::vector<c10::StreamId> ids;
  if (ids.size() < static_cast<size_t>(device_count())) ids.resize(device_count(), 0);
  return ids;
}

c10::StreamId create(DeviceStreams& ds, c10::DeviceIndex index, int priority) {
  flagos_stream handle = nullptr;
  check(accelerator().stream_create(index, priority, &handle), "stream_create");
  std::lock_guard<std::mutex> lock(ds.mu);
  ds.handles.push_back(handle);
  return static_cast<c10::StreamId>(ds.handles.size() - 1);
}

}  // namespace

flagos_stream native_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kDeviceType, "flagos: expected a flagos stream, got a stream of ",
              stream.device());
  DeviceStreams& ds = streams_of(stream.device_index());
  std::lock_guard<std::mutex> lock(ds.mu);
  TORCH_CHECK(stream.id() >= 0 && static_cast<size_t>(stream.id()) < ds.handles.size(), "flagos: stream id ",
              stream.id(), " was never created on ", stream.device());
  return ds.handles[stream.id()];
}

c10::Stream current_stream(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  check_index(index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, index), current_ids()[index]);
}

flagos_stream current_native_stream(c10::DeviceIndex index) { return native_stream(current_stream(index)); }

c10::Stream exchange_stream(const c10::Stream& stream) {
  native_stream(stream);  // validates device and id
  c10::Stream previous = current_stream(stream.device_index());
  current_ids()[stream.device_index()] = stream.id();
  return previous;
}

c10::Stream new_stream(c10::DeviceIndex index, int priority) {
  if (index < 0) index = current_device();
  DeviceStreams& ds = streams_of(index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, index), create(ds, index, priority));
}

c10::Stream pool_stream(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  DeviceStreams& ds = streams_of(index);
  {
    std::lock_guard<std::mutex> lock(ds.mu);
    if (ds.pool.size() == kPoolSize) {
      c10::StreamId id = ds.pool[ds.next_pool++ % kPoolSize];
      return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, index), id);
    }
  }
  c10::StreamId id = create(ds, index, 0);
  std::lock_guard<std::mutex> lock(ds.mu);
  ds.pool.push_back(id);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, index), id);
}

c10::Stream stream_of_native(c10::DeviceIndex index, flagos_stream handle) {
  if (index < 0) index = current_device();
  DeviceStreams& ds = streams_of(index);
  std::lock_guard<std::mutex> lock(ds.mu);
  auto known = std::find(ds.handles.begin(), ds.handles.end(), handle);
  if (known == ds.handles.end()) {
    ds.handles.push_back(handle);
    known = std::prev(ds.handles.end());
  }
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, index),
                     static_cast<c10::StreamId>(known - ds.handles.begin()));
}

std::optional<c10::Stream> compute_stream(const c10::Stream& stream) {
  if (accelerator().compute_stream_id == nullptr) return std::nullopt;
  int64_t id = 0;
  check(accelerator().compute_stream_id(stream.device_index(), native_stream(stream), &id), "compute_stream_id");
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(compute_device_type(), stream.device_index()), id);
}

ComputeStreamGuard::ComputeStreamGuard(c10::DeviceIndex index) {
  if (accelerator().compute_stream_id == nullptr) return;  // the CPU: nothing to switch, on every op
  std::optional<c10::Stream> stream = compute_stream(current_stream(index));
  init_compute_device();
  impl_ = c10::impl::getDeviceGuardImpl(compute_device_type());
  previous_ = impl_->exchangeStream(*stream);
}

ComputeStreamGuard::~ComputeStreamGuard() {
  if (impl_ && previous_) impl_->exchangeStream(*previous_);
}

namespace {

flagos_event as_event(void* event) { return static_cast<flagos_event>(event); }

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDeviceType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device old = getDevice();
    if (old.index() != device.index()) setDevice(device);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kDeviceType, current_device()); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kDeviceType, "flagos: expected a flagos device, got ", device);
    set_device(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override { accelerator().set_device(device.index()); }

  c10::Stream getStream(c10::Device device) const override { return current_stream(device.index()); }
  c10::Stream getDefaultStream(c10::Device device) const override { return c10::Stream(c10::Stream::DEFAULT, device); }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override { return pool_stream(device.index()); }
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return new_stream(device.index(), priority);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override { return exchange_stream(stream); }
  // torch.Stream.native_handle: the accelerator's handle, what compiled code launches on.
  void* getStreamNativeHandle(const c10::Stream stream) const override { return native_stream(stream); }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

#ifdef FLAGOS_HAS_DEVICE_CAPABILITY
  // torch.accelerator.get_device_capability(): the dtypes flagos tensors can
  // hold and copy. Every flagos kernel is the compute device's, so start from
  // what it reports (everything, where it does not say), less the quantized
  // dtypes (flagos tensors are strided) and the sub-byte placeholder integers
  // (uint1..7, int1..7: no copy kernel takes them).
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    check_index(device.has_index() ? device.index() : current_device());
    c10::DeviceCapability capability;
    try {
      capability =
          c10::impl::getDeviceGuardImpl(compute_device_type())->getDeviceCapability(compute_device(device.index()));
    } catch (const c10::Error&) {
      // The compute device does not answer: keep the default (every dtype).
    }
    auto& has = capability.capability_data.supported_scalar_types;
    has.has_QInt8 = has.has_QUInt8 = has.has_QInt32 = has.has_QUInt4x2 = has.has_QUInt2x4 = 0;
    has.has_UInt1 = has.has_UInt2 = has.has_UInt3 = has.has_UInt4 = has.has_UInt5 = has.has_UInt6 = has.has_UInt7 = 0;
    has.has_Int1 = has.has_Int2 = has.has_Int3 = has.has_Int4 = has.has_Int5 = has.has_Int6 = has.has_Int7 = 0;
    return capability;
  }
#endif

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event) accelerator().event_destroy(as_event(event));
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "flagos: event of flagos:", static_cast<int>(device_index), " cannot be recorded on a stream of ",
                stream.device());
    if (*event == nullptr) {
      // torch.Event(enable_timing=True) asks for BACKEND_DEFAULT; PYTORCH_DEFAULT means no timing.
      uint32_t flags = flag == c10::EventFlag::BACKEND_DEFAULT ? FLAGOS_EVENT_DEFAULT : FLAGOS_EVENT_DISABLE_TIMING;
      flagos_event created = nullptr;
      check(accelerator().event_create(stream.device_index(), flags, &created), "event_create");
      *event = created;
    }
    check(accelerator().event_record(as_event(*event), native_stream(stream)), "event_record");
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;  // never recorded: nothing to wait for
    check(accelerator().stream_wait_event(native_stream(stream), as_event(event)), "stream_wait_event");
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    flagos_status status = accelerator().event_query(as_event(event));
    if (status == FLAGOS_ERROR_NOT_READY) return false;
    check(status, "event_query");
    return true;
  }

  void synchronizeEvent(void* event) const override {
    if (event) check(accelerator().event_synchronize(as_event(event)), "event_synchronize");
  }

  bool queryStream(const c10::Stream& stream) const override {
    flagos_status status = accelerator().stream_query(native_stream(stream));
    if (status == FLAGOS_ERROR_NOT_READY) return false;
    check(status, "stream_query");
    return true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    check(accelerator().stream_synchronize(native_stream(stream)), "stream_synchronize");
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    check_index(device_index);
    check(accelerator().device_synchronize(device_index), "device_synchronize");
  }

  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    record_stream(data, stream);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "flagos: both events must be recorded before elapsed_time() is called.");
    float ms = 0;
    flagos_status status = accelerator().event_elapsed_time(&ms, as_event(start), as_event(end));
    TORCH_CHECK(status != FLAGOS_ERROR_NOT_SUPPORTED,
                "flagos: elapsed_time() needs both events created with enable_timing=True.");
    check(status, "event_elapsed_time");
    return ms;
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

}  // namespace flagos
