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
  ++LiveObjects::methods;
  bound_.resize(method_->num_outputs());
  bound_memory_.resize(method_->num_outputs());
  for (size_t i = 0; i < method_->num_inputs(); ++i) written_inputs_.push_back(method_->writes_input(i));
}

namespace {

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(b);
  return a_bytes != 0 && b_bytes != 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

/// A numpy array over `data`, which `base` keeps alive: what py::array's constructor makes (writable unless
/// `base` is a read-only array), without the two vectors it fills with the shape and strides on every call.
py::array array_over(const py::dtype& dtype, std::span<const int64_t> shape, const ByteStrides& strides, void* data,
                     py::handle base) {
  auto& api = py::detail::npy_api::get();
  std::array<Py_intptr_t, kMaxTensorRank> dims{};
  std::array<Py_intptr_t, kMaxTensorRank> steps{};
  for (size_t d = 0; d < shape.size(); ++d) {
    dims[d] = static_cast<Py_intptr_t>(shape[d]);
    steps[d] = static_cast<Py_intptr_t>(strides[d]);
  }
  int flags = py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  if (py::isinstance<py::array>(base)) {
    flags = py::reinterpret_borrow<py::array>(base).flags() & ~py::detail::npy_api::NPY_ARRAY_OWNDATA_;
  }
  // Both calls steal a reference: to the dtype, and to the base (even when they fail).
  auto array = py::reinterpret_steal<py::array>(api.PyArray_NewFromDescr_(
      api.PyArray_Type_, dtype.inc_ref().ptr(), static_cast<int>(shape.size()), dims.data(), steps.data(), data,
      flags, nullptr));
  if (!array) throw py::error_already_set();
  if (api.PyArray_SetBaseObject_(array.ptr(), base.inc_ref().ptr()) != 0) throw py::error_already_set();
  return array;
}

/// A tensor output as the Python object execute returns: a numpy array, or an ExecuTorchResult around it.
py::object output_object(py::array array, ScalarType dtype, bool readonly) {
  if (!result_outputs()) {
    if (readonly) array.attr("setflags")(py::arg("write") = false);
    return array;
  }
  return py::cast(PyResult{std::move(array), dtype, readonly});
}

}  // namespace

void PyMethod::check_bound_outputs_against(const PreparedInputs& inputs) const {
  for (size_t i = 0; i < bound_memory_.size(); ++i) {
    for (const PreparedInput& input : inputs.inputs) {
      const std::span<const uint8_t> in = input.memory();
      if (ranges_overlap(bound_memory_[i].data(), bound_memory_[i].size(), in.data(), in.size())) {
        throw_invalid(meta().name, "output " + std::to_string(i) + " is bound (set_output) to memory that an input "
                                   "array shares; bind a separate array or pass a separate input");
      }
    }
  }
}

namespace {

/// One output of a call, read while the method is locked: a later call may reshape or overwrite a tensor.
struct CallOutput {
  CallOutput() {}  // leaves sizes and dim_order unset: only the first `rank` are ever read
  bool is_tensor = false;
  Value value;  ///< Any other output.
  ScalarType dtype = ScalarType::Float;
  size_t rank = 0;
  int64_t sizes[kMaxTensorRank];
  uint8_t dim_order[kMaxTensorRank];
  void* data = nullptr;
  std::unique_ptr<void, FreeDeleter> copy;  ///< clone_outputs: the output's bytes, handed to numpy
  std::shared_ptr<PyRef> bound;             ///< The caller's array the output was written to (set_output).
  std::span<const int64_t> shape() const { return {sizes, rank}; }
};

}  // namespace

