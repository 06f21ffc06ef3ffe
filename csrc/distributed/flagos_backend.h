// The c10d backend of flagos (torch.distributed): collectives on flagos
// tensors run on an existing engine of the compute device -- Gloo for the
// host accelerator, NCCL for cuda -- over zero-copy compute-device views of
// the flagos memory. No collective library of its own.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace flagos {

// `device_engine` runs collectives on flagos tensors (given as compute-device
// views); `cpu_engine` (may be null) runs them on CPU tensors and runs
// barriers. On the host accelerator both are one Gloo backend.
c10::intrusive_ptr<c10d::Backend> make_distributed_backend(c10::intrusive_ptr<c10d::Backend> device_engine,
                                                           c10::intrusive_ptr<c10d::Backend> cpu_engine, int rank,
                                                           int size);

}  // namespace flagos
