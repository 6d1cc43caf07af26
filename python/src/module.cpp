// The _C extension of executorch_numpy_runtime: Program, Method, MethodMeta and TensorInfo over the etnp C++ API,
// plus the registry and version functions the pure-Python layer (__init__.py) builds on.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "binding.h"
#include "etnp/kernel.h"
#include "etnp/threadpool.h"

namespace etnp::python {

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out.empty() ? "none" : out;
}

std::string tuple_string(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  if (v.size() == 1) os << ",";
  os << ")";
  return os.str();
}

std::string dynamism_name(ShapeDynamism d) {
  switch (d) {
    case ShapeDynamism::Static: return "static";
    case ShapeDynamism::DynamicBound: return "dynamic_bound";
    case ShapeDynamism::DynamicUnbound: return "dynamic_unbound";
  }
  return "static";
}

py::object value_to_python(const Value& v) {
  if (std::holds_alternative<std::monostate>(v)) return py::none();
  if (const auto* n = std::get_if<int64_t>(&v)) return py::int_(*n);
  if (const auto* x = std::get_if<double>(&v)) return py::float_(*x);
  if (const auto* b = std::get_if<bool>(&v)) return py::bool_(*b);
  if (const auto* s = std::get_if<std::string>(&v)) return py::str(*s);
  return py::none();
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    PyErr_SetFromErrnoWithFilename(PyExc_OSError, path.c_str());
    throw py::error_already_set();
  }
  const bool ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) {
    PyErr_SetFromErrnoWithFilename(PyExc_OSError, path.c_str());
    throw py::error_already_set();
  }
}

}  // namespace

// --- Method -----------------------------------------------------------------------------------------------------

PyMethod::PyMethod(std::shared_ptr<ProgramState> state, std::unique_ptr<Method> method)
    : state_(std::move(state)), method_(std::move(method)) {
  bound_.resize(method_->num_outputs());
}

py::list PyMethod::execute(py::handle self, py::handle inputs, bool clone_outputs) {
  PreparedInputs prepared = prepare_inputs(meta(), inputs);

  struct Output {
    Value value;
    std::unique_ptr<void, FreeDeleter> copy;  // clone_outputs: the output's bytes, handed to numpy
    std::shared_ptr<PyRef> bound;             // the caller's array the output was written to (set_output)
  };
  std::vector<Output> outputs;
  {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    const uint64_t start = now_ns();
    std::vector<Value> results;
    try {
      results = method_->execute(prepared.values);
    } catch (...) {
      method_->clear_profile_events();
      throw;
    }
    const uint64_t end = now_ns();
    if (state_->recorder) {
      state_->recorder->record_execute(method_->profile_events(), start, end, results);
      method_->clear_profile_events();
    }
    outputs.resize(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
      Output& out = outputs[i];
      out.value = std::move(results[i]);
      auto* tensor = std::get_if<TensorRef>(&out.value);
      if (tensor == nullptr) continue;
      if (clone_outputs) {
        // Copied while the method is locked: the next call may overwrite the method's memory.
        const size_t nbytes = tensor->nbytes();
        out.copy.reset(std::malloc(nbytes == 0 ? 1 : nbytes));
        if (!out.copy) throw std::bad_alloc();
        if (nbytes != 0) std::memcpy(out.copy.get(), tensor->data, nbytes);
        tensor->data = out.copy.get();
      } else {
        out.bound = bound_[i];
      }
    }
  }

  py::list result;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Output& out = outputs[i];
    const auto* tensor = std::get_if<TensorRef>(&out.value);
    if (tensor == nullptr) {
      result.append(value_to_python(out.value));
      continue;
    }
    py::dtype dtype;
    try {
      dtype = numpy_dtype_of(tensor->dtype);
    } catch (const Error& e) {
      ErrorContext c;
      c.method = meta().name;
      throw Error(e.kind(), "output " + std::to_string(i) + ": " + e.detail(), c);
    }
    std::vector<py::ssize_t> shape(tensor->sizes.begin(), tensor->sizes.end());
    std::vector<py::ssize_t> strides = byte_strides(tensor->sizes, tensor->dim_order, element_size(tensor->dtype));
    if (tensor->numel() == 0) {
      result.append(py::array(dtype, shape));
      continue;
    }
    if (clone_outputs) {
      void* data = out.copy.release();
      py::capsule owner(data, [](void* p) { std::free(p); });
      result.append(py::array(dtype, shape, strides, data, owner));
    } else {
      // A read-only view of the method's memory, valid until the next call of this method. Its base keeps that
      // memory alive: the caller's array bound with set_output, an input array the output aliases (a method
      // that returns an input it does not copy), or else the method itself.
      py::handle base = out.bound ? py::handle(out.bound->get()) : self;
      if (!out.bound) {
        for (const py::object& kept : prepared.keep_alive) {
          const auto& in = py::reinterpret_borrow<py::array>(kept);
          const auto* begin = static_cast<const uint8_t*>(in.data());
          const auto* p = static_cast<const uint8_t*>(tensor->data);
          if (p >= begin && p < begin + in.nbytes()) base = kept;
        }
      }
      py::array view(dtype, shape, strides, tensor->data, base);
      view.attr("setflags")(py::arg("write") = false);
      result.append(view);
    }
  }
  return result;
}

