// Shared pieces of the executorch_numpy_runtime extension (_C): dtype mapping, input/output conversion between
// numpy and etnp values, error translation, the ETDump recorder, and the Program / Method wrappers.
//
// Locking rules (the extension must never deadlock against the GIL):
//  - A Method's mutex is only ever taken with the GIL released, or (set_output) with the GIL held by a thread
//    that then never waits for anything else; whoever holds a Method's mutex never waits for the GIL.
//  - Python objects reachable from code that runs without the GIL are held through PyRef, whose last owner
//    takes the GIL to drop the reference.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "etnp/etnp.h"
#include "format/etdump.h"

namespace etnp::python {

namespace py = pybind11;

/// A failure the binding itself detects that needs a class of its own besides its kind's (errors.py's
/// ERROR_CLASSES keys "MethodNotFound", "IndexOutOfRange" and "InvalidType"): a method name the program lacks
/// (MethodNotFoundError, also a ProgramLoadError and a KeyError), an index past the end of a list of inputs,
/// outputs, attributes or buffers (IndexOutOfRangeError, also an InvalidInputError and an IndexError), an
/// argument of the wrong Python type (InvalidTypeError, also an InvalidInputError and a TypeError).
constexpr const char* kBindingErrorKeys[] = {"MethodNotFound", "IndexOutOfRange", "InvalidType"};

class BindingError : public std::runtime_error {
 public:
  BindingError(const char* class_key, std::string message, std::string method = {})
      : std::runtime_error(std::move(message)), class_key_(class_key), method_(std::move(method)) {}
  const char* class_key() const { return class_key_; }
  const std::string& method() const { return method_; }

