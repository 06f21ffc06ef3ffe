// torch_fl._C: the Python face of the runtime. Thin: each function forwards to
// csrc/runtime; the torch.flagos API is built on these in torch_fl/.
#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <cstring>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#ifdef FLAGOS_WITH_DISTRIBUTED
#include <torch/csrc/utils/pybind.h>

#include "../distributed/flagos_backend.h"
#endif
#include "../aten/aten.h"
#include "../runtime/generator.h"
#include "../runtime/runtime.h"

namespace py = pybind11;

namespace {

py::tuple pack(const c10::Stream& s) {
  return py::make_tuple(s.id(), static_cast<int>(s.device_index()), static_cast<int>(s.device_type()));
}

c10::Stream unpack(int64_t stream_id, int device_index) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(flagos::kDeviceType, static_cast<c10::DeviceIndex>(device_index)),
                     stream_id);
}

py::dict properties(int index) {
  flagos_device_properties p = flagos::device_properties(static_cast<c10::DeviceIndex>(index));
  py::dict d;
  d["name"] = std::string(p.name);
  d["total_memory"] = p.total_memory;
  d["multi_processor_count"] = p.multi_processor_count;
  d["warp_size"] = p.warp_size;
  d["max_threads_per_block"] = p.max_threads_per_block;
  d["max_threads_per_multi_processor"] = p.max_threads_per_multi_processor;
  d["regs_per_multiprocessor"] = p.regs_per_multiprocessor;
  d["shared_memory_per_block"] = p.shared_memory_per_block;
  d["L2_cache_size"] = p.l2_cache_size;
  d["major"] = p.major;
  d["minor"] = p.minor;
  d["clock_rate_khz"] = p.clock_rate_khz;
  return d;
}

py::dict stats(int index) {
  flagos::DeviceStats s = flagos::memory_stats(static_cast<c10::DeviceIndex>(index));
  py::dict d;
  d["allocated"] = s.allocated;
  d["allocated_peak"] = s.allocated_peak;
  d["reserved"] = s.reserved;
  d["reserved_peak"] = s.reserved_peak;
  d["adopted"] = s.adopted;
  d["active_blocks"] = s.active_blocks;
  d["cached_blocks"] = s.cached_blocks;
  d["num_allocs"] = s.num_allocs;
  d["num_frees"] = s.num_frees;
  d["num_ooms"] = s.num_ooms;
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_device_mallocs"] = s.num_device_mallocs;
  return d;
}

// torch_fl._C.DeviceIndexError: an out-of-range flagos device index. An
// IndexError (what flagos always raised) and the RuntimeError -- on torch
// versions that have it, torch.AcceleratorError -- that cuda raises for an
// invalid device ordinal, so code written for either catches it.
PyObject* device_index_error = nullptr;  // lives as long as the interpreter

bool python_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Raised through torch's own error translation (python_error carries the
// Python exception), so it arrives unchanged from a flagos binding, a torch
// function or a kernel reached through the dispatcher.
void raise_device_index_error(const std::string& message) {
  if (device_index_error == nullptr || !python_usable()) TORCH_CHECK_INDEX(false, message);
  python_error error;
  {
    py::gil_scoped_acquire gil;
    PyErr_SetString(device_index_error, message.c_str());
    error.persist();
  }
  throw error;
}

PyObject* make_device_index_error() {
  py::object torch = py::module_::import("torch");
  py::object runtime_error =
      py::getattr(torch, "AcceleratorError", py::reinterpret_borrow<py::object>(PyExc_RuntimeError));
  py::tuple bases = py::make_tuple(py::reinterpret_borrow<py::object>(PyExc_IndexError), runtime_error);
  PyObject* cls = PyErr_NewExceptionWithDoc(
      "torch_fl._C.DeviceIndexError",
      "A flagos device index out of range: an IndexError, and the RuntimeError cuda raises for an invalid device.",
      bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  return cls;
}

// Compiled code's buffer allocation (empty_strided_flagos), once per buffer
// per call. A plain CPython function, as torch's _empty_strided_cuda is:
// pybind's conversion of two tuples into vectors costs about as much as the
// allocation itself.
bool int_list(PyObject* obj, c10::SmallVector<int64_t, 8>& out) {
  if (!PyTuple_Check(obj) && !PyList_Check(obj)) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  PyObject** items = PySequence_Fast_ITEMS(obj);
  out.resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!THPUtils_checkLong(items[i])) return false;
    out[i] = THPUtils_unpackLong(items[i]);
  }
  return true;
}