void PyMethod::set_output(py::handle obj, size_t index) {
  const MethodMeta& m = meta();
  const std::string which = "output " + std::to_string(index) + " of method '" + m.name + "'";
  if (index >= m.outputs.size()) {
    throw py::index_error("method '" + m.name + "' has " + std::to_string(m.outputs.size()) + " outputs, there is no output " +
                          std::to_string(index));
  }
  if (const std::string& refusal = method_->output_buffer_refusal(index); !refusal.empty()) {
    throw py::value_error(which + " " + refusal + ", so it cannot be redirected to caller memory");
  }
  const ValueInfo& info = m.outputs[index];
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error("set_output expects a numpy array, got " + std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  py::array array = py::reinterpret_borrow<py::array>(obj);
  const TensorInfo& t = info.tensor;
  std::vector<int64_t> sizes(array.shape(), array.shape() + array.ndim());
  const std::string expected = std::string(scalar_type_name(t.dtype)) + " " + tuple_string(t.sizes);
  std::optional<ScalarType> given = scalar_type_of(array.dtype());
  if (given == ScalarType::UInt16 && t.dtype == ScalarType::BFloat16) given = ScalarType::BFloat16;
  if (given != t.dtype || !py::bool_(array.dtype().attr("isnative"))) {
    throw py::value_error(which + " is " + expected + ", the array is " + describe_array(array) + " (wrong dtype)");
  }
  if (sizes != t.sizes) {
    throw py::value_error(which + " is " + expected + (t.dynamism == ShapeDynamism::Static ? "" : " at most") +
                          ", the array is " + describe_array(array) + " (wrong size)");
  }
  std::vector<py::ssize_t> strides(array.strides(), array.strides() + array.ndim());
  const std::vector<py::ssize_t> wanted = byte_strides(t.sizes, t.dim_order, element_size(t.dtype));
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1 && strides[d] != wanted[d]) {
      throw py::value_error(which + " needs an array laid out contiguously in dim order " +
                            tuple_string(std::vector<int64_t>(t.dim_order.begin(), t.dim_order.end())) +
                            ", the array is " + describe_array(array) + " (non-contiguous)");
    }
  }
  if (!array.writeable()) throw py::value_error(which + ": the array is read-only");
  void* data = array.mutable_data();
  const size_t nbytes = static_cast<size_t>(array.nbytes());
  auto ref = std::make_shared<PyRef>(py::reinterpret_borrow<py::object>(array));
  std::shared_ptr<PyRef> previous;
  {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    method_->set_output_buffer(index, data, nbytes);
    previous = std::move(bound_[index]);
    bound_[index] = std::move(ref);
  }
  // `previous` (the array bound before) is released here, with the GIL held.
}