 private:
  const char* class_key_;
  std::string method_;
};

/// `obj` as an index into a list of `count` `what`s of method `method`: BindingError(IndexOutOfRange) when it is
/// negative or past the end, BindingError(InvalidType) when it is not an int.
size_t index_arg(const std::string& method, const char* what, py::handle obj, size_t count);
/// `obj` as a str argument called `what`; BindingError(InvalidType) otherwise.
std::string str_arg(py::handle obj, const char* what);
/// `obj` as a bool argument called `what` (True/False, or any object with a truth value that is not a container,
/// as pybind11 takes it; None is False); BindingError(InvalidType) otherwise.
bool bool_arg(py::handle obj, const char* what);
/// `obj` (str, bytes or os.PathLike) as a file path argument called `what`, in the file system's encoding.
/// BindingError(InvalidType) for another type or for bytes that cannot be a path (a NUL byte, longer than PATH_MAX:
/// file contents passed for a path); etnp::Error(InvalidArgument) for a str path with a NUL character.
std::string path_arg(py::handle obj, const char* what);
/// `obj` (an int, or an object with __index__ such as a numpy integer; not a bool) as an int64 argument called
/// `what`; BindingError(InvalidType) otherwise, etnp::Error(InvalidArgument) when it does not fit.
int64_t int_arg(py::handle obj, const char* what);
/// `obj` (a list, tuple or other sequence of ints, or a 1-d integer array) as a list of int64 called `what`.
std::vector<int64_t> int_list_arg(py::handle obj, const char* what);
/// The name of `obj`'s type, for messages ("bytes", "dict").
std::string type_name(py::handle obj);
/// repr(obj) cut to about `limit` characters, without building the repr of a large str/bytes (for messages that
/// echo a value the caller gave).
std::string short_repr(py::handle obj, size_t limit = 60);
/// `text` made fit for an exception message: NUL and the other control bytes (except newline and tab) and bytes
/// that are not UTF-8 escaped as \xNN, and the whole cut after `limit` bytes with a note of how much was left out.
std::string printable(std::string_view text, size_t limit = 2000);
/// etnp::Error(InvalidArgument) with `message` about method `method` (raised as InvalidInputError).
[[noreturn]] void throw_invalid(const std::string& method, const std::string& message);

/// A reference to a Python object that C++ code may drop without holding the GIL.
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(std::move(object)) {}
  ~PyRef() {
    py::gil_scoped_acquire gil;
    object_ = py::object();
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  const py::object& get() const { return object_; }

 private:
  py::object object_;
};

uint64_t now_ns();

/// Adds Tokenizer and StreamDecoder (tokenizer_bindings.cpp) to the module.
void bind_tokenizer(py::module_& m);
/// Adds Generator and Generation (generator_bindings.cpp); after Program and Tokenizer.
void bind_generator(py::module_& m);
/// Gives every public method of the module's classes a catch-all last overload that raises a short
/// InvalidTypeError for a call with the wrong number of arguments (argument_count.cpp); after every class.
void add_argument_count_checks(py::module_& m);
/// The arguments of a call that matched no signature, in words: "2 positional arguments (list, bytes) and
/// keyword argument 'clone'" (the end of InvalidTypeError's "Method.execute(...) was called with ...").
std::string received_arguments(std::span<PyObject* const> positional, std::span<PyObject* const> keyword_names);
/// Sets the Python error for the C++ exception being handled, as pybind11's dispatcher would (the module's
/// translator first); for entry points written against the CPython API. Call it inside a catch block.
void raise_current_exception();

// --- Errors ---------------------------------------------------------------------------------------------------

/// Registers the Python exception classes (errors.py) the extension raises, keyed by etnp::ErrorKind name plus
/// the BindingError keys.
void set_error_classes(const py::dict& classes);
/// Sets the Python error for `error` (the class its kind maps to, with its context as attributes).
void raise_error(const Error& error);
void raise_binding_error(const BindingError& error);

// --- dtypes ---------------------------------------------------------------------------------------------------

/// ml_dtypes.bfloat16's numpy dtype, or None to hand bfloat16 tensors out as raw uint16 bits.
void set_bfloat16_dtype(py::object dtype);
bool bfloat16_is_native();
/// The element type of a numpy dtype in native byte order, or nullopt when the runtime has no equivalent.
std::optional<ScalarType> scalar_type_of(const py::dtype& dtype);
/// Whether the dtype's bytes are in this machine's order.
bool has_native_byte_order(const py::dtype& dtype);
/// The numpy dtype for an element type; throws etnp::Error(kind) naming the type when there is none.
py::dtype numpy_dtype_of(ScalarType type, ErrorKind kind = ErrorKind::ExecutionError);
/// Element types that cross the boundary, as numpy dtype names.
std::vector<std::string> supported_dtype_names();

// --- Inputs and outputs -----------------------------------------------------------------------------------------

/// A list of a size fixed when it is made, whose first N elements live in place: execute's per-input and
/// per-output records without a heap allocation for methods of up to N inputs and outputs.
template <typename T, size_t N>
class InlineList {
 public:
  explicit InlineList(size_t size) : size_(size) {
    if (size > N) heap_.resize(size);
    data_ = size > N ? heap_.data() : inline_.data();
  }
  InlineList(const InlineList&) = delete;
  InlineList& operator=(const InlineList&) = delete;

  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  std::array<T, N> inline_;
  std::vector<T> heap_;
  T* data_;
  size_t size_;
};

/// One method input converted from Python: a tensor as a view of a numpy array, or another value.
struct PreparedInput {
  py::object array;    ///< The array a tensor input reads (or a tensor given for a scalar): keeps it alive.
  TensorView tensor;   ///< A tensor input: dtype, shape and data of `array`.
  Value value;         ///< Any other input.
  bool is_tensor = false;
  std::span<const uint8_t> memory() const {
    return {static_cast<const uint8_t*>(tensor.data), is_tensor ? tensor.nbytes() : 0};
  }
};

/// Method inputs converted from Python, with the objects whose memory the tensor values point at.
struct PreparedInputs {
  explicit PreparedInputs(size_t count) : inputs(count) {}
  InlineList<PreparedInput, 8> inputs;
  /// (caller's array, the copy the method was given) for each input the method writes in place that had to be
  /// copied (misaligned, no layout of its own, non-native byte order): the copy goes back after a run.
  std::vector<std::pair<py::array, py::array>> write_back;
};

/// Converts `inputs` (a list/tuple, or one value) for a method with `meta` into `prepared` (made with
/// meta.inputs.size() entries). Throws etnp::Error(InvalidArgument) with the input index for a wrong count,
/// dtype, rank or memory layout, and for unsupported dtypes. `written[i]`: the method writes input i in place
/// (Method::writes_input); a read-only array given for it is copied, so that it is never written, and a writable
/// one that has to be copied is listed in `write_back`.
void prepare_inputs(const MethodMeta& meta, py::handle inputs, const std::vector<bool>& written,
                    PreparedInputs& prepared);

/// A tensor output as executorch.runtime's ExecuTorchResult: what execute returns when the package was imported
/// with EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT=executorch (numpy arrays otherwise).
struct PyResult {
  py::array array;       ///< The data. Writable even where the result is read-only, so DLPack can export it.
  ScalarType dtype = ScalarType::Float;
  bool readonly = false; ///< A view of the method's memory (clone_outputs=False): the buffer is exported read-only.
};
void set_result_outputs(bool on);
bool result_outputs();

/// Whether a dim order is 0, 1, ..., rank - 1 (row-major); an empty one is.
bool is_contiguous_order(std::span<const uint8_t> order);

/// A tensor's byte strides, held inline (no allocation on the per-call path).
struct ByteStrides {
  std::array<py::ssize_t, kMaxTensorRank> values{};
  size_t rank = 0;
  const py::ssize_t* data() const { return values.data(); }
  const py::ssize_t* begin() const { return values.data(); }
  const py::ssize_t* end() const { return values.data() + rank; }
  py::ssize_t operator[](size_t d) const { return values[d]; }
};

/// Byte strides of a tensor of `sizes` laid out in `dim_order` (empty: contiguous); throws
/// etnp::Error(InvalidArgument) past kMaxTensorRank dims.
ByteStrides byte_strides(std::span<const int64_t> sizes, std::span<const uint8_t> dim_order, size_t element_size);

/// Description of a numpy array for messages: "int64 array of shape (2, 3), strides (24, 8)".
std::string describe_array(const py::array& array);

// --- ETDump ---------------------------------------------------------------------------------------------------

/// Collects the profiling record of a program loaded with enable_etdump=True: one "Default" block per method
/// load and one "Execute" block per execute call, plus (with a debug buffer) the method outputs of each call.
class EtdumpRecorder {
 public:
  explicit EtdumpRecorder(size_t debug_buffer_size) : debug_capacity_(debug_buffer_size) {}