py::list PyMethod::execute(py::handle self, py::handle inputs, bool clone_outputs) {
  const MethodMeta& m = meta();
  PreparedInputs prepared(m.inputs.size());
  prepare_inputs(m, inputs, written_inputs_, prepared);

  InlineList<CallOutput, 4> outputs(m.outputs.size());
  {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    check_bound_outputs_against(prepared);
    const bool recording = state_->recorder != nullptr;
    const uint64_t start = recording ? now_ns() : 0;
    try {
      // Step by step rather than Method::execute, whose Values would copy every shape.
      for (size_t i = 0; i < prepared.inputs.size(); ++i) {
        const PreparedInput& input = prepared.inputs[i];
        if (input.is_tensor) {
          method_->set_input(i, input.tensor);
        } else {
          method_->set_input(i, input.value);
        }
      }
      method_->run();
    } catch (...) {
      method_->clear_profile_events();
      throw;
    }
    const uint64_t end = recording ? now_ns() : 0;
    if (recording) {
      std::vector<Value> results;
      for (size_t i = 0; i < outputs.size(); ++i) results.push_back(method_->output(i));
      state_->recorder->record_execute(method_->profile_events(), start, end, results);
      method_->clear_profile_events();
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      CallOutput& out = outputs[i];
      if (m.outputs[i].tag != Tag::Tensor) {
        out.value = method_->output(i);
        continue;
      }
      const TensorView tensor = method_->output_view(i);
      out.is_tensor = true;
      out.dtype = tensor.dtype;
      out.rank = tensor.sizes.size();
      std::copy(tensor.sizes.begin(), tensor.sizes.end(), out.sizes);
      std::copy(tensor.dim_order.begin(), tensor.dim_order.end(), out.dim_order);
      out.data = const_cast<void*>(tensor.data);
      out.bound = bound_[i];
      if (clone_outputs && !out.bound) {
        const size_t nbytes = tensor.nbytes();
        out.copy.reset(std::malloc(nbytes == 0 ? 1 : nbytes));
        if (!out.copy) throw std::bad_alloc();
        if (nbytes != 0) std::memcpy(out.copy.get(), tensor.data, nbytes);
        out.data = out.copy.get();
      }
    }
  }

  // Inputs the method wrote in place, where it was given a copy: the caller's arrays get the writes.
  if (!prepared.write_back.empty()) {
    py::module_ np = py::module_::import("numpy");
    for (const auto& [given, copy] : prepared.write_back) np.attr("copyto")(given, copy);
  }

  py::list result(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    CallOutput& out = outputs[i];
    if (!out.is_tensor) {
      result[i] = value_to_python(out.value);
      continue;
    }
    py::dtype dtype;
    try {
      dtype = numpy_dtype_of(out.dtype);
    } catch (const Error& e) {
      ErrorContext c;
      c.method = m.name;
      throw Error(e.kind(), "output " + std::to_string(i) + ": " + e.detail(), c);
    }
    const std::span<const int64_t> shape = out.shape();
    const ByteStrides strides =
        byte_strides(shape, std::span<const uint8_t>(out.dim_order, out.rank), element_size(out.dtype));
    if (out.bound) {
      // The caller's array, written in place: itself when the output filled it at its shape, else a view of it
      // at the written shape.
      const auto& array = py::reinterpret_borrow<py::array>(out.bound->get());
      const bool same_shape = static_cast<size_t>(array.ndim()) == shape.size() &&
                              std::equal(shape.begin(), shape.end(), array.shape());
      result[i] = same_shape ? out.bound->get() : array_over(dtype, shape, strides, out.data, out.bound->get());
      continue;
    }
    const bool empty = std::any_of(shape.begin(), shape.end(), [](int64_t s) { return s == 0; });
    if (empty) {
      result[i] = output_object(py::array(dtype, std::vector<py::ssize_t>(shape.begin(), shape.end())), out.dtype, false);
      continue;
    }
    if (clone_outputs) {
      py::capsule owner(out.copy.release(), [](void* p) { std::free(p); });
      result[i] = output_object(array_over(dtype, shape, strides, out.data, owner), out.dtype, false);
    } else {
      // A read-only view of the method's memory, valid until the next call of this method. Its base keeps that
      // memory alive: an input array the output aliases (a method that returns an input it does not copy), or
      // else the method itself.
      py::handle base = self;
      for (const PreparedInput& input : prepared.inputs) {
        const std::span<const uint8_t> in = input.memory();
        const auto* p = static_cast<const uint8_t*>(out.data);
        if (!in.empty() && p >= in.data() && p < in.data() + in.size()) base = input.array;
      }
      result[i] = output_object(array_over(dtype, shape, strides, out.data, base), out.dtype, true);
    }
  }
  return result;
}

namespace {

/// The caller's memory for set_output as a numpy array sharing it: a numpy array, a DLPack tensor or a
/// writable buffer.
py::array bindable_array(const std::string& method, const std::string& which, py::handle obj) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  py::module_ np = py::module_::import("numpy");
  const std::string type_name = py::str(py::type::of(obj).attr("__name__"));
  try {
    if (py::hasattr(obj, "__dlpack__")) return np.attr("from_dlpack")(obj);
    if (PyObject_CheckBuffer(obj.ptr())) return np.attr("asarray")(py::memoryview(py::reinterpret_borrow<py::object>(obj)));
  } catch (py::error_already_set& e) {
    throw_invalid(method, which + ": cannot use the memory of the " + type_name + " object (" + e.what() + ")");
  }
  throw_invalid(method, which + " can be bound to a numpy array, a DLPack tensor or a writable buffer, not a " +
                            type_name);
}

}  // namespace