PyObject* empty_strided(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK(nargs == 3, "flagos: _empty_strided expects (size, stride, dtype), got ", nargs, " arguments");
  c10::SmallVector<int64_t, 8> size, stride;
  TORCH_CHECK(int_list(args[0], size) && int_list(args[1], stride),
              "flagos: _empty_strided expects a tuple of ints for size and for stride");
  TORCH_CHECK(size.size() == stride.size(), "flagos: _empty_strided got ", size.size(), " sizes and ", stride.size(),
              " strides");
  TORCH_CHECK(THPDtype_Check(args[2]), "flagos: _empty_strided expects a torch.dtype");
  return THPVariable_Wrap(at::detail::empty_strided_generic(size, stride, flagos::allocator(),
                                                            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                            reinterpret_cast<THPDtype*>(args[2])->scalar_type));
  END_HANDLE_TH_ERRORS
}

// A device index argument of the CPython functions below, as given.
int64_t index_value(PyObject* obj, const char* function) {
  TORCH_CHECK_TYPE(THPUtils_checkLong(obj), "flagos: ", function, " expects a device index (an int), got ",
                   Py_TYPE(obj)->tp_name);
  return THPUtils_unpackLong(obj);
}

// The same, checked against the machine's devices (an int beyond
// c10::DeviceIndex's range included).
c10::DeviceIndex device_index_arg(PyObject* obj, const char* function) {
  const int64_t index = index_value(obj, function);
  flagos::check_index(index);
  return static_cast<c10::DeviceIndex>(index);
}

// What compiled code passes to every kernel launch: the current flagos
// stream's handle, read at each launch (imported by the wrapper as
// get_raw_stream). A plain CPython function for the same reason.
PyObject* current_raw_stream(PyObject* /*module*/, PyObject* index) {
  HANDLE_TH_ERRORS
  flagos_stream stream = flagos::current_native_stream(device_index_arg(index, "_current_raw_stream"));
  return PyLong_FromUnsignedLongLong(reinterpret_cast<uintptr_t>(stream));
  END_HANDLE_TH_ERRORS
}