  void record_load(uint64_t start_ns, uint64_t end_ns);
  /// `events` are the method's instruction events of this call; `outputs` its outputs (data still valid).
  void record_execute(const std::vector<ProfileEvent>& events, uint64_t start_ns, uint64_t end_ns,
                      const std::vector<Value>& outputs);
  /// Everything recorded since the last take(): the ETDump bytes and the used part of the debug buffer. Clears.
  std::pair<std::vector<uint8_t>, std::vector<uint8_t>> take();
  size_t debug_buffer_size() const { return debug_capacity_; }

 private:
  std::mutex mutex_;
  std::vector<format::RunBlock> blocks_;
  std::vector<uint8_t> debug_;
  size_t debug_capacity_;
};

/// Decodes an ETDump into Python dicts (for tests and tools).
py::list etdump_to_python(const std::vector<format::RunBlock>& blocks);

// --- Program and Method -----------------------------------------------------------------------------------------

/// What a Program and all the Methods loaded from it share.
/// Objects of the bindings alive now, for the soak tests' leak check (_C._live_objects).
struct LiveObjects {
  static inline std::atomic<int64_t> programs{0};
  static inline std::atomic<int64_t> methods{0};
};

struct ProgramState {
  explicit ProgramState(Program p) : program(std::move(p)) { ++LiveObjects::programs; }
  ~ProgramState() { --LiveObjects::programs; }
  ProgramState(const ProgramState&) = delete;
  ProgramState& operator=(const ProgramState&) = delete;
  Program program;
  std::unique_ptr<EtdumpRecorder> recorder;  ///< Null unless loaded with enable_etdump=True.
  /// What pickling the Program (and its Methods) writes: the arguments of the package's _unpickle_program,
  /// set by Runtime.load_program (null: the program cannot be pickled). Read and written with the GIL held.
  std::shared_ptr<PyRef> pickle_state;
};

class PyMethod {
 public:
  PyMethod(std::shared_ptr<ProgramState> state, std::unique_ptr<Method> method);
  ~PyMethod() { --LiveObjects::methods; }
  PyMethod(const PyMethod&) = delete;
  PyMethod& operator=(const PyMethod&) = delete;

  const MethodMeta& meta() const { return method_->meta(); }
  const std::shared_ptr<ProgramState>& state() const { return state_; }
  /// Runs the method; `self` is this method's Python object (the base of outputs that are views).
  py::list execute(py::handle self, py::handle inputs, bool clone_outputs);
  void set_output(py::handle tensor, py::handle index);

 private:
  std::shared_ptr<ProgramState> state_;
  std::unique_ptr<Method> method_;
  /// Throws InvalidArgument when a bound output shares memory with one of `inputs`. Called with mutex_ held.
  void check_bound_outputs_against(const PreparedInputs& inputs) const;

  std::mutex mutex_;                          ///< Serializes every use of method_.
  std::vector<std::shared_ptr<PyRef>> bound_; ///< Per output: the caller's array from set_output, or null.
  std::vector<std::span<const uint8_t>> bound_memory_;  ///< Per output: that array's bytes (empty: none bound).
  std::vector<bool> written_inputs_;          ///< Per input: Method::writes_input.
};

class PyProgram {
 public:
  explicit PyProgram(std::shared_ptr<ProgramState> state);

  const std::vector<std::string>& method_names() const { return names_; }
  /// The loaded method (loaded once, then cached). Throws BindingError(MethodNotFound) for unknown names.
  std::shared_ptr<PyMethod> load_method(const std::string& name);
  MethodMeta metadata(const std::string& name) const;
  std::shared_ptr<PyMethod> load_method_arg(py::handle name) { return load_method(str_arg(name, "method name")); }
  MethodMeta metadata_arg(py::handle name) const { return metadata(str_arg(name, "method name")); }
  bool has_etdump() const { return state_->recorder != nullptr; }
  const std::shared_ptr<ProgramState>& state() const { return state_; }
  void write_etdump_result_to_file(py::handle etdump_path, py::handle debug_path);

 private:
  void require_method(const std::string& name) const;

  std::shared_ptr<ProgramState> state_;
  std::vector<std::string> names_;
  std::mutex cache_mutex_;
  std::map<std::string, std::shared_ptr<PyMethod>, std::less<>> cache_;
};

}  // namespace etnp::python
