// The flagos c10d backend (flagos_backend.h). Every collective:
//   1. views each flagos tensor as a tensor of the compute device over the
//      same memory (CPU for host, CUDA for cuda; the view keeps the flagos
//      storage alive while the engine holds it), CPU tensors as they are;
//   2. runs the engine's collective on the views, on the current flagos
//      stream (for cuda, NCCL orders itself after the current CUDA stream,
//      which ComputeStreamGuard makes the flagos stream);
//   3. returns a Work whose result and future hold the flagos tensors.
#include "flagos_backend.h"

#include <Python.h>

#include <ATen/core/ivalue.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <optional>
#include <utility>
#include <vector>

#include "../aten/compute_views.h"
#include "../runtime/runtime.h"

namespace flagos {
namespace {

// A compute-device tensor over a flagos tensor's memory that keeps the
// flagos storage alive (the engine may hold it past the call).
at::Tensor owning_compute_view(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "flagos: torch.distributed got a ", t.layout(),
              " flagos tensor; only strided tensors are supported");
  const c10::Device device = compute_device(t.device().index());
  c10::Storage storage = t.storage();
  void* data = storage.unsafeGetStorageImpl()->data_ptr().get();
  c10::DataPtr alias(
      data, new c10::Storage(storage), [](void* keep) { delete static_cast<c10::Storage*>(keep); }, device);
  c10::Storage view_storage(c10::Storage::use_byte_size_t(), storage.nbytes(), std::move(alias), nullptr,
                            /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(view_storage), compute_keys(), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return at::Tensor(std::move(impl));
}

// The views of one collective call and the flagos tensors they stand for.
class Call {
 public:
  explicit Call(const char* name) : name_(name) {}

  at::Tensor view(const at::Tensor& t) {
    if (!t.defined()) return t;
    if (!is_flagos(t)) {
      TORCH_CHECK(t.device().is_cpu(), "flagos: torch.distributed ", name_, " got a tensor on ", t.device(),
                  "; the flagos backend takes flagos and CPU tensors.");
      cpu_ = true;
      return t;
    }
    if (index_ && *index_ != t.device().index())
      TORCH_CHECK(false, "flagos: torch.distributed ", name_, " got tensors on flagos:", static_cast<int>(*index_),
                  " and ", t.device(), "; one collective runs on one device.");
    index_ = t.device().index();
    at::Tensor v = owning_compute_view(t);
    pairs_.emplace_back(v, t);
    return v;
  }

  std::vector<at::Tensor> view(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> out;
    out.reserve(ts.size());
    for (const at::Tensor& t : ts) out.push_back(view(t));
    return out;
  }

  std::vector<std::vector<at::Tensor>> view(const std::vector<std::vector<at::Tensor>>& lists) {
    std::vector<std::vector<at::Tensor>> out;
    out.reserve(lists.size());
    for (const auto& ts : lists) out.push_back(view(ts));
    return out;
  }

  const char* name() const { return name_; }
  std::optional<c10::DeviceIndex> index() const { return index_; }
  bool mixed() const { return index_ && cpu_; }
  std::vector<std::pair<at::Tensor, at::Tensor>>& pairs() { return pairs_; }

 private:
  const char* name_;
  std::optional<c10::DeviceIndex> index_;
  bool cpu_ = false;
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs_;  // (compute view, flagos tensor)
};

// Replaces each view in an engine's result by the flagos tensor it stands for.
c10::IValue to_flagos(const c10::IValue& value, const std::vector<std::pair<at::Tensor, at::Tensor>>& pairs) {
  auto map = [&](const at::Tensor& t) {
    for (const auto& [view, original] : pairs)
      if (view.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return original;
    return t;
  };
  if (value.isTensor()) return map(value.toTensor());
  if (value.isTensorList()) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorVector()) out.push_back(map(t));
    return out;
  }
  if (value.isList()) {
    c10::impl::GenericList out(value.toList().elementType());
    for (const c10::IValue& v : value.toList()) out.push_back(to_flagos(v, pairs));
    return out;
  }
  return value;
}

// The engine's Work, answering with flagos tensors.
class FlagosWork final : public c10d::Work {
 public:
  FlagosWork(c10::intrusive_ptr<c10d::Work> engine_work, std::vector<std::pair<at::Tensor, at::Tensor>> pairs,
             std::vector<at::Tensor> results, c10::DeviceIndex index)
      : engine_work_(std::move(engine_work)), pairs_(std::move(pairs)), results_(std::move(results)), index_(index) {}

