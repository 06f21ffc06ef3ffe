// Unboxed kernels for the ops a transformer's eager forward calls most.
//
// They do what the boxed fallback does (compute_views.h: view the flagos
// tensors on the compute device, run its kernel, map the results back), typed
// by the op's signature in the installed torch (at::_ops::<op>::schema), so a
// call skips the boxing of its arguments, the walk over its schema, and the
// second dispatch's key computation and unboxing. Eager Qwen3 calls about two
// thousand ops per forward, and host time per op is what separates an eager
// flagos forward from an eager CUDA one (docs/results/h200.md).
//
// An op gets its unboxed kernel exactly where it would otherwise reach the
// boxed fallback (see register_direct_kernels), so which compute kernel runs
// does not change, only how it is called.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_native_multi_head_attention_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/tril_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <atomic>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../runtime/runtime.h"
#include "aten.h"
#include "compute_views.h"
#include "direct_kernels.h"

namespace flagos {
namespace {

// ---- arguments: which flagos device the call is on

template <class T>
void note(Aliases&, const T&) {}

void note(Aliases& aliases, const at::Tensor& t) { aliases.note_device_of(t); }

void note(Aliases& aliases, const at::ITensorListRef& list) {
  for (const at::Tensor& t : list) note(aliases, t);
}

void note(Aliases& aliases, const std::optional<at::Tensor>& t) {
  if (t) note(aliases, *t);
}

// ---- arguments: which ones the kernel writes (in-place self, out=)

template <class T>
void note_written(Aliases&, const T&) {}

void note_written(Aliases& aliases, at::Tensor& t) {
  if (is_flagos(t)) aliases.mark_written(t);
}

// ---- arguments: what the compute kernel gets. Held is what lives for the
// call (the compute views); pass() hands it over in the op's own type.

template <class T>
struct Convert {  // not a tensor: passed as it is
  using Held = T;
  static T hold(Aliases&, T value) { return value; }
  static T pass(Held& held) { return held; }
};

template <>
struct Convert<const at::Tensor&> {
  using Held = at::Tensor;
  static Held hold(Aliases& aliases, const at::Tensor& t) { return aliases.to_compute(t, /*written=*/false); }
  static const at::Tensor& pass(Held& held) { return held; }
};

template <>
struct Convert<at::Tensor&> {  // written: in-place self, out=
  using Held = at::Tensor;
  static Held hold(Aliases& aliases, at::Tensor& t) { return aliases.to_compute(t); }
  static at::Tensor& pass(Held& held) { return held; }
};

template <>
struct Convert<const std::optional<at::Tensor>&> {  // read: layer norm's weight and bias, a mask
  using Held = std::optional<at::Tensor>;
  static Held hold(Aliases& aliases, const std::optional<at::Tensor>& t) {
    return t && t->defined() ? Held(aliases.to_compute(*t, /*written=*/false)) : t;
  }
  static const std::optional<at::Tensor>& pass(Held& held) { return held; }
};

template <>
struct Convert<const at::ITensorListRef&> {
  using Held = std::vector<at::Tensor>;
  static Held hold(Aliases& aliases, const at::ITensorListRef& list) {
    Held held;
    held.reserve(list.size());
    for (const at::Tensor& t : list) held.push_back(aliases.to_compute(t, /*written=*/false));
    return held;
  }
  static at::ITensorListRef pass(Held& held) { return at::ITensorListRef(held); }
};

// The caller's argument whose compute view the kernel returned (in-place and
// out= ops return a written argument by reference).
template <class Arg, class Held>
at::Tensor* if_returned(const at::Tensor& result, Held& held, std::remove_reference_t<Arg>& arg) {
  if constexpr (std::is_same_v<Arg, at::Tensor&>) return &result == &held ? &arg : nullptr;
  return nullptr;
}

template <class Arg, class Held>
void write_back_if_written(Aliases& aliases, Held& held) {
  if constexpr (std::is_same_v<Arg, at::Tensor&>) aliases.write_back(held);
}

// ---- results

template <class R>
struct Back;

template <>
struct Back<at::Tensor> {
  static at::Tensor map(Aliases& aliases, const at::Tensor& r) { return aliases.to_flagos(r); }
};

template <class... Tensors>
struct Back<std::tuple<Tensors...>> {  // layer norm's output, mean and rstd; attention's two
  static std::tuple<Tensors...> map(Aliases& aliases, const std::tuple<Tensors...>& r) {
    return std::apply([&](const auto&... t) { return std::tuple<Tensors...>(aliases.to_flagos(t)...); }, r);
  }
};

// ---- the kernel

template <class Op, class Signature = typename Op::schema>
struct Direct;

template <class Op, class Ret, class... Args>
struct Direct<Op, Ret(Args...)> {
  using HeldArgs = std::tuple<typename Convert<Args>::Held...>;

  static Ret call(Args... args) {
    Aliases aliases(Op::name);
    (note(aliases, args), ...);
    OnFlagosDevice on_device(aliases);
    (note_written(aliases, args), ...);
    HeldArgs held{Convert<Args>::hold(aliases, args)...};  // braces: left to right
    return run(aliases, held, std::index_sequence_for<Args...>{}, args...);
  }