// --- Program ----------------------------------------------------------------------------------------------------

PyProgram::PyProgram(std::shared_ptr<ProgramState> state) : state_(std::move(state)) {
  names_ = state_->program.method_names();
}

void PyProgram::require_method(const std::string& name) const {
  for (const auto& n : names_) {
    if (n == name) return;
  }
  throw MethodNotFound(name, "no method named '" + name + "' in the program; it has " + join_names(names_));
}

std::shared_ptr<PyMethod> PyProgram::load_method(const std::string& name) {
  require_method(name);
  py::gil_scoped_release nogil;
  std::lock_guard lock(cache_mutex_);
  if (auto it = cache_.find(name); it != cache_.end()) return it->second;
  const uint64_t start = now_ns();
  std::unique_ptr<Method> method = state_->program.load_method(name);
  if (state_->recorder) state_->recorder->record_load(start, now_ns());
  auto wrapped = std::make_shared<PyMethod>(state_, std::move(method));
  cache_.emplace(name, wrapped);
  return wrapped;
}

MethodMeta PyProgram::metadata(const std::string& name) const {
  require_method(name);
  return state_->program.method_meta(name);
}

void PyProgram::write_etdump_result_to_file(const std::string& etdump_path, const std::optional<std::string>& debug_path) {
  if (!state_->recorder) {
    throw std::runtime_error("no ETDump was recorded: load the program with enable_etdump=True");
  }
  auto [etdump, debug] = state_->recorder->take();
  write_file(etdump_path, etdump);
  if (debug_path) write_file(*debug_path, debug);
}

// --- Loading ----------------------------------------------------------------------------------------------------