  bool isCompleted() override { return engine_work_->isCompleted(); }
  bool isSuccess() const override { return engine_work_->isSuccess(); }
  std::exception_ptr exception() const override { return engine_work_->exception(); }
  int sourceRank() const override { return engine_work_->sourceRank(); }
  std::vector<at::Tensor> result() override { return results_; }
  void abort() override { engine_work_->abort(); }

  // An engine with streams (NCCL) makes the *current* compute stream wait:
  // that must be the current flagos stream.
  void synchronize() override {
    ComputeStreamGuard on_flagos_stream(index_);
    engine_work_->synchronize();
  }

  bool wait(std::chrono::milliseconds timeout) override {
    ComputeStreamGuard on_flagos_stream(index_);
    return engine_work_->wait(timeout);
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    if (future_) return future_;
    c10::intrusive_ptr<c10::ivalue::Future> engine_future = engine_work_->getFuture();
    // On a compute device with streams, the future carries flagos events, so
    // that wait()/then() order flagos streams after the collective.
    std::vector<c10::Device> devices;
    if (compute_device_type() != c10::kCPU) devices.emplace_back(kDeviceType, index_);
    future_ = c10::make_intrusive<c10::ivalue::Future>(engine_future->elementType(), devices);
    auto future = future_;
    auto pairs = pairs_;
    const c10::DeviceIndex index = index_;
    engine_future->addCallback([future, pairs, index](c10::ivalue::Future& done) {
      if (done.hasError()) {
        future->setError(done.exception_ptr());
        return;
      }
      if (compute_device_type() != c10::kCPU) {
        // The callback runs on compute streams that wait for the collective;
        // the current flagos stream must wait for them before the flagos
        // future records its events.
        const c10::DeviceType compute = compute_device_type();
        const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(compute);
        c10::Event after_collective(compute);
        after_collective.record(impl->getStream(c10::Device(compute, index)));
        after_collective.block(*compute_stream(current_stream(index)));
      }
      future->markCompleted(to_flagos(done.value(), pairs));
    });
    return future_;
  }

 private:
  c10::intrusive_ptr<c10d::Work> engine_work_;
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs_;
  std::vector<at::Tensor> results_;
  c10::DeviceIndex index_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& ts : lists) out.insert(out.end(), ts.begin(), ts.end());
  return out;
}

class DistributedBackend final : public c10d::Backend {
 public:
  DistributedBackend(c10::intrusive_ptr<c10d::Backend> device_engine, c10::intrusive_ptr<c10d::Backend> cpu_engine,
                     int rank, int size)
      : Backend(rank, size), device_engine_(std::move(device_engine)), cpu_engine_(std::move(cpu_engine)) {
    TORCH_CHECK(device_engine_, "flagos: torch.distributed backend needs an engine for flagos tensors");
  }

  // Gloo's destructor joins its worker threads, and one of them may be freeing a finished work
  // whose thread-local state holds Python objects, which takes the GIL. Python frees a DDP
  // Reducer, which may hold the last reference to this backend, with the GIL held: let go of it
  // while the engines wait, or both threads wait for each other forever.
  ~DistributedBackend() override {
    PyThreadState* released = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
    device_engine_.reset();
    cpu_engine_.reset();
    if (released) PyEval_RestoreThread(released);
  }

