// The flagos random generator and storage resizing, shared by the hooks and
// the eager ops.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include "runtime.h"

namespace flagos {

// One per device. Owns the compute-device generator whose engine it exposes.
class FlagosGeneratorImpl final : public c10::GeneratorImpl {
 public:
  FlagosGeneratorImpl(c10::DeviceIndex index, uint64_t seed);
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  const at::Generator& engine() const { return engine_; }

 private:
  FlagosGeneratorImpl* clone_impl() const override;
  at::Generator engine_;
};

// The compute-device generator behind a flagos generator.
at::Generator compute_generator(const at::Generator& generator);
const at::Generator& default_generator(c10::DeviceIndex index);
// Grows or shrinks a flagos storage in place (new block, contents copied).
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);

}  // namespace flagos