namespace {

/// A caller's buffer (bytes, bytearray, memoryview, ...) exported for as long as the program uses it.
struct BufferHold {
  Py_buffer view{};
  ~BufferHold() {
    py::gil_scoped_acquire gil;
    PyBuffer_Release(&view);
  }
};

LoadOptions make_options(Verification verification, bool enable_etdump, const std::vector<std::string>& data_paths,
                         const py::object& backend_options) {
  LoadOptions options;
  options.verification = verification;
  options.data_files = data_paths;
  options.enable_profiling = enable_etdump;
  if (!backend_options.is_none()) {
    for (auto [backend, values] : py::cast<py::dict>(backend_options)) {
      BackendOptions converted;
      for (auto [key, value] : py::cast<py::dict>(values)) {
        const std::string k = py::cast<std::string>(key);
        if (py::isinstance<py::bool_>(value)) {
          converted[k] = value.cast<bool>();
        } else if (py::isinstance<py::int_>(value)) {
          converted[k] = value.cast<int64_t>();
        } else if (py::isinstance<py::str>(value)) {
          converted[k] = value.cast<std::string>();
        } else {
          throw py::type_error("backend option '" + k + "' must be a bool, int or str, got " +
                               std::string(py::str(py::type::of(value).attr("__name__"))));
        }
      }
      options.backend_options[py::cast<std::string>(backend)] = std::move(converted);
    }
  }
  return options;
}

std::shared_ptr<PyProgram> finish(Program program, bool enable_etdump, size_t debug_buffer_size) {
  auto state = std::make_shared<ProgramState>(std::move(program));
  if (enable_etdump) state->recorder = std::make_unique<EtdumpRecorder>(debug_buffer_size);
  return std::make_shared<PyProgram>(std::move(state));
}

std::shared_ptr<PyProgram> load_program_file(const std::string& path, Verification verification, bool enable_etdump,
                                             size_t debug_buffer_size, const std::vector<std::string>& data_paths,
                                             const py::object& backend_options) {
  LoadOptions options = make_options(verification, enable_etdump, data_paths, backend_options);
  py::gil_scoped_release nogil;
  return finish(Program::load_file(path, options), enable_etdump, debug_buffer_size);
}

std::shared_ptr<PyProgram> load_program_buffer(const py::object& buffer, Verification verification, bool enable_etdump,
                                               size_t debug_buffer_size, const std::vector<std::string>& data_paths,
                                               const py::object& backend_options) {
  LoadOptions options = make_options(verification, enable_etdump, data_paths, backend_options);
  auto hold = std::make_shared<BufferHold>();
  if (PyObject_GetBuffer(buffer.ptr(), &hold->view, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  std::span<const uint8_t> bytes(static_cast<const uint8_t*>(hold->view.buf), static_cast<size_t>(hold->view.len));
  py::gil_scoped_release nogil;
  return finish(Program::load_buffer(bytes, hold, options), enable_etdump, debug_buffer_size);
}

std::shared_ptr<Backend> backend_or_throw(const std::string& name) {
  std::shared_ptr<Backend> backend = find_backend(name);
  if (!backend) {
    ErrorContext c;
    c.backend = name;
    throw Error(ErrorKind::BackendNotAvailable,
                "no backend named '" + name + "' is registered (registered: " + join_names(registered_backend_names()) + ")",
                c);
  }
  return backend;
}

py::object option_to_python(const BackendOptionValue& v) {
  if (const auto* b = std::get_if<bool>(&v)) return py::bool_(*b);
  if (const auto* n = std::get_if<int64_t>(&v)) return py::int_(*n);
  return py::str(std::get<std::string>(v));
}

std::string tensor_info_repr(const TensorInfo& t) {
  std::ostringstream os;
  os << "TensorInfo(sizes=" << tuple_string(t.sizes) << ", dtype=" << scalar_type_name(t.dtype)
     << ", dim_order=" << tuple_string(std::vector<int64_t>(t.dim_order.begin(), t.dim_order.end()))
     << ", dynamism=" << dynamism_name(t.dynamism) << ", is_memory_planned=" << (t.memory_planned ? "True" : "False")
     << ", nbytes=" << t.nbytes << ")";
  return os.str();
}

const TensorInfo& tensor_meta(const MethodMeta& m, const std::vector<ValueInfo>& values, size_t index, const char* what) {
  if (index >= values.size()) {
    throw py::index_error("method '" + m.name + "' has " + std::to_string(values.size()) + " " + what + "s, there is no " +
                          what + " " + std::to_string(index));
  }
  if (values[index].tag != Tag::Tensor) {
    throw py::value_error(std::string(what) + " " + std::to_string(index) + " of method '" + m.name + "' is " +
                          tag_name(values[index].tag) + ", not a tensor");
  }
  return values[index].tensor;
}

py::object* g_scalar_type_class = nullptr;  // leaked on purpose, like the error classes

void set_scalar_type_class(py::object cls) {
  if (g_scalar_type_class == nullptr) g_scalar_type_class = new py::object();
  *g_scalar_type_class = std::move(cls);
}

py::object scalar_type_object(ScalarType t) {
  py::int_ code(static_cast<int>(t));
  if (g_scalar_type_class != nullptr && *g_scalar_type_class) return (*g_scalar_type_class)(code);
  return code;
}

std::string value_info_repr(const ValueInfo& v) {
  if (v.tag == Tag::Tensor) return tensor_info_repr(v.tensor);
  return tag_name(v.tag);
}

}  // namespace

}  // namespace etnp::python

using namespace etnp;
using namespace etnp::python;

PYBIND11_MODULE(_C, m) {
  m.doc() = "The compiled core of executorch_numpy_runtime (use the package's public API instead).";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise_error(e);
    } catch (const MethodNotFound& e) {
      raise_method_not_found(e);
    }
  });

  py::enum_<Verification>(m, "Verification", "How much of a program is checked when it is loaded.")
      .value("Minimal", Verification::Minimal, "Header, identifier and FlatBuffers structure.")
      .value("InternalConsistency", Verification::InternalConsistency,
             "Also every index, offset, size and tensor of every method (the default).");

  // ScalarType is a Python IntEnum (made by __init__.py from these names) so that it compares equal to ints.
  m.def("_scalar_type_names", [] {
    py::list names;
    for (int i = 0; i < kNumScalarTypes; ++i) {
      names.append(py::make_tuple(std::string(scalar_type_enumerator_name(static_cast<ScalarType>(i))), i));
    }
    return names;
  });
  m.def("_set_scalar_type_class", [](py::object cls) { set_scalar_type_class(std::move(cls)); });

  py::class_<TensorInfo>(m, "TensorInfo", "dtype, shape and memory layout of one tensor input or output.")
      .def("sizes", [](const TensorInfo& t) { return py::tuple(py::cast(t.sizes)); },
           "The shape (the upper bounds of a dynamic tensor).")
      .def("dtype", [](const TensorInfo& t) { return scalar_type_object(t.dtype); }, "The element type (a ScalarType).")
      .def("numpy_dtype", [](const TensorInfo& t) { return numpy_dtype_of(t.dtype, ErrorKind::InvalidArgument); },
           "The numpy dtype of arrays for this tensor.")
      .def("dim_order", [](const TensorInfo& t) { return py::tuple(py::cast(std::vector<int>(t.dim_order.begin(), t.dim_order.end()))); },
           "The memory order of the dimensions, outermost first: (0, 1, 2, 3) contiguous, (0, 2, 3, 1) channels-last.")
      .def("nbytes", [](const TensorInfo& t) { return t.nbytes; }, "Bytes of the tensor at its full (upper-bound) shape.")
      .def("is_memory_planned", [](const TensorInfo& t) { return t.memory_planned; },
           "True when the tensor lives in the method's planned memory (or is a constant).")
      .def("dynamism", [](const TensorInfo& t) { return dynamism_name(t.dynamism); },
           "'static', 'dynamic_bound' or 'dynamic_unbound'.")
      .def("name", [](const TensorInfo& t) { return t.name; }, "Fully qualified name, when the program records one.")
      .def("__repr__", &tensor_info_repr);

  py::class_<MethodMeta>(m, "MethodMeta", "What a method takes and returns, and what it needs, without loading it.")
      .def("name", [](const MethodMeta& mm) { return mm.name; })
      .def("num_inputs", [](const MethodMeta& mm) { return mm.inputs.size(); })
      .def("num_outputs", [](const MethodMeta& mm) { return mm.outputs.size(); })
      .def("input_tag", [](const MethodMeta& mm, size_t i) {
             if (i >= mm.inputs.size()) throw py::index_error("no input " + std::to_string(i));
             return std::string(tag_name(mm.inputs[i].tag));
           }, py::arg("index"), "The kind of input `index`: 'Tensor', 'Int', 'Double', 'Bool', 'String', 'None', ...")
      .def("output_tag", [](const MethodMeta& mm, size_t i) {
             if (i >= mm.outputs.size()) throw py::index_error("no output " + std::to_string(i));
             return std::string(tag_name(mm.outputs[i].tag));
           }, py::arg("index"))
      .def("input_tensor_meta", [](const MethodMeta& mm, size_t i) { return tensor_meta(mm, mm.inputs, i, "input"); },
           py::arg("index"), "TensorInfo of tensor input `index` (IndexError out of range, ValueError for a non-tensor).")
      .def("output_tensor_meta", [](const MethodMeta& mm, size_t i) { return tensor_meta(mm, mm.outputs, i, "output"); },
           py::arg("index"))
      .def("num_memory_planned_buffers", [](const MethodMeta& mm) { return mm.planned_buffer_sizes.size(); })
      .def("memory_planned_buffer_size", [](const MethodMeta& mm, size_t i) {
             if (i >= mm.planned_buffer_sizes.size()) throw py::index_error("no planned buffer " + std::to_string(i));
             return mm.planned_buffer_sizes[i];
           }, py::arg("index"), "Bytes of planned memory arena `index`.")
      .def("backends", [](const MethodMeta& mm) { return mm.backends; },
           "Backend ids of the method's delegates, one per delegate, in order.")
      .def("uses_backend", [](const MethodMeta& mm, const std::string& name) {
             return std::find(mm.backends.begin(), mm.backends.end(), name) != mm.backends.end();
           }, py::arg("backend_name"))
      .def("operators", [](const MethodMeta& mm) { return mm.operators; }, "Operators the method calls.")
      .def("num_instructions", [](const MethodMeta& mm) { return mm.num_instructions; })
      .def("__repr__", [](const MethodMeta& mm) {
        std::string s = "MethodMeta(name='" + mm.name + "', inputs=[";
        for (size_t i = 0; i < mm.inputs.size(); ++i) s += (i ? ", " : "") + value_info_repr(mm.inputs[i]);
        s += "], outputs=[";
        for (size_t i = 0; i < mm.outputs.size(); ++i) s += (i ? ", " : "") + value_info_repr(mm.outputs[i]);
        s += "], memory_planned_buffer_sizes=" + tuple_string(mm.planned_buffer_sizes) + ", backends=[";
        for (size_t i = 0; i < mm.backends.size(); ++i) s += (i ? ", '" : "'") + mm.backends[i] + "'";
        return s + "])";
      });

  py::class_<PyMethod, std::shared_ptr<PyMethod>>(m, "Method", "A loaded method of a Program; call it to run it.")
      .def("execute",
           [](py::object self, py::object inputs, bool clone_outputs) {
             return self.cast<PyMethod&>().execute(self, inputs, clone_outputs);
           },
           py::arg("inputs") = py::tuple(), py::arg("clone_outputs") = true,
           "Runs the method on `inputs` (a list/tuple, one per method input) and returns the outputs as a list.\n"
           "With clone_outputs=False tensor outputs are read-only views valid until the next call of this method.")
      .def("__call__",
           [](py::object self, py::object inputs, bool clone_outputs) {
             return self.cast<PyMethod&>().execute(self, inputs, clone_outputs);
           },
           py::arg("inputs") = py::tuple(), py::arg("clone_outputs") = true)
      .def("set_output", &PyMethod::set_output, py::arg("array"), py::arg("index"),
           "Makes the method write output `index` into `array` (only outputs that are not memory-planned).")
      .def_property_readonly("metadata", [](const PyMethod& self) { return self.meta(); })
      .def_property_readonly("name", [](const PyMethod& self) { return self.meta().name; })
      .def("__repr__", [](const PyMethod& self) {
        return "<Method '" + self.meta().name + "' (" + std::to_string(self.meta().inputs.size()) + " inputs, " +
               std::to_string(self.meta().outputs.size()) + " outputs)>";
      });

  py::class_<PyProgram, std::shared_ptr<PyProgram>>(m, "Program", "A loaded ExecuTorch program (.pte).")
      .def_property_readonly("method_names", [](const PyProgram& p) {
        py::set names;
        for (const auto& n : p.method_names()) names.add(py::str(n));
        return names;
      }, "The names of the program's methods, as a set.")
      .def("load_method", &PyProgram::load_method, py::arg("name"),
           "The method called `name`, loaded on first use and cached.")
      .def("metadata", &PyProgram::metadata, py::arg("method_name"), "The MethodMeta of a method, without loading it.")
      .def("has_etdump", &PyProgram::has_etdump)
      .def("write_etdump_result_to_file", &PyProgram::write_etdump_result_to_file, py::arg("etdump_path"),
           py::arg("debug_buffer_path") = py::none(),
           "Writes the ETDump recorded since load (or the last write) and, when a path is given, the debug buffer.")
      .def("__repr__", [](const PyProgram& p) { return "<Program with methods " + join_names(p.method_names()) + ">"; });

  m.def("_load_program_file", &load_program_file, py::arg("path"), py::arg("verification"), py::arg("enable_etdump"),
        py::arg("debug_buffer_size"), py::arg("data_paths"), py::arg("backend_options"));
  m.def("_load_program_buffer", &load_program_buffer, py::arg("buffer"), py::arg("verification"),
        py::arg("enable_etdump"), py::arg("debug_buffer_size"), py::arg("data_paths"), py::arg("backend_options"));

  // One exception class per etnp::ErrorKind (ETNP_ERROR_KINDS) and one for MethodNotFound: errors.py's
  // ERROR_CLASSES, checked here so that a kind added to the C++ list without a class fails the import.
  m.def("_error_kinds", [] {
    py::list kinds;
#define ETNP_ERROR_KIND_APPEND(name) kinds.append(#name);
    ETNP_ERROR_KINDS(ETNP_ERROR_KIND_APPEND)
#undef ETNP_ERROR_KIND_APPEND
    return kinds;
  }, "The names of the C++ error kinds, in declaration order.");
  m.def("_set_error_classes", [](const py::dict& classes) {
    for (const char* key : {
#define ETNP_ERROR_KIND_KEY(name) #name,
             ETNP_ERROR_KINDS(ETNP_ERROR_KIND_KEY)
#undef ETNP_ERROR_KIND_KEY
                 "MethodNotFound"}) {
      if (!classes.contains(key)) throw py::key_error(std::string("no exception class for error kind ") + key);
    }
    set_error_classes(classes);
  });
  m.def("_raise_error_of_kind", [](const std::string& kind, const std::string& detail) {
#define ETNP_ERROR_KIND_THROW(name) \
  if (kind == #name) throw Error(ErrorKind::name, detail);
    ETNP_ERROR_KINDS(ETNP_ERROR_KIND_THROW)
#undef ETNP_ERROR_KIND_THROW
    throw py::value_error("no error kind '" + kind + "'");
  }, py::arg("kind"), py::arg("detail"), "Throws an etnp::Error of `kind` (the tests of the translation use it).");
  m.def("_set_bfloat16_dtype", &set_bfloat16_dtype);
  m.def("_supported_dtypes", &supported_dtype_names);

  m.def("_registered_backend_names", &registered_backend_names);
  m.def("_backend_is_available", [](const std::string& name) {
    auto b = find_backend(name);
    return b != nullptr && b->is_available();
  });
  m.def("_backend_get_option", [](const std::string& name, const std::string& key) {
    return option_to_python(backend_or_throw(name)->get_option(key));
  });
  m.def("_backend_set_option", [](const std::string& name, const std::string& key, py::object value) {
    auto backend = backend_or_throw(name);
    BackendOptionValue v;
    if (py::isinstance<py::bool_>(value)) v = value.cast<bool>();
    else if (py::isinstance<py::int_>(value)) v = value.cast<int64_t>();
    else if (py::isinstance<py::str>(value)) v = value.cast<std::string>();
    else throw py::type_error("backend options are bool, int or str");
    backend->set_option(key, v);
  });
  m.def("_backend_option_names", [](const std::string& name) { return backend_or_throw(name)->option_names(); });
  m.def("_operator_names", &registered_kernel_names);
  m.def("_version", [] { return std::string(etnp::version()); });
  m.def("_schema_identifier", [] { return std::string(schema_identifier()); });
  m.def("_num_threads", [] { return ThreadPool::global().num_threads(); });

  m.def("_parse_etdump", [](const py::bytes& data) {
    std::string_view bytes = data;
    std::vector<format::RunBlock> blocks =
        format::parse_etdump(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    return etdump_to_python(blocks);
  });
}
