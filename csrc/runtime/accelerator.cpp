// Picks the accelerator at start-up and wraps its status codes in c10 errors.
#include "runtime.h"

#include <ATen/Context.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

extern "C" const flagos_accelerator* flagos_host_accelerator(void);
#ifdef FLAGOS_WITH_CUDA
extern "C" const flagos_accelerator* flagos_cuda_accelerator(void);
#endif

namespace flagos {
namespace {

struct Entry {
  const char* name;
  flagos_accelerator_entry get;
};

// In order of preference: the default is the first one with a device.
const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
#ifdef FLAGOS_WITH_CUDA
      {"cuda", flagos_cuda_accelerator},
#endif
      {"host", flagos_host_accelerator},
  };
  return entries;
}

int32_t count_of(const flagos_accelerator* acc) {
  int32_t n = 0;
  return acc->device_count(&n) == FLAGOS_SUCCESS ? n : 0;
}

// Why flagos offers no devices, when FLAGOS_ACCELERATOR names no accelerator
// of this build. Not an import error: torch loads flagos in every process of
// the environment, and one bad variable must not break `import torch` there.
std::string& selection_error() {
  static std::string error;
  return error;
}

const flagos_accelerator* select() {
  const char* wanted = std::getenv("FLAGOS_ACCELERATOR");
  for (const Entry& e : registry()) {
    const flagos_accelerator* acc = e.get();
    TORCH_CHECK(acc->abi_version == FLAGOS_ABI_VERSION && acc->struct_size >= FLAGOS_ACCELERATOR_MIN_SIZE,
                "flagos: accelerator '", e.name, "' was built for ABI version ", acc->abi_version,
                "; this runtime speaks version ", FLAGOS_ABI_VERSION, ". Rebuild the accelerator.");
    if (wanted && *wanted) {
      if (std::string(wanted) == e.name) return acc;
    } else if (count_of(acc) > 0) {
      return acc;
    }
  }
  if (wanted && *wanted)
    selection_error() = std::string("FLAGOS_ACCELERATOR='") + wanted +
                        "' is not an accelerator of this build; choose one of: " + available_accelerators() +
                        ". flagos offers no devices until it names one.";
  return registry().back().get();  // host: reports its own configuration errors
}

// Set by device_count() when it finds none: the reason, for later errors.
std::string& no_devices_reason() {
  static std::string reason;
  return reason;
}

}  // namespace

std::string available_accelerators() {
  std::string names;
  for (const Entry& e : registry()) names += (names.empty() ? "" : ", ") + std::string(e.name);
  return names;
}

const flagos_accelerator& accelerator() {
  static const flagos_accelerator* acc = select();
  return *acc;
}

void check(flagos_status status, const char* what) {
  if (status == FLAGOS_SUCCESS) return;
  const char* message = accelerator().error_string(status);
  TORCH_CHECK(false, "flagos: ", what, " failed on the '", accelerator().name, "' accelerator: ", message, " (status ",
              static_cast<int>(status), ")");
}

c10::DeviceIndex device_count() {
  static const c10::DeviceIndex n = [] {
    const flagos_accelerator& acc = accelerator();
    if (!selection_error().empty()) {
      no_devices_reason() = selection_error();
      TORCH_WARN("flagos: ", no_devices_reason());
      return static_cast<c10::DeviceIndex>(0);
    }
    int32_t count = 0;
    flagos_status status = acc.device_count(&count);
    if (status != FLAGOS_SUCCESS || count == 0) {
      no_devices_reason() = std::string("the '") + acc.name + "' accelerator reports no usable device" +
                            (status != FLAGOS_SUCCESS ? std::string(": ") + acc.error_string(status) : "");
      TORCH_WARN("flagos: ", no_devices_reason());
      return static_cast<c10::DeviceIndex>(0);
    }
    return static_cast<c10::DeviceIndex>(count);
  }();
  return n;
}

namespace {
std::atomic<IndexErrorRaiser> index_error_raiser{nullptr};
}  // namespace

void set_index_error_raiser(IndexErrorRaiser raiser) { index_error_raiser.store(raiser); }

void raise_index_out_of_range(int64_t index) {
  std::string message =
      device_count() > 0
          ? c10::str("flagos:", index, " is out of range: this machine has ", static_cast<int>(device_count()),
                     " flagos device(s) on the '", accelerator().name,
                     "' accelerator (valid: flagos:0..flagos:", static_cast<int>(device_count()) - 1, ").")
          : c10::str("flagos:", index, " does not exist: there are no flagos devices (", no_devices_reason(), ").");
  if (IndexErrorRaiser raise = index_error_raiser.load()) raise(message);
  TORCH_CHECK_INDEX(false, message);
}

c10::DeviceIndex current_device() {
  int32_t device = 0;
  check(accelerator().get_device(&device), "get_device");
  return static_cast<c10::DeviceIndex>(device);
}

void set_device(c10::DeviceIndex index) {
  check_index(index);
  check(accelerator().set_device(index), "set_device");
}

c10::DeviceIndex exchange_device(c10::DeviceIndex index) {
  const c10::DeviceIndex previous = current_device();
  if (index != previous) set_device(index);
  return previous;
}

flagos_device_properties device_properties(c10::DeviceIndex index) {
  check_index(index);
  flagos_device_properties props{};
  check(accelerator().get_device_properties(index, &props), "get_device_properties");
  return props;
}

c10::DeviceType compute_device_type() {
  static const c10::DeviceType type = c10::Device(accelerator().compute_device).type();
  return type;
}

void init_compute_device() {
  static std::once_flag initialized;
  std::call_once(initialized, [] { at::globalContext().lazyInitDevice(compute_device_type()); });
}

}  // namespace flagos