// What compiled code's device guard calls on entry and exit
// (torch.flagos._DeviceGuard), and set_device once per call: plain CPython
// functions too. _exchange_device returns the previous device, as
// torch._C._cuda_exchangeDevice does for CUDA; a negative index changes nothing.
PyObject* set_device(PyObject* /*module*/, PyObject* index) {
  HANDLE_TH_ERRORS
  flagos::set_device(device_index_arg(index, "_set_device"));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* exchange_device(PyObject* /*module*/, PyObject* index) {
  HANDLE_TH_ERRORS
  const int64_t wanted = index_value(index, "_exchange_device");
  if (wanted < 0) return PyLong_FromLong(-1);
  flagos::check_index(wanted);
  return PyLong_FromLong(flagos::exchange_device(static_cast<c10::DeviceIndex>(wanted)));
  END_HANDLE_TH_ERRORS
}

// Compiled code's extern matmuls on flagos: `mm(a, b, out=buf)`,
// `addmm(bias, a, b, beta=1, alpha=1, out=buf)`, `bmm(a, b, out=buf)`, as
// inductor's wrapper writes them for extern_kernels.mm/addmm/bmm. Plain
// CPython functions, one per op: the argument parsing of torch.mm and its
// kind is a good part of a small matmul's host cost.
at::Tensor tensor_arg(PyObject* obj, const char* function, const char* name) {
  TORCH_CHECK_TYPE(THPVariable_Check(obj), "flagos: ", function, " expects a tensor for ", name, ", got ",
                   Py_TYPE(obj)->tp_name);
  return THPVariable_Unpack(obj);
}

c10::Scalar scalar_arg(PyObject* obj, const char* function, const char* name) {
  if (PyBool_Check(obj)) return c10::Scalar(obj == Py_True);
  if (THPUtils_checkLong(obj)) return c10::Scalar(static_cast<int64_t>(THPUtils_unpackLong(obj)));
  TORCH_CHECK_TYPE(PyFloat_Check(obj), "flagos: ", function, " expects a number for ", name, ", got ",
                   Py_TYPE(obj)->tp_name);
  return c10::Scalar(PyFloat_AS_DOUBLE(obj));
}

// The call's arguments: `positional` tensors, then keywords (out= required;
// beta=, alpha= where the op has them).
struct MatmulCall {
  c10::SmallVector<at::Tensor, 3> tensors;
  at::Tensor out;
  c10::Scalar beta = 1, alpha = 1;
};

MatmulCall parse_matmul(const char* function, Py_ssize_t positional, bool scaled, PyObject* const* args,
                        Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"self", "mat1", "mat2"};
  TORCH_CHECK_TYPE(nargs == positional, "flagos: ", function, " takes ", positional,
                   " positional tensors and out=, got ", nargs, " positional arguments");
  MatmulCall call;
  for (Py_ssize_t i = 0; i < nargs; ++i)
    call.tensors.push_back(tensor_arg(args[i], function, positional == 3 ? names[i] : names[i * 2]));
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    if (key == nullptr) throw python_error();
    PyObject* value = args[nargs + k];
    if (std::strcmp(key, "out") == 0) call.out = tensor_arg(value, function, "out");
    else if (scaled && std::strcmp(key, "beta") == 0) call.beta = scalar_arg(value, function, "beta");
    else if (scaled && std::strcmp(key, "alpha") == 0) call.alpha = scalar_arg(value, function, "alpha");
    else TORCH_CHECK_TYPE(false, "flagos: ", function, " got an unexpected keyword argument '", key, "'");
  }
  TORCH_CHECK_TYPE(call.out.defined(), "flagos: ", function, " needs out= (compiled code's output buffer)");
  return call;
}

// One call of an entry point: its arguments parsed, then `run` without the
// GIL, as torch.mm's binding runs the op.
PyObject* run_matmul(const char* function, Py_ssize_t positional, bool scaled, PyObject* const* args, Py_ssize_t nargs,
                     PyObject* kwnames, void (*run)(MatmulCall&)) {
  HANDLE_TH_ERRORS
  MatmulCall call = parse_matmul(function, positional, scaled, args, nargs, kwnames);
  {
    py::gil_scoped_release no_gil;
    run(call);
  }
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* compiled_mm(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return run_matmul("_compiled_mm", 2, false, args, nargs, kwnames,
                    [](MatmulCall& c) { flagos::compiled_mm(c.tensors[0], c.tensors[1], c.out); });
}

PyObject* compiled_addmm(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return run_matmul("_compiled_addmm", 3, true, args, nargs, kwnames, [](MatmulCall& c) {
    flagos::compiled_addmm(c.tensors[0], c.tensors[1], c.tensors[2], c.beta, c.alpha, c.out);
  });
}

PyObject* compiled_bmm(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return run_matmul("_compiled_bmm", 2, false, args, nargs, kwnames,
                    [](MatmulCall& c) { flagos::compiled_bmm(c.tensors[0], c.tensors[1], c.out); });
}

// A METH_FASTCALL function as the PyCFunction a PyMethodDef holds.
template <auto function>
PyCFunction as_pycfunction() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(function));
}

