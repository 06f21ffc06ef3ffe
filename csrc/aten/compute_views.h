// Compute-device views of flagos tensors for one op call: what the boxed
// fallback (ops.cpp) and the unboxed kernels of the hottest ops
// (direct_kernels.cpp) share. A flagos tensor is viewed as a tensor of the
// accelerator's compute device (CPU for host, CUDA for cuda) over the same
// memory; the kernel's results are mapped back:
//   - an argument returned as-is (in-place, out=)   -> the original flagos tensor
//   - a view into an argument's memory               -> a flagos view of that storage
//   - memory the kernel allocated                    -> adopted as flagos memory (no copy)
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <string_view>
#include <utility>

#include "../runtime/runtime.h"

namespace flagos {

bool is_flagos(const at::Tensor& t);

// The compute device's backend key set (CPU or CUDA; the same for every index).
c10::DispatchKeySet compute_keys();

// The compute-device views made for one op call, and what they stand for.
class Aliases {
 public:
  explicit Aliases(std::string_view op_name) : name_(op_name) {}

  // Records the flagos device of one argument; all must agree.
  void note_device(c10::DeviceIndex index);
  // The call's flagos device (the current one when no argument named one).
  c10::DeviceIndex index();

  // The compute-device view of a flagos tensor.
  at::Tensor alias(const at::Tensor& t);
  // What the compute kernel gets for an argument: the view of a flagos tensor;
  // another tensor as it is, once checked (0-dim CPU scalars and CPU indices).
  at::Tensor to_compute(const at::Tensor& t);
  // Maps one compute-device result back to flagos.
  at::Tensor to_flagos(const at::Tensor& r);
  // After the kernel: an out=/in-place argument the kernel resized or
  // restrided must show the same change on the flagos side.
  void write_back(const at::Tensor& alias);

 private:
  std::string_view name_;
  std::optional<c10::DeviceIndex> index_;
  // Small inline vectors: most ops have a handful of tensors, and the
  // per-call heap traffic shows up in small-op overhead.
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 4> storages_;  // (flagos, compute)
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 4> tensors_;       // (compute view, flagos)
};

// The compute device's NotImplementedError for `op`, restated with the flagos
// device and the op's name.
[[noreturn]] void raise_unsupported(std::string_view op, c10::DeviceIndex index, const c10::NotImplementedError& e);

}  // namespace flagos