void PyMethod::set_output(py::handle obj, py::handle index_obj) {
  const MethodMeta& m = meta();
  const size_t index = index_arg(m.name, "output", index_obj, m.outputs.size());
  const std::string which = "output " + std::to_string(index);
  if (const std::string& refusal = method_->output_buffer_refusal(index); !refusal.empty()) {
    throw_invalid(m.name, which + " " + refusal + ", so it cannot be bound to caller memory");
  }
  const TensorInfo& t = m.outputs[index].tensor;
  const std::string expected = std::string(scalar_type_name(t.dtype)) + " " + tuple_string(t.sizes);
  if (!is_contiguous_order(t.dim_order)) {
    throw_invalid(m.name, which + " is laid out in dim order " +
                              tuple_string(std::vector<int64_t>(t.dim_order.begin(), t.dim_order.end())) +
                              ", not contiguously, so it cannot be bound to caller memory");
  }
  py::array array = bindable_array(m.name, which, obj);
  std::optional<ScalarType> given = scalar_type_of(array.dtype());
  if (given == ScalarType::UInt16 && t.dtype == ScalarType::BFloat16) given = ScalarType::BFloat16;
  if (given != t.dtype || !has_native_byte_order(array.dtype())) {
    throw_invalid(m.name, which + " is " + expected + ", the array is " + describe_array(array) + " (wrong dtype)");
  }
  const int flags = array.flags();
  if ((flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) == 0 || (flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_) == 0) {
    throw_invalid(m.name, which + " needs a C-contiguous, aligned array, the array is " + describe_array(array) +
                              " (numpy.ascontiguousarray makes one)");
  }
  const size_t nbytes = static_cast<size_t>(array.nbytes());
  if (nbytes < t.nbytes) {
    throw_invalid(m.name, which + " is " + expected + (t.dynamism == ShapeDynamism::Static ? "" : " at most") + " (" +
                              std::to_string(t.nbytes) + " bytes), the array is " + describe_array(array) + " (" +
                              std::to_string(nbytes) + " bytes, too small)");
  }
  if (!array.writeable()) throw_invalid(m.name, which + ": the array is read-only");
  void* data = array.mutable_data();
  auto ref = std::make_shared<PyRef>(py::reinterpret_borrow<py::object>(array));
  std::shared_ptr<PyRef> previous;
  {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mutex_);
    for (size_t j = 0; j < bound_memory_.size(); ++j) {
      if (j != index && ranges_overlap(data, nbytes, bound_memory_[j].data(), bound_memory_[j].size())) {
        throw_invalid(m.name, which + ": the array shares memory with the one bound to output " + std::to_string(j));
      }
    }
    method_->set_output_buffer(index, data, nbytes);
    bound_memory_[index] = std::span<const uint8_t>(static_cast<const uint8_t*>(data), nbytes);
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
  throw BindingError("MethodNotFound", "no method named " + short_repr(py::str(name), 200) + " in the program; it has " +
                                         join_names(names_), name);
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

void PyProgram::write_etdump_result_to_file(py::handle etdump_path_arg, py::handle debug_path_arg) {
  const std::string etdump_path = path_arg(etdump_path_arg, "etdump_path");
  std::optional<std::string> debug_path;
  if (!debug_path_arg.is_none()) debug_path = path_arg(debug_path_arg, "debug_buffer_path");
  if (!state_->recorder) {
    throw Error(ErrorKind::InvalidArgument, "no ETDump was recorded: load the program with enable_etdump=True");
  }
  std::pair<std::vector<uint8_t>, std::vector<uint8_t>> taken;
  {
    // Serializing what was recorded takes the recorder's lock, which executes on other threads take too.
    py::gil_scoped_release nogil;
    taken = state_->recorder->take();
  }
  const auto& [etdump, debug] = taken;
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

/// A dict of backend options ({"num_threads": 2, ...}) for `backend`; values are bool, int or str.
BackendOptions backend_options_from(const std::string& backend, py::handle mapping) {
  if (!py::isinstance<py::dict>(mapping)) {
    throw Error(ErrorKind::InvalidArgument, "the options of backend '" + backend + "' must be a dict of option "
                "names to values, got " + type_name(mapping));
  }
  BackendOptions converted;
  for (auto [key, value] : py::reinterpret_borrow<py::dict>(mapping)) {
    if (!py::isinstance<py::str>(key)) {
      throw Error(ErrorKind::InvalidArgument, "backend '" + backend + "' option names are str, got " + type_name(key) + " " +
                                                  short_repr(key));
    }
    const std::string k = py::cast<std::string>(key);
    if (py::isinstance<py::bool_>(value)) {
      converted[k] = value.cast<bool>();
    } else if (py::isinstance<py::int_>(value)) {
      try {
        converted[k] = value.cast<int64_t>();
      } catch (const py::cast_error&) {
        throw Error(ErrorKind::InvalidArgument, "backend '" + backend + "' option '" + k + "': " +
                                                    short_repr(value) + " does not fit in int64");
      }
    } else if (py::isinstance<py::str>(value)) {
      converted[k] = value.cast<std::string>();
    } else {
      throw Error(ErrorKind::InvalidArgument, "backend '" + backend + "' option '" + k + "' must be a bool, int or str, got " +
                                                  type_name(value));
    }
  }
  return converted;
}

LoadOptions make_options(Verification verification, bool enable_etdump, const std::vector<std::string>& data_paths,
                         const py::object& backend_options, const py::object& limits) {
  LoadOptions options;
  options.verification = verification;
  options.data_files = data_paths;
  options.enable_profiling = enable_etdump;
  if (!limits.is_none()) {
    for (auto [name, value] : py::cast<py::dict>(limits)) {
      const std::string key = py::str(name);
      if (!options.limits.set(key, value.cast<uint64_t>())) {
        throw Error(ErrorKind::InvalidArgument, "limits: there is no limit " + printable(key));
      }
    }
  }
  if (!backend_options.is_none()) {
    for (auto [backend, values] : py::cast<py::dict>(backend_options)) {
      const std::string name = py::str(backend);
      options.backend_options[name] = backend_options_from(name, values);
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
                                             const py::object& backend_options, const py::object& limits) {
  LoadOptions options = make_options(verification, enable_etdump, data_paths, backend_options, limits);
  py::gil_scoped_release nogil;
  return finish(Program::load_file(path, options), enable_etdump, debug_buffer_size);
}

std::shared_ptr<PyProgram> load_program_buffer(const py::object& buffer, Verification verification, bool enable_etdump,
                                               size_t debug_buffer_size, const std::vector<std::string>& data_paths,
                                               const py::object& backend_options, const py::object& limits) {
  LoadOptions options = make_options(verification, enable_etdump, data_paths, backend_options, limits);
  auto hold = std::make_shared<BufferHold>();
  if (PyObject_GetBuffer(buffer.ptr(), &hold->view, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  std::span<const uint8_t> bytes(static_cast<const uint8_t*>(hold->view.buf), static_cast<size_t>(hold->view.len));
  py::gil_scoped_release nogil;
  return finish(Program::load_buffer(bytes, hold, options), enable_etdump, debug_buffer_size);
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

const TensorInfo& tensor_meta(const MethodMeta& m, const std::vector<ValueInfo>& values, py::handle index_obj,
                              const char* what) {
  const size_t index = index_arg(m.name, what, index_obj, values.size());
  if (values[index].tag != Tag::Tensor) {
    throw_invalid(m.name, std::string(what) + " " + std::to_string(index) + " is " + tag_name(values[index].tag) +
                              ", not a tensor");
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

// MethodMeta read as a mapping (executorch-numpy-runtime's dict-style metadata): these keys, in this order.
constexpr const char* kMetaKeys[] = {"num_inputs", "num_outputs", "inputs", "outputs"};

py::list value_entries(const std::vector<ValueInfo>& values) {
  py::list entries;
  for (const ValueInfo& v : values) {
    py::dict entry;
    const bool tensor = v.tag == Tag::Tensor;
    entry["scalar_type"] = tensor ? scalar_type_object(v.tensor.dtype) : py::object(py::none());
    entry["shape"] = tensor ? py::object(py::cast(v.tensor.sizes)) : py::object(py::none());
    entry["tag"] = tag_name(v.tag);
    entries.append(entry);
  }
  return entries;
}

bool is_meta_key(const std::string& key) {
  return std::any_of(std::begin(kMetaKeys), std::end(kMetaKeys), [&](const char* k) { return key == k; });
}

py::list meta_keys() {
  py::list keys;
  for (const char* k : kMetaKeys) keys.append(k);
  return keys;
}

py::object meta_item(const MethodMeta& mm, const std::string& key) {
  if (key == "num_inputs") return py::int_(mm.inputs.size());
  if (key == "num_outputs") return py::int_(mm.outputs.size());
  if (key == "inputs") return value_entries(mm.inputs);
  if (key == "outputs") return value_entries(mm.outputs);
  throw py::key_error(key);
}

// --- Method.execute and Method.__call__ ---------------------------------------------------------------------------
// CPython METH_FASTCALL functions of the class rather than pybind11 overloads: pybind11's dispatcher (an argument
// tuple, its argument records, three allocations and a type lookup a call) was a third of the overhead of a call
// on one-element arrays.

const py::detail::type_info* g_method_type = nullptr;  // Method's pybind11 record, set when the class is made

PyMethod& method_of(PyObject* self) {
  // The method descriptor has checked that `self` is a Method (or a subclass).
  const py::detail::value_and_holder held =
      reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder(g_method_type, false);
  if (!held || held.value_ptr() == nullptr) throw BindingError("InvalidType", "the Method object is not initialized");
  return *held.value_ptr<PyMethod>();
}

/// (inputs=(), clone_outputs=True), positional or by keyword; `signature` names the call in errors.
PyObject* run_method(const char* signature, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                     PyObject* kwnames) {
  try {
    PyObject* params[2] = {nullptr, nullptr};  // inputs, clone_outputs
    const std::span<PyObject* const> keywords =
        kwnames == nullptr ? std::span<PyObject* const>()
                           : std::span<PyObject* const>(reinterpret_cast<PyTupleObject*>(kwnames)->ob_item,
                                                        static_cast<size_t>(PyTuple_GET_SIZE(kwnames)));
    bool matched = nargs <= 2;
    for (Py_ssize_t i = 0; matched && i < nargs; ++i) params[i] = args[i];
    for (size_t k = 0; matched && k < keywords.size(); ++k) {
      const int index = PyUnicode_CompareWithASCIIString(keywords[k], "inputs") == 0          ? 0
                        : PyUnicode_CompareWithASCIIString(keywords[k], "clone_outputs") == 0 ? 1
                                                                                               : -1;
      matched = index >= 0 && params[index] == nullptr;
      if (matched) params[index] = args[static_cast<size_t>(nargs) + k];
    }
    if (!matched) {
      throw BindingError("InvalidType", std::string(signature) + " was called with " +
                                            received_arguments(std::span(args, static_cast<size_t>(nargs)), keywords));
    }
    const bool clone_outputs = params[1] == nullptr || bool_arg(params[1], "clone_outputs");
    // No inputs given: None, which prepare_inputs takes as an empty sequence.
    return method_of(self).execute(self, params[0] != nullptr ? params[0] : Py_None, clone_outputs).release().ptr();
  } catch (...) {
    raise_current_exception();
    return nullptr;
  }
}

PyObject* method_execute(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return run_method("Method.execute(inputs=(), clone_outputs=True)", self, args, nargs, kwnames);
}

PyObject* method_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return run_method("Method.__call__(inputs=(), clone_outputs=True)", self, args, nargs, kwnames);
}

#define ETNP_EXECUTE_DOC                                                                                            \
  "Runs the method on `inputs` (a list/tuple, one per method input) and returns the outputs as a list.\n"          \
  "With clone_outputs=False tensor outputs are read-only views valid until the next call of this method."

PyMethodDef g_execute_defs[] = {
    {"execute", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&method_execute)),
     METH_FASTCALL | METH_KEYWORDS,
     "execute(self, inputs: object = (), clone_outputs: bool = True) -> list\n\n" ETNP_EXECUTE_DOC},
    {"__call__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&method_call)),
     METH_FASTCALL | METH_KEYWORDS,
     "__call__(self, inputs: object = (), clone_outputs: bool = True) -> list\n\n" ETNP_EXECUTE_DOC},
};

#undef ETNP_EXECUTE_DOC

/// Makes g_execute_defs methods of the class `cls` (Method).
void add_execute_methods(py::handle cls) {
  g_method_type = py::detail::get_type_info(typeid(PyMethod));
  for (PyMethodDef& def : g_execute_defs) {
    py::object descriptor = py::reinterpret_steal<py::object>(
        PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &def));
    if (!descriptor) throw py::error_already_set();
    py::setattr(cls, def.ml_name, descriptor);
  }
}

}  // namespace

void raise_current_exception() {
  // pybind11's dispatcher's order: the module's own translators, then the global ones (pybind11's default last).
  if (py::detail::apply_exception_translators(py::detail::get_local_internals().registered_exception_translators)) return;
  if (py::detail::apply_exception_translators(py::detail::get_internals().registered_exception_translators)) return;
  PyErr_SetString(PyExc_SystemError, "a C++ exception escaped every exception translator");
}

}  // namespace etnp::python

using namespace etnp;
using namespace etnp::python;

PYBIND11_MODULE(_C, m) {
  m.doc() = "The compiled core of executorch_numpy_runtime (use the package's public API instead).";
  m.attr("_pybind11_version") = py::make_tuple(PYBIND11_VERSION_MAJOR, PYBIND11_VERSION_MINOR);
#if PYBIND11_VERSION_MAJOR == 2 && PYBIND11_VERSION_MINOR < 12
  // pybind11 before 2.12 reads numpy's array structures in their numpy 1 layout: under numpy 2 it reads
  // garbage (seen as hangs and wrong results), so such a build refuses to load there.
  {
    const std::string numpy_version = py::module_::import("numpy").attr("__version__").cast<std::string>();
    if (!numpy_version.empty() && numpy_version[0] != '1' && numpy_version[0] != '0') {
      throw py::import_error("executorch_numpy_runtime: this build uses pybind11 " +
                             std::to_string(PYBIND11_VERSION_MAJOR) + "." + std::to_string(PYBIND11_VERSION_MINOR) +
                             ", which cannot read numpy 2 arrays, and this Python has numpy " + numpy_version +
                             ": build the package for this Python with pybind11 2.12 or later "
                             "(scripts/build-python.sh PYTHON takes pip's)");
    }
  }
#endif

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise_error(e);
    } catch (const BindingError& e) {
      raise_binding_error(e);
    }
  });

  bind_tokenizer(m);
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
      .def("input_tag", [](const MethodMeta& mm, py::handle index) {
             return std::string(tag_name(mm.inputs[index_arg(mm.name, "input", index, mm.inputs.size())].tag));
           }, py::arg("index"), "The kind of input `index`: 'Tensor', 'Int', 'Double', 'Bool', 'String', 'None', ...")
      .def("output_tag", [](const MethodMeta& mm, py::handle index) {
             return std::string(tag_name(mm.outputs[index_arg(mm.name, "output", index, mm.outputs.size())].tag));
           }, py::arg("index"))
      .def("input_tensor_meta", [](const MethodMeta& mm, py::handle i) { return tensor_meta(mm, mm.inputs, i, "input"); },
           py::arg("index"), "TensorInfo of tensor input `index` (IndexOutOfRangeError out of range, InvalidInputError for a "
           "non-tensor).")
      .def("output_tensor_meta", [](const MethodMeta& mm, py::handle i) { return tensor_meta(mm, mm.outputs, i, "output"); },
           py::arg("index"))
      .def("num_attributes", [](const MethodMeta& mm) { return mm.attributes.size(); },
           "The number of named tensors (weights and buffers with a fully qualified name).")
      .def("attribute_tensor_meta", [](const MethodMeta& mm, py::handle index) {
             return mm.attributes[index_arg(mm.name, "attribute", index, mm.attributes.size())];
           }, py::arg("index"), "TensorInfo of named tensor `index` (its name() is the fully qualified name).")
      .def("num_memory_planned_buffers", [](const MethodMeta& mm) { return mm.planned_buffer_sizes.size(); })
      .def("memory_planned_buffer_size", [](const MethodMeta& mm, py::handle index) {
             return mm.planned_buffer_sizes[index_arg(mm.name, "planned buffer", index, mm.planned_buffer_sizes.size())];
           }, py::arg("index"), "Bytes of planned memory arena `index`.")
      .def("__getitem__", [](const MethodMeta& mm, py::handle key) {
             if (!py::isinstance<py::str>(key) || !is_meta_key(key.cast<std::string>())) {
               throw py::key_error("MethodMeta has no key " + short_repr(key) + "; its keys are 'num_inputs', "
                                   "'num_outputs', 'inputs' and 'outputs'");
             }
             return meta_item(mm, key.cast<std::string>());
           }, py::arg("key"),
           "Dict-style access: meta['num_inputs'], meta['num_outputs'], meta['inputs'], meta['outputs'] (lists of "
           "{'scalar_type', 'shape', 'tag'} dicts).")
      .def("get", [](const MethodMeta& mm, py::handle key, py::object fallback) {
             if (!py::isinstance<py::str>(key) || !is_meta_key(key.cast<std::string>())) return fallback;
             return meta_item(mm, key.cast<std::string>());
           }, py::arg("key"), py::arg("default") = py::none())
      .def("keys", [](const MethodMeta&) { return meta_keys(); })
      .def("values", [](const MethodMeta& mm) {
             py::list values;
             for (const char* k : kMetaKeys) values.append(meta_item(mm, k));
             return values;
           })
      .def("items", [](const MethodMeta& mm) {
             py::list items;
             for (const char* k : kMetaKeys) items.append(py::make_tuple(k, meta_item(mm, k)));
             return items;
           })
      .def("__iter__", [](const MethodMeta&) { return meta_keys().attr("__iter__")(); })
      .def("__len__", [](const MethodMeta&) { return std::size(kMetaKeys); })
      .def("__contains__", [](const MethodMeta&, py::handle key) {
             return py::isinstance<py::str>(key) && is_meta_key(py::cast<std::string>(key));
           })
      .def("backends", [](const MethodMeta& mm) { return mm.backends; },
           "Backend ids of the method's delegates, one per delegate, in order.")
      .def("uses_backend", [](const MethodMeta& mm, py::handle name_arg) {
             const std::string name = str_arg(name_arg, "backend_name");
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

  py::class_<PyResult>(m, "ExecuTorchResult", py::buffer_protocol(),
                       "A tensor output in CPU memory, as executorch.runtime returns it without PyTorch (the package "
                       "returns these instead of numpy arrays when imported with "
                       "EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT=executorch). Read it through the buffer protocol "
                       "(numpy.asarray makes a view, no copy) or DLPack.")
      .def_buffer([](PyResult& r) {
        // numpy reads a bfloat16 result as the uint16 bits it holds: the buffer protocol has no bfloat16 format.
        const bool bf16 = r.dtype == ScalarType::BFloat16;
        std::string format = bf16 ? py::format_descriptor<uint16_t>::format()
                                  : std::string(py::str(r.array.dtype().attr("char")));
        std::vector<py::ssize_t> shape(r.array.shape(), r.array.shape() + r.array.ndim());
        std::vector<py::ssize_t> strides(r.array.strides(), r.array.strides() + r.array.ndim());
        return py::buffer_info(r.array.mutable_data(), r.array.itemsize(), format, r.array.ndim(), shape, strides,
                               r.readonly);
      })
      .def_property_readonly("shape", [](const PyResult& r) {
        return py::tuple(py::cast(std::vector<py::ssize_t>(r.array.shape(), r.array.shape() + r.array.ndim())));
      }, "Size of each dimension.")
      .def_property_readonly("strides", [](const PyResult& r) {
        return py::tuple(py::cast(std::vector<py::ssize_t>(r.array.strides(), r.array.strides() + r.array.ndim())));
      }, "Byte step of each dimension.")
      .def_property_readonly("dtype", [](const PyResult& r) { return std::string(scalar_type_name(r.dtype)); },
                             "Name of the dtype as torch spells it, e.g. 'float32', 'bfloat16'.")
      .def_property_readonly("nbytes", [](const PyResult& r) { return r.array.nbytes(); }, "Size of the data in bytes.")
      .def_property_readonly("device", [](const PyResult&) { return "cpu"; }, "Where the data lives: always 'cpu' here.")
      .def("to_host", [](const PyResult& r) { return PyResult{r.array.attr("copy")(), r.dtype, false}; },
           "A copy of this result in CPU memory.")
      .def_static("from_host", [](py::handle, py::handle device_index) -> PyResult {
        int_arg(device_index, "device_index");
        throw Error(ErrorKind::BackendNotAvailable, "ExecuTorchResult.from_host copies to a CUDA device; this runtime "
                                                    "runs on the CPU only and has no CUDA support");
      }, py::arg("source"), py::arg("device_index") = 0, "Refused: this runtime has no CUDA support.")
      .def("__dlpack__", [](const PyResult& r, py::kwargs kwargs) {
        // numpy exports it; it refuses read-only arrays, so it is given the writable array behind the result.
        py::dict forwarded;
        for (auto [key, value] : kwargs) {
          if (!value.is_none()) forwarded[key] = value;
        }
        return r.array.attr("__dlpack__")(**forwarded);
      })
      .def("__dlpack_device__", [](const PyResult& r) { return r.array.attr("__dlpack_device__")(); })
      .def("__repr__", [](const PyResult& r) -> std::string {
        std::vector<int64_t> shape(r.array.shape(), r.array.shape() + r.array.ndim());
        return "ExecuTorchResult(shape=" + tuple_string(shape) + ", dtype=" + std::string(scalar_type_name(r.dtype)) + ", device=cpu)";
      });
  m.def("_set_result_outputs", &set_result_outputs, py::arg("on"),
        "True: tensor outputs are ExecuTorchResult objects; False: numpy arrays (the default).");
  m.def("_result_outputs", &result_outputs);

  py::class_<PyMethod, std::shared_ptr<PyMethod>> method_class(m, "Method", "A loaded method of a Program; call it to run it.\n"
                                                      "Pickles as its program and its name (see Program).");
  add_execute_methods(method_class);
  method_class.def("set_output", &PyMethod::set_output, py::arg("tensor"), py::arg("index"),
           "Makes the method write output `index` into `array` (only outputs that are not memory-planned).")
      .def_property_readonly("metadata", [](const PyMethod& self) { return self.meta(); })
      .def_property_readonly("name", [](const PyMethod& self) { return self.meta().name; })
      .def_property_readonly("_program", [](const PyMethod& self) { return std::make_shared<PyProgram>(self.state()); },
                             "A Program over the program this method was loaded from (what pickling it writes).")
      .def("__repr__", [](const PyMethod& self) {
        return "<Method '" + self.meta().name + "' (" + std::to_string(self.meta().inputs.size()) + " inputs, " +
               std::to_string(self.meta().outputs.size()) + " outputs)>";
      });

  py::class_<PyProgram, std::shared_ptr<PyProgram>>(m, "Program", "A loaded ExecuTorch program (.pte).\n"
      "Pickles by path (with its .ptd paths and load options) when loaded from a file, by its bytes otherwise; "
      "unpickling loads it once per process and returns that same Program afterwards (see the package docstring).")
      .def_property_readonly("method_names", [](const PyProgram& p) {
        py::set names;
        for (const auto& n : p.method_names()) names.add(py::str(n));
        return names;
      }, "The names of the program's methods, as a set.")
      .def("load_method", &PyProgram::load_method_arg, py::arg("name"),
           "The method called `name`, loaded on first use and cached.")
      .def("metadata", &PyProgram::metadata_arg, py::arg("method_name"), "The MethodMeta of a method, without loading it.")
      .def("has_etdump", &PyProgram::has_etdump)
      .def_property("_pickle_state",
                    [](const PyProgram& p) -> py::object {
                      return p.state()->pickle_state ? p.state()->pickle_state->get() : py::none();
                    },
                    [](const PyProgram& p, py::object state) {
                      p.state()->pickle_state = state.is_none() ? nullptr : std::make_shared<PyRef>(std::move(state));
                    },
                    "How the program was loaded, for pickling (set by Runtime.load_program).")
      .def("write_etdump_result_to_file", &PyProgram::write_etdump_result_to_file, py::arg("etdump_path"),
           py::arg("debug_buffer_path") = py::none(),
           "Writes the ETDump recorded since load (or the last write) and, when a path is given, the debug buffer.")
      .def("__repr__", [](const PyProgram& p) { return "<Program with methods " + join_names(p.method_names()) + ">"; });

  bind_generator(m);

  m.def("_load_program_file", &load_program_file, py::arg("path"), py::arg("verification"), py::arg("enable_etdump"),
        py::arg("debug_buffer_size"), py::arg("data_paths"), py::arg("backend_options"), py::arg("limits"));
  m.def("_load_program_buffer", &load_program_buffer, py::arg("buffer"), py::arg("verification"),
        py::arg("enable_etdump"), py::arg("debug_buffer_size"), py::arg("data_paths"), py::arg("backend_options"),
        py::arg("limits"));
  m.def(
      "_live_objects",
      [] {
        py::dict d;
        d["programs"] = LiveObjects::programs.load();
        d["methods"] = LiveObjects::methods.load();
        return d;
      },
      "Programs and methods of the bindings alive now (the soak tests' leak check).");
  m.def(
      "_default_limits",
      [] {
        const ResourceLimits limits;
        py::dict d;
        for (std::string_view name : ResourceLimits::names()) d[py::str(std::string(name))] = *limits.get(name);
        return d;
      },
      "The default of every resource limit (0: none).");

  // One exception class per etnp::ErrorKind (ETNP_ERROR_KINDS) and one per BindingError key: errors.py's
  // ERROR_CLASSES, checked here so that a kind added to the C++ list without a class fails the import.
  m.def("_error_kinds", [] {
    py::list kinds;
#define ETNP_ERROR_KIND_APPEND(name) kinds.append(#name);
    ETNP_ERROR_KINDS(ETNP_ERROR_KIND_APPEND)
#undef ETNP_ERROR_KIND_APPEND
    return kinds;
  }, "The names of the C++ error kinds, in declaration order.");
  m.def("_binding_error_keys", [] { return std::vector<std::string>(std::begin(kBindingErrorKeys), std::end(kBindingErrorKeys)); },
        "The classes the binding raises besides one per error kind (BindingError keys).");
  m.def("_set_error_classes", [](const py::dict& classes) {
    std::vector<std::string> keys = {
#define ETNP_ERROR_KIND_KEY(name) #name,
        ETNP_ERROR_KINDS(ETNP_ERROR_KIND_KEY)
#undef ETNP_ERROR_KIND_KEY
    };
    keys.insert(keys.end(), std::begin(kBindingErrorKeys), std::end(kBindingErrorKeys));
    for (const std::string& key : keys) {
      if (!classes.contains(key)) throw py::key_error("no exception class for error kind " + key);
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
  m.def("_backend_library", [](const std::string& name) { return require_backend(name)->library(); });
  m.def("_backend_get_options", [](const std::string& name, py::handle requested) {
    py::dict values;
    for (const auto& [key, value] : require_backend(name)->get_options(backend_options_from(name, requested))) {
      values[py::str(key)] = option_to_python(value);
    }
    return values;
  }, py::arg("backend_name"), py::arg("options"));
  m.def("_backend_set_options", [](const std::string& name, py::handle options) {
    BackendOptions values = backend_options_from(name, options);
    std::shared_ptr<Backend> backend = require_backend(name);
    py::gil_scoped_release nogil;  // resizing a thread pool waits for its threads
    backend->set_options(values);
  }, py::arg("backend_name"), py::arg("options"));
  m.def("_backend_option_names", [](const std::string& name) { return require_backend(name)->option_names(); });
  m.def("_kernel_libraries", &kernel_libraries);
  m.def("_packed_weight_cache_stats", [] {
    const PackedWeightCacheStats stats = packed_weight_cache_stats();
    py::dict d;
    d["entries"] = stats.entries;
    d["bytes"] = stats.bytes;
    return d;
  });
  m.def("_executorch_version", [] { return std::string(executorch_version()); });
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

  add_argument_count_checks(m);
}