  template <size_t... I>
  static Ret run(Aliases& aliases, HeldArgs& held, std::index_sequence<I...>, Args... args) {
    try {
      if constexpr (std::is_same_v<Ret, at::Tensor&>) {
        at::Tensor& result = Op::redispatch(compute_keys(), Convert<Args>::pass(std::get<I>(held))...);
        (write_back_if_written<Args>(aliases, std::get<I>(held)), ...);
        at::Tensor* original = nullptr;
        ((original = original ? original : if_returned<Args>(result, std::get<I>(held), args)), ...);
        TORCH_INTERNAL_ASSERT(original != nullptr, "flagos: ", Op::name, " returned a tensor it was not given");
        return *original;
      } else {
        Ret result = Op::redispatch(compute_keys(), Convert<Args>::pass(std::get<I>(held))...);
        (write_back_if_written<Args>(aliases, std::get<I>(held)), ...);
        return Back<Ret>::map(aliases, result);
      }
    } catch (const c10::NotImplementedError& e) {
      raise_unsupported(c10::toString(operator_name()), aliases.index(), e);
    }
  }

  static c10::OperatorName operator_name() { return c10::OperatorName(Op::name, Op::overload_name); }
};

// Whether Direct<Op> is the op's flagos kernel in this process (see
// register_direct_kernels).
template <class Op>
bool& registered() {
  static bool is_registered = false;
  return is_registered;
}

// The kernels the dispatcher holds for an op at flagos's keys, as a text
// (dumpComputedTable's lines for those keys): what compiled code's entry
// points compare against the registration-time text to notice a kernel
// registered over flagos's (torch.library.impl on PrivateUse1, say).
std::string flagos_entries(const c10::OperatorName& name) {
  std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
  if (!op) return {};
  std::istringstream table(op->dumpComputedTable());
  std::string line, entries;
  while (std::getline(table, line)) {
    for (const char* key : {"PrivateUse1:", "AutogradPrivateUse1:", "ADInplaceOrView:", "AutocastPrivateUse1:"})
      if (line.rfind(key, 0) == 0) entries += line + "\n";
  }
  return entries;
}

template <class Op>
std::string& entries_at_registration() {
  static std::string entries;
  return entries;
}

struct DirectKernel {
  c10::OperatorName name;  // aten::add.Tensor
  torch::CppFunction (*make)();
  bool* registered;
  std::string* entries;  // flagos_entries after registration
};

template <class Op>
DirectKernel direct() {
  return {Direct<Op>::operator_name(), [] { return torch::CppFunction(TORCH_FN(Direct<Op>::call)); }, &registered<Op>(),
          &entries_at_registration<Op>()};
}

// Functional, in-place and out= forms: which of them reach the fallback
// depends on the accelerator (structured ops' functional forms are routed on
// cuda; on host they allocate on flagos and call the out= form).
std::vector<DirectKernel> direct_kernels() {
  namespace ops = at::_ops;
  // clang-format off: a table, three kernels a row.
  return {
      direct<ops::mm>(),         direct<ops::mm_out>(),         direct<ops::addmm>(),
      direct<ops::addmm_out>(),  direct<ops::bmm>(),            direct<ops::bmm_out>(),
      direct<ops::add_Tensor>(), direct<ops::add__Tensor>(),    direct<ops::add_out>(),
      direct<ops::sub_Tensor>(), direct<ops::sub_out>(),        direct<ops::mul_Tensor>(),
      direct<ops::mul__Tensor>(), direct<ops::mul_out>(),       direct<ops::div_Tensor>(),
      direct<ops::div_out>(),    direct<ops::pow_Tensor_Scalar>(), direct<ops::pow_Tensor_Scalar_out>(),
      direct<ops::mean_dim>(),   direct<ops::mean_out>(),       direct<ops::sum_dim_IntList>(),
      direct<ops::sum_IntList_out>(), direct<ops::rsqrt>(),     direct<ops::rsqrt_out>(),
      direct<ops::neg>(),        direct<ops::neg_out>(),        direct<ops::exp>(),
      direct<ops::exp_out>(),    direct<ops::silu>(),           direct<ops::silu_out>(),
      direct<ops::sigmoid>(),    direct<ops::sigmoid_out>(),    direct<ops::tanh>(),
      direct<ops::tanh_out>(),   direct<ops::relu>(),           direct<ops::cat>(),
      direct<ops::cat_out>(),    direct<ops::where_self>(),     direct<ops::where_self_out>(),
      direct<ops::fill__Scalar>(), direct<ops::_softmax>(),     direct<ops::_softmax_out>(),
      direct<ops::gelu>(),       direct<ops::gelu_out>(),       direct<ops::native_layer_norm>(),
      direct<ops::index_select>(), direct<ops::index_select_out>(), direct<ops::_native_multi_head_attention>(),
      direct<ops::cos>(),        direct<ops::cos_out>(),        direct<ops::sin>(),
      direct<ops::sin_out>(),    direct<ops::tril>(),           direct<ops::tril_out>(),
  };
  // clang-format on
}

// ---- compiled code's extern matmuls

// A flagos tensor whose own dispatch keys are flagos's plain ones (no
// Python subclass, no conjugate or negative bit, no functorch wrapper), and
// that autograd need not see.
bool plain_flagos_tensor(const at::Tensor& t, bool grad_mode) {
  static const c10::DispatchKeySet plain({c10::DispatchKey::PrivateUse1, c10::DispatchKey::AutogradPrivateUse1,
                                          c10::DispatchKey::ADInplaceOrView, c10::DispatchKey::AutocastPrivateUse1});
  return t.defined() && (t.key_set() | plain) == plain && !(grad_mode && t.requires_grad());
}

// A scalar argument (addmm's beta, alpha) asks nothing of those layers.
bool plain_flagos_tensor(const c10::Scalar&, bool) { return true; }

// Whether ADInplaceOrView's kernel runs in a thread with these keys: not in
// inference mode, nor below it (AutoDispatchBelowADInplaceOrView), which
// exclude its key.
bool in_place_or_view_runs(const c10::impl::LocalDispatchKeySet& tls) {
  return !tls.excluded_.has(c10::DispatchKey::ADInplaceOrView);
}

// Whether the dispatcher's layers above flagos's kernel would only pass an
// out= call down: no RecordFunction callbacks (the profiler's op events, an
// observer), no mode or transform (Python, functorch: keys included by the
// thread), plain flagos tensors that need no autograd, and an `out` whose
// version ADInplaceOrView may bump where it runs (the full dispatch raises
// the error for an inference tensor).
template <class... Inputs>
bool dispatch_passes_through(const c10::impl::LocalDispatchKeySet& tls, const at::Tensor& out,
                             const Inputs&... inputs) {
  // included_ holds the keys every thread includes (BackendSelect,
  // ADInplaceOrView) besides those a mode or transform adds.
  if (at::hasCallbacks() || !(tls.included_ - c10::default_included_set).empty()) return false;
  const bool grad_mode = c10::GradMode::is_enabled();
  if (!(plain_flagos_tensor(inputs, grad_mode) && ...) || !plain_flagos_tensor(out, grad_mode)) return false;
  return !in_place_or_view_runs(tls) || !out.is_inference();
}

// Whether flagos's kernels of the compiled matmuls are still the dispatcher's
// (compiled_matmul_kernels_unchanged), and how many calls took the full
// dispatch.
std::atomic<bool> matmul_kernels_unchanged{true};
std::atomic<int64_t> full_dispatches{0};

// An out= op called as compiled code calls it: Direct<Op> itself where the
// dispatcher would only pass the call down, then what ADInplaceOrView does
// to `out` where it runs; otherwise the full dispatch. `args` are the op's
// arguments before out=.
template <class Op, class... Args>
void call_out(at::Tensor& out, const Args&... args) {
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  if (!registered<Op>() || !matmul_kernels_unchanged.load(std::memory_order_relaxed) ||
      !dispatch_passes_through(tls, out, args...)) {
    full_dispatches.fetch_add(1, std::memory_order_relaxed);
    Op::call(args..., out);
    return;
  }
  Direct<Op>::call(args..., out);
  if (in_place_or_view_runs(tls)) out.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

void compiled_mm(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  call_out<at::_ops::mm_out>(out, self, mat2);
}

void compiled_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const c10::Scalar& beta,
                    const c10::Scalar& alpha, at::Tensor& out) {
  call_out<at::_ops::addmm_out>(out, self, mat1, mat2, beta, alpha);
}

void compiled_bmm(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  call_out<at::_ops::bmm_out>(out, self, mat2);
}

template <class Op>
bool unchanged_since_registration() {
  return !registered<Op>() || flagos_entries(Direct<Op>::operator_name()) == entries_at_registration<Op>();
}

bool compiled_matmul_kernels_unchanged() {
  namespace ops = at::_ops;
  bool unchanged = unchanged_since_registration<ops::mm_out>() && unchanged_since_registration<ops::addmm_out>() &&
                   unchanged_since_registration<ops::bmm_out>();
  matmul_kernels_unchanged.store(unchanged, std::memory_order_relaxed);
  return unchanged;
}

int64_t compiled_matmul_full_dispatches() { return full_dispatches.load(std::memory_order_relaxed); }

std::pair<int64_t, int64_t> compute_view_reuses() {
  return {view_reuses().kept_with_output, view_reuses().thread_view};
}

std::set<std::string> register_direct_kernels(torch::Library& lib,
                                              const std::function<bool(const c10::OperatorHandle&)>& reaches_fallback) {
  std::set<std::string> registered;
  for (const DirectKernel& kernel : direct_kernels()) {
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(kernel.name);
    if (!op || !reaches_fallback(*op)) continue;
    std::string name = c10::toString(kernel.name);  // "aten::add.Tensor"
    lib.impl(name.c_str(), kernel.make());
    *kernel.registered = true;
    *kernel.entries = flagos_entries(kernel.name);
    registered.insert(name);
  }
  return registered;
}

}  // namespace flagos
