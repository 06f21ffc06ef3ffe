// Unboxed kernels for the hottest ops (direct_kernels.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <functional>
#include <set>
#include <string>

namespace flagos {

// Registers into `lib` (aten, PrivateUse1) the unboxed kernel of each op of
// the table for which `reaches_fallback` holds; returns their names.
std::set<std::string> register_direct_kernels(torch::Library& lib,
                                              const std::function<bool(const c10::OperatorHandle&)>& reaches_fallback);

}  // namespace flagos