PyMethodDef compiled_mm_def = {"_compiled_mm", as_pycfunction<compiled_mm>(), METH_FASTCALL | METH_KEYWORDS,
                               "extern_kernels.mm(a, b, out=buf) of compiled code on flagos."};
PyMethodDef compiled_addmm_def = {
    "_compiled_addmm", as_pycfunction<compiled_addmm>(), METH_FASTCALL | METH_KEYWORDS,
    "extern_kernels.addmm(bias, a, b, beta=, alpha=, out=buf) of compiled code on flagos."};
PyMethodDef compiled_bmm_def = {"_compiled_bmm", as_pycfunction<compiled_bmm>(), METH_FASTCALL | METH_KEYWORDS,
                                "extern_kernels.bmm(a, b, out=buf) of compiled code on flagos."};

PyMethodDef current_raw_stream_def = {"_current_raw_stream", current_raw_stream, METH_O,
                                      "The current flagos stream's handle on a device, for compiled code."};
PyMethodDef set_device_def = {"_set_device", set_device, METH_O, "Makes a flagos device current."};
PyMethodDef exchange_device_def = {"_exchange_device", exchange_device, METH_O,
                                   "Makes a flagos device current; returns the previous one (-1: no change)."};

PyMethodDef empty_strided_def = {"_empty_strided", as_pycfunction<empty_strided>(), METH_FASTCALL,
                                 "A flagos tensor of (size, stride, dtype), for compiled code."};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "flagos runtime (see torch_fl)";
  m.attr("abi_version") = FLAGOS_ABI_VERSION;
  device_index_error = make_device_index_error();
  m.attr("DeviceIndexError") = py::reinterpret_borrow<py::object>(device_index_error);
  flagos::set_index_error_raiser(&raise_device_index_error);
  m.def("_accelerator_name", [] { return std::string(flagos::accelerator().name); });
  m.def("_available_accelerators", &flagos::available_accelerators);
  m.def("_route_to_compute_kernels", &flagos::route_to_compute_kernels);
  m.def("_direct_kernels", &flagos::direct_kernel_names);
  m.def("_compiled_matmul_kernels_unchanged", &flagos::compiled_matmul_kernels_unchanged);
  m.def("_compiled_matmul_full_dispatches", &flagos::compiled_matmul_full_dispatches);
  m.def("_compute_view_reuses", &flagos::compute_view_reuses);
  m.def("_register_rnn_cells", &flagos::register_rnn_cells);
  m.def("_compute_device", [] { return std::string(flagos::accelerator().compute_device); });
  m.def("_device_count", [] { return static_cast<int>(flagos::device_count()); });
  // What torch.flagos._lazy_init does, as torch.cuda's does for CUDA: ATen's
  // context asks an accelerator's hooks (is_pinned(), ...) only once it is
  // initialised there.
  m.def("_lazy_init", [] { at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1); });
  m.def("_current_device", [] { return static_cast<int>(flagos::current_device()); });
  m.def("_check_index", [](int64_t i) { flagos::check_index(i); });
  m.def("_synchronize", [](int i) {
    flagos::check_index(static_cast<c10::DeviceIndex>(i));
    py::gil_scoped_release no_gil;
    flagos::check(flagos::accelerator().device_synchronize(i), "device_synchronize");
  });
  m.def("_get_device_properties", &properties);
  m.def("_mem_get_info", [](int i) {
    auto [free_bytes, total] = flagos::memory_info(static_cast<c10::DeviceIndex>(i));
    return py::make_tuple(free_bytes, total);
  });

  m.def("_memory_stats", &stats);
  m.def("_reset_peak_memory_stats", [](int i) { flagos::reset_peak_stats(static_cast<c10::DeviceIndex>(i)); });
  m.def("_reset_accumulated_memory_stats",
        [](int i) { flagos::reset_accumulated_stats(static_cast<c10::DeviceIndex>(i)); });
  m.def("_empty_cache", &flagos::empty_cache);

  // Streams travel as (stream_id, device_index, device_type), torch.Stream's own fields.
  m.def("_current_stream", [](int i) { return pack(flagos::current_stream(static_cast<c10::DeviceIndex>(i))); });
  m.def("_default_stream", [](int i) {
    flagos::check_index(static_cast<c10::DeviceIndex>(i));
    return pack(c10::Stream(c10::Stream::DEFAULT, c10::Device(flagos::kDeviceType, static_cast<c10::DeviceIndex>(i))));
  });
  m.def("_set_stream", [](int64_t id, int i) { flagos::exchange_stream(unpack(id, i)); });
  m.def("_raw_stream",
        [](int64_t id, int i) { return reinterpret_cast<uintptr_t>(flagos::native_stream(unpack(id, i))); });

  // The flagos stream of an accelerator stream handle (torch_fl/compile/cuda_graphs.py: the capture stream).
  m.def("_stream_from_native", [](uintptr_t handle, int i) {
    return pack(flagos::stream_of_native(static_cast<c10::DeviceIndex>(i), reinterpret_cast<flagos_stream>(handle)));
  });
  // Calls fn(arg) with the compute device's current device and stream switched to flagos's current
  // stream on flagos:i (a CUDA graph replay launches on CUDA's current stream): one call per replay
  // instead of Python's torch.cuda.device and torch.cuda.stream context managers.
  m.def("_on_compute_stream", [](int i, const py::function& fn, const py::object& arg) {
    auto index = static_cast<c10::DeviceIndex>(i);
    flagos::check_index(index);
    c10::DeviceGuard on_device(flagos::compute_device(index));
    flagos::ComputeStreamGuard on_stream(index);
    return fn(arg);
  });
  // Copies of a replay's outputs (tensors; other items as they are), in one call.
  m.def("_copies_of_outputs", [](const py::sequence& outputs) {
    py::list copies;
    for (const py::handle& item : outputs) {
      if (THPVariable_Check(item.ptr())) copies.append(flagos::copy_of_output(THPVariable_Unpack(item.ptr())));
      else copies.append(item);
    }
    return copies;
  });
  m.def("_allocate_from_compute_device", &flagos::set_allocate_from_compute_device,
        "Route this thread's flagos allocations to the compute device's allocator; returns the previous setting.");

  // The plain CPython functions of compiled code's hot path (above). _empty_strided
  // is what compiled code allocates its buffers with (torch_fl/compile: inductor's
  // generic empty_strided costs Python argument parsing and a dispatch per buffer);
  // on the current device, as the generated code runs under its guard. Their
  // module is named, so that profiles show them as torch_fl._C's.
  py::str module_name("torch_fl._C");
  for (PyMethodDef* def : {&current_raw_stream_def, &set_device_def, &exchange_device_def, &compiled_mm_def,
                           &compiled_addmm_def, &compiled_bmm_def, &empty_strided_def})
    m.add_object(def->ml_name, py::reinterpret_steal<py::object>(PyCFunction_NewEx(def, nullptr, module_name.ptr())));

#ifdef FLAGOS_WITH_DISTRIBUTED
  // torch_fl.distributed's c10d backend over existing engines (ProcessGroupGloo, ProcessGroupNCCL).
  m.def(
      "_distributed_backend",
      [](c10::intrusive_ptr<c10d::Backend> device_engine, std::optional<c10::intrusive_ptr<c10d::Backend>> cpu_engine,
         int rank, int size) {
        return flagos::make_distributed_backend(
            std::move(device_engine), cpu_engine ? *cpu_engine : c10::intrusive_ptr<c10d::Backend>(), rank, size);
      },
      py::arg("device_engine"), py::arg("cpu_engine"), py::arg("rank"), py::arg("size"));
#endif

  m.def("_default_generator", [](int i) {
    const at::Generator& g = flagos::default_generator(static_cast<c10::DeviceIndex>(i));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(g));
  });
}
