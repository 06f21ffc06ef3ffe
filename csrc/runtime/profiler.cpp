// What torch's profiler asks a PrivateUse1 device for: timing events around
// each op (ProfilerStubs). torch.autograd.profiler.profile(use_device="flagos")
// (the KINETO_PRIVATEUSE1_FALLBACK state) brackets every op with two record()
// calls on the current flagos stream and reports elapsed() as the op's device
// time. Without these the profiler's default stubs warn "PrivateUse1 used in
// profiler but not enabled" and leave the timestamps uninitialised (times
// around -7e15 us).
#include "runtime.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

namespace flagos {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct FlagosProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device) *device = index;
    flagos_event created = nullptr;
    check(accelerator().event_create(index, FLAGOS_EVENT_DEFAULT, &created), "event_create (profiler)");
    *event = std::shared_ptr<void>(created, [](void* e) { accelerator().event_destroy(static_cast<flagos_event>(e)); });
    if (cpu_ns) *cpu_ns = c10::getTime();
    check(accelerator().event_record(created, current_native_stream(index)), "event_record (profiler)");
  }

  // Microseconds between two recorded events (the profiler's unit).
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    if (!start || !end || !*start || !*end) return 0.f;
    auto* s = static_cast<flagos_event>(start->get());
    auto* e = static_cast<flagos_event>(end->get());
    check(accelerator().event_synchronize(s), "event_synchronize (profiler)");
    check(accelerator().event_synchronize(e), "event_synchronize (profiler)");
    float ms = 0.f;
    check(accelerator().event_elapsed_time(&ms, s, e), "event_elapsed_time (profiler)");
    return ms * 1000.f;
  }

  // Named ranges (NVTX's role) have no counterpart on the accelerator ABI.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  void onEachDevice(std::function<void(int)> op) const override {
    c10::DeviceGuard guard(c10::Device(kDeviceType, current_device()));
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      guard.set_index(i);
      op(i);
    }
  }

  void synchronize() const override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i)
      check(accelerator().device_synchronize(i), "device_synchronize (profiler)");
  }

  bool enabled() const override { return true; }
};

struct RegisterProfilerStubs {
  RegisterProfilerStubs() {
    static FlagosProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
RegisterProfilerStubs register_profiler_stubs;

}  // namespace
}  // namespace flagos