  const std::string getBackendName() const override { return "flagos"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    Call call("broadcast");
    auto views = call.view(tensors);
    return run(call, tensors, [&](c10d::Backend& e) { return e.broadcast(views, opts); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    Call call("allreduce");
    auto views = call.view(tensors);
    return run(call, tensors, [&](c10d::Backend& e) { return e.allreduce(views, opts); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    Call call("allreduce_coalesced");
    auto views = call.view(tensors);
    return run(call, tensors, [&](c10d::Backend& e) { return e.allreduce_coalesced(views, opts); });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    Call call("reduce");
    auto views = call.view(tensors);
    return run(call, tensors, [&](c10d::Backend& e) { return e.reduce(views, opts); });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    Call call("allgather");
    auto out = call.view(outputs);
    auto in = call.view(inputs);
    return run(call, flatten(outputs), [&](c10d::Backend& e) { return e.allgather(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    Call call("_allgather_base");
    at::Tensor out = call.view(output), in = call.view(input);
    return run(call, {output}, [&](c10d::Backend& e) { return e._allgather_base(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    Call call("allgather_coalesced");
    auto out = call.view(outputs);
    auto in = call.view(inputs);
    return run(call, flatten(outputs), [&](c10d::Backend& e) { return e.allgather_coalesced(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    Call call("allgather_into_tensor_coalesced");
    auto out = call.view(outputs);
    auto in = call.view(inputs);
    return run(call, outputs, [&](c10d::Backend& e) { return e.allgather_into_tensor_coalesced(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    Call call("gather");
    auto out = call.view(outputs);
    auto in = call.view(inputs);
    return run(call, flatten(outputs), [&](c10d::Backend& e) { return e.gather(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    Call call("scatter");
    auto out = call.view(outputs);
    auto in = call.view(inputs);
    return run(call, outputs, [&](c10d::Backend& e) { return e.scatter(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    Call call("reduce_scatter");
    auto out = call.view(outputs);
    auto in = call.view(inputs);
    return run(call, outputs, [&](c10d::Backend& e) { return e.reduce_scatter(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    Call call("_reduce_scatter_base");
    at::Tensor out = call.view(output), in = call.view(input);
    return run(call, {output}, [&](c10d::Backend& e) { return e._reduce_scatter_base(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    Call call("reduce_scatter_tensor_coalesced");
    auto out = call.view(outputs);
    auto in = call.view(inputs);
    return run(call, outputs, [&](c10d::Backend& e) { return e.reduce_scatter_tensor_coalesced(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    Call call("alltoall_base");
    at::Tensor out = call.view(output), in = call.view(input);
    return run(call, {output},
               [&](c10d::Backend& e) { return e.alltoall_base(out, in, output_splits, input_splits, opts); });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    Call call("alltoall");
    auto out = call.view(outputs);
    auto in = call.view(inputs);
    return run(call, outputs, [&](c10d::Backend& e) { return e.alltoall(out, in, opts); });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    Call call("send");
    auto views = call.view(tensors);
    return run(call, tensors, [&](c10d::Backend& e) { return e.send(views, dst, tag); });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    Call call("recv");
    auto views = call.view(tensors);
    return run(call, tensors, [&](c10d::Backend& e) { return e.recv(views, src, tag); });
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    Call call("recvAnysource");
    auto views = call.view(tensors);
    return run(call, tensors, [&](c10d::Backend& e) { return e.recvAnysource(views, tag); });
  }

  // A barrier synchronises processes: the CPU engine's where there is one
  // (NCCL's barrier is an allreduce on a device it picks itself).
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    c10d::BarrierOptions engine_opts = opts;
    engine_opts.device = std::nullopt;
    engine_opts.device_ids = {};
    return (cpu_engine_ ? cpu_engine_ : device_engine_)->barrier(engine_opts);
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    TORCH_CHECK(cpu_engine_, "flagos: monitoredBarrier needs a CPU (Gloo) engine");
    cpu_engine_->monitoredBarrier(opts, wait_all_ranks);
  }

  void setSequenceNumberForGroup() override { device_engine_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return device_engine_->getSequenceNumberForGroup(); }

 private:
  template <class Launch>
  c10::intrusive_ptr<c10d::Work> run(Call& call, std::vector<at::Tensor> results, Launch&& launch) {
    TORCH_CHECK(!call.mixed(), "flagos: torch.distributed ", call.name(),
                " got flagos and CPU tensors together; one collective runs on one device.");
    if (!call.index()) {
      TORCH_CHECK(cpu_engine_, "flagos: torch.distributed ", call.name(),
                  " got CPU tensors and this flagos backend has no CPU engine; pass backend='cpu:gloo,flagos:flagos' "
                  "to init_process_group.");
      return launch(*cpu_engine_);
    }
    const c10::DeviceIndex index = *call.index();
    c10::DeviceGuard on_device(c10::Device(kDeviceType, index));
    ComputeStreamGuard on_flagos_stream(index);
    c10::intrusive_ptr<c10d::Work> work = launch(*device_engine_);
    // No Work: the engine has synchronised already (NCCL, for a blocking call: opts.asyncOp false
    // makes it order the current stream, the flagos stream, after the collective and return none;
    // torch.distributed then waits for nothing). Results are in place in the flagos tensors.
    if (!work) return work;
    return c10::make_intrusive<FlagosWork>(std::move(work), std::move(call.pairs()), std::move(results), index);
  }

  c10::intrusive_ptr<c10d::Backend> device_engine_;
  c10::intrusive_ptr<c10d::Backend> cpu_engine_;
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> make_distributed_backend(c10::intrusive_ptr<c10d::Backend> device_engine,
                                                           c10::intrusive_ptr<c10d::Backend> cpu_engine, int rank,
                                                           int size) {
  return c10::make_intrusive<DistributedBackend>(std::move(device_engine), std::move(cpu_engine), rank, size);
}

}  // namespace flagos
