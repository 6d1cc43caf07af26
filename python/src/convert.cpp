// numpy <-> etnp conversions and error translation.
#include <algorithm>
#include <array>
#include <bit>
#include <sstream>

#include "binding.h"

namespace etnp::python {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// --- Errors ---------------------------------------------------------------------------------------------------

namespace {

// Leaked on purpose: these live until the process exits and must not be released after the interpreter is gone.
py::dict* g_error_classes = nullptr;
py::object* g_bfloat16_dtype = nullptr;

py::object optional_int(int64_t v) { return v < 0 ? py::object(py::none()) : py::object(py::int_(v)); }

py::object error_class(const char* key) {
  if (g_error_classes != nullptr && g_error_classes->contains(key)) return (*g_error_classes)[key];
  return py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
}

void set_python_error(const py::object& cls, const std::string& raw_message, const py::dict& attributes) {
  const std::string message = printable(raw_message);
  py::object exc;
  if (cls.ptr() == PyExc_RuntimeError) {
    exc = cls(message);
  } else {
    exc = cls(message, **attributes);
  }
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

// Strings from the runtime or from the caller, as attribute values of the exception.
py::object printable_str(const std::string& s) { return s.empty() ? py::object(py::none()) : py::object(py::str(printable(s))); }

}  // namespace

void set_error_classes(const py::dict& classes) {
  if (g_error_classes == nullptr) g_error_classes = new py::dict();
  *g_error_classes = classes;
}

void raise_error(const Error& error) {
  const ErrorContext& c = error.context();
  py::dict attributes;
  attributes["kind"] = error_kind_name(error.kind());
  attributes["detail"] = py::str(printable(error.detail()));
  attributes["method"] = printable_str(c.method);
  attributes["instruction"] = optional_int(c.instruction);
  attributes["operator"] = printable_str(c.op);
  attributes["backend"] = printable_str(c.backend);
  attributes["input_index"] = optional_int(c.input_index);
  // Rebuilt from its parts rather than what(): a C string, which ends at the first NUL byte of the detail.
  set_python_error(error_class(error_kind_name(error.kind())), format_error_message(error.detail(), c), attributes);
}

void raise_binding_error(const BindingError& error) {
  py::dict attributes;
  attributes["kind"] = error_kind_name(ErrorKind::InvalidArgument);
  attributes["detail"] = py::str(printable(error.what()));
  attributes["method"] = printable_str(error.method());
  set_python_error(error_class(error.class_key()), error.what(), attributes);
}

size_t index_arg(const std::string& method, const char* what, py::handle obj, size_t count) {
  const bool integer = (py::isinstance<py::int_>(obj) || PyIndex_Check(obj.ptr())) && !py::isinstance<py::bool_>(obj) &&
                       !py::isinstance<py::float_>(obj);
  if (!integer) {
    throw BindingError("InvalidType", std::string(what) + " index must be an int, got " + type_name(obj), method);
  }
  long long index = -1;
  bool overflow = false;
  {
    py::object number = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
    if (!number) throw py::error_already_set();
    int sign = 0;
    index = PyLong_AsLongLongAndOverflow(number.ptr(), &sign);
    overflow = sign != 0;
  }
  if (overflow || index < 0 || static_cast<unsigned long long>(index) >= count) {
    const std::string plural = std::string(what) + (count == 1 ? "" : "s");
    const std::string valid = count == 0 ? "it has none" : count == 1 ? "the only valid index is 0"
                                                                       : "valid indices are 0 to " + std::to_string(count - 1);
    throw BindingError("IndexOutOfRange",
                       "method '" + method + "' has " + std::to_string(count) + " " + plural + ", there is no " + what +
                           " " + (overflow ? short_repr(obj, 30) : std::to_string(index)) + " (" + valid + ")",
                       method);
  }
  return static_cast<size_t>(index);
}

std::string str_arg(py::handle obj, const char* what) {
  if (!py::isinstance<py::str>(obj)) {
    throw BindingError("InvalidType", std::string(what) + " must be a str, got " + type_name(obj));
  }
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
  if (data == nullptr) {  // lone surrogates: not UTF-8
    PyErr_Clear();
    throw Error(ErrorKind::InvalidArgument, std::string(what) + " " + short_repr(obj) + " is not valid Unicode text");
  }
  return std::string(data, static_cast<size_t>(size));
}

bool bool_arg(py::handle obj, const char* what) {
  if (obj.is_none()) return false;
  if (py::isinstance<py::bool_>(obj)) return obj.ptr() == Py_True;
  // What pybind11's bool conversion takes: an object with a truth value of its own (numpy.bool_, int, ...), not
  // a container whose truth is its length.
  PyNumberMethods* number = Py_TYPE(obj.ptr())->tp_as_number;
  if (number == nullptr || number->nb_bool == nullptr) {
    throw BindingError("InvalidType", std::string(what) + " must be a bool, got " + type_name(obj));
  }
  const int truth = PyObject_IsTrue(obj.ptr());
  if (truth < 0) throw py::error_already_set();
  return truth != 0;
}

std::string path_arg(py::handle obj, const char* what) {
  py::object path = py::reinterpret_steal<py::object>(PyOS_FSPath(obj.ptr()));
  if (!path) {
    PyErr_Clear();
    throw BindingError("InvalidType", std::string(what) + " must be a path (str or os.PathLike), got " + type_name(obj));
  }
  if (py::isinstance<py::bytes>(path)) {
    std::string bytes = path.cast<std::string>();
    if (bytes.size() > 4096 || bytes.find('\0') != std::string::npos) {
      throw BindingError("InvalidType", std::string(what) + " must be a path (str or os.PathLike), got bytes of " +
                                            std::to_string(bytes.size()) + " bytes that cannot be a path (file contents?)");
    }
    return bytes;
  }
  std::string encoded = py::module_::import("os").attr("fsencode")(path).cast<std::string>();
  if (encoded.find('\0') != std::string::npos) {
    throw Error(ErrorKind::InvalidArgument, std::string(what) + " " + short_repr(path) + " contains a NUL character");
  }
  return encoded;
}

int64_t int_arg(py::handle obj, const char* what) {
  if (py::isinstance<py::bool_>(obj) || py::isinstance<py::float_>(obj) || !PyIndex_Check(obj.ptr())) {
    throw BindingError("InvalidType", std::string(what) + " must be an int, got " + type_name(obj));
  }
  py::object number = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!number) throw py::error_already_set();
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
  if (overflow != 0) throw Error(ErrorKind::InvalidArgument, std::string(what) + " " + short_repr(obj, 30) + " does not fit in int64");
  return value;
}

std::vector<int64_t> int_list_arg(py::handle obj, const char* what) {
  if (py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj) || PyByteArray_Check(obj.ptr()) ||
      !PySequence_Check(obj.ptr())) {
    throw BindingError("InvalidType", std::string(what) + " must be a list of ints, got " + type_name(obj));
  }
  py::sequence items = py::reinterpret_borrow<py::sequence>(obj);
  std::vector<int64_t> values;
  values.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    py::object item = items[i];
    if (py::isinstance<py::bool_>(item) || py::isinstance<py::float_>(item) || !PyIndex_Check(item.ptr())) {
      throw BindingError("InvalidType", std::string(what) + " must be a list of ints, got " + type_name(item) +
                                            " at index " + std::to_string(i));
    }
    values.push_back(int_arg(item, what));
  }
  return values;
}

std::string type_name(py::handle obj) {
  return printable(py::str(py::type::of(obj).attr("__name__")).cast<std::string>(), 100);
}

std::string short_repr(py::handle obj, size_t limit) {
  std::string text;
  try {
    py::object shown = py::reinterpret_borrow<py::object>(obj);
    bool cut = false;
    if ((py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj) || PyByteArray_Check(obj.ptr())) &&
        py::len(obj) > limit) {
      shown = obj[py::slice(0, static_cast<py::ssize_t>(limit), 1)];
      cut = true;
    }
    text = py::repr(shown).cast<std::string>();
    if (cut) text += "...";
  } catch (const py::error_already_set&) {  // e.g. an int past sys.get_int_max_str_digits()
    text = "<" + type_name(obj) + ">";
  }
  return printable(text, limit + 10);
}

std::string printable(std::string_view text, size_t limit) {
  std::string out;
  size_t i = 0;
  auto escape = [&out](unsigned char c) {
    static const char* digits = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  while (i < text.size() && out.size() < limit) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        escape(c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A UTF-8 sequence is kept when well formed; otherwise its first byte is escaped.
    size_t length = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
    bool ok = length != 0 && i + length <= text.size();
    for (size_t k = 1; ok && k < length; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (ok && length == 3) {
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // overlong, surrogate
    } else if (ok && length == 4) {
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      escape(c);
      ++i;
    }
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size() - i) + " more bytes)";
  return out;
}

void throw_invalid(const std::string& method, const std::string& message) {
  ErrorContext c;
  c.method = method;
  throw Error(ErrorKind::InvalidArgument, message, c);
}

// --- dtypes ---------------------------------------------------------------------------------------------------

void set_bfloat16_dtype(py::object dtype) {
  if (g_bfloat16_dtype == nullptr) g_bfloat16_dtype = new py::object();
  *g_bfloat16_dtype = dtype.is_none() ? py::object() : py::object(py::dtype::from_args(dtype));
}

bool bfloat16_is_native() { return g_bfloat16_dtype != nullptr && *g_bfloat16_dtype; }

namespace {

// The element types numpy has, under the names of the scalar-type table (etnp/scalar_type.h): bfloat16 is
// ml_dtypes' dtype of that name where it is installed, raw uint16 bits otherwise.
constexpr ScalarType kNumpyTypes[] = {
    ScalarType::Float, ScalarType::Double, ScalarType::Half,   ScalarType::BFloat16, ScalarType::Long,
    ScalarType::Int,   ScalarType::Short,  ScalarType::Char,   ScalarType::Byte,     ScalarType::UInt16,
    ScalarType::UInt32, ScalarType::UInt64, ScalarType::Bool};

bool has_numpy_dtype(ScalarType type) {
  return std::find(std::begin(kNumpyTypes), std::end(kNumpyTypes), type) != std::end(kNumpyTypes);
}

/// The element type of numpy's built-in type number `type_num` (NPY_BOOL = 0 ... NPY_DOUBLE = 12, NPY_HALF =
/// 23: part of numpy's C ABI, the same in numpy 1 and 2); nullopt for the others.
std::optional<ScalarType> builtin_scalar_type(int type_num) {
  constexpr bool long_is_64 = sizeof(long) == 8;
  switch (type_num) {
    case 0: return ScalarType::Bool;
    case 1: return ScalarType::Char;
    case 2: return ScalarType::Byte;
    case 3: return ScalarType::Short;
    case 4: return ScalarType::UInt16;
    case 5: return ScalarType::Int;
    case 6: return ScalarType::UInt32;
    case 7: return long_is_64 ? ScalarType::Long : ScalarType::Int;
    case 8: return long_is_64 ? ScalarType::UInt64 : ScalarType::UInt32;
    case 9: return ScalarType::Long;
    case 10: return ScalarType::UInt64;
    case 11: return ScalarType::Float;
    case 12: return ScalarType::Double;
    case 23: return ScalarType::Half;
    default: return std::nullopt;
  }
}

}  // namespace

std::optional<ScalarType> scalar_type_of(const py::dtype& dtype) {
  // Built-in types by their type number: a dtype's name is a Python-level property in numpy 1, which would cost
  // more than a small method's whole run on every input. type_num sits at the same offset of the descriptor in
  // numpy 1 and 2.
  if (std::optional<ScalarType> type = builtin_scalar_type(py::detail::array_descriptor_proxy(dtype.ptr())->type_num)) {
    return type;
  }
  // The others by name (the table's: ml_dtypes' "bfloat16"), whatever the byte order.
  const std::optional<ScalarType> type = scalar_type_from_name(py::str(dtype.attr("name")).cast<std::string>());
  if (!type || !has_numpy_dtype(*type)) return std::nullopt;
  return type;
}

bool has_native_byte_order(const py::dtype& dtype) {
  // '=' native, '|' not applicable (one byte), '<' or '>' explicit (numpy writes '=' for the native one).
  const char order = py::detail::array_descriptor_proxy(dtype.ptr())->byteorder;
  constexpr char kNative = std::endian::native == std::endian::little ? '<' : '>';
  return order == '=' || order == '|' || order == kNative;
}

py::dtype numpy_dtype_of(ScalarType type, ErrorKind kind) {
  if (type == ScalarType::BFloat16) {
    if (bfloat16_is_native()) return py::reinterpret_borrow<py::dtype>(*g_bfloat16_dtype);
    return py::dtype("uint16");
  }
  if (has_numpy_dtype(type)) {
    // Made once per type (numpy's built-in descriptors live as long as numpy): parsing the name on every output
    // of every call would cost more than a small method's run. Never destroyed, so no Python object outlives
    // the interpreter in a static destructor.
    static auto* const dtypes = [] {
      auto* made = new std::array<py::object, kNumScalarTypes>();
      for (ScalarType t : kNumpyTypes) {
        if (t != ScalarType::BFloat16) (*made)[static_cast<size_t>(t)] = py::dtype(std::string(scalar_type_name(t)));
      }
      return made;
    }();
    return py::reinterpret_borrow<py::dtype>((*dtypes)[static_cast<size_t>(type)]);
  }
  std::string supported;
  for (const std::string& name : supported_dtype_names()) supported += (supported.empty() ? "" : ", ") + name;
  throw Error(kind, "dtype " + std::string(scalar_type_name(type)) + " has no numpy equivalent (supported: " +
                        supported + ")");
}

std::vector<std::string> supported_dtype_names() {
  std::vector<std::string> names;
  for (ScalarType type : kNumpyTypes) names.emplace_back(scalar_type_name(type));
  return names;
}

// --- Inputs ---------------------------------------------------------------------------------------------------

namespace {

template <typename T>
std::string list_string(const std::vector<T>& v, const char* open = "[", const char* close = "]") {
  std::ostringstream os;
  os << open;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << static_cast<int64_t>(v[i]);
  if (v.size() == 1 && std::string(open) == "(") os << ",";
  os << close;
  return os.str();
}

std::string describe_expected(const TensorInfo& info) {
  std::ostringstream os;
  os << scalar_type_name(info.dtype) << " tensor of shape " << (info.dynamism == ShapeDynamism::Static ? "" : "up to ")
     << list_string(info.sizes);
  if (!is_contiguous_order(info.dim_order)) {
    os << " in dim order " << list_string(info.dim_order);
    if (info.dim_order.size() == 4 || info.dim_order.size() == 5) {
      const bool channels_last = info.dim_order[0] == 0 && info.dim_order.back() == 1;
      if (channels_last) os << " (channels-last)";
    }
  }
  const ByteStrides strides = byte_strides(info.sizes, info.dim_order, element_size(info.dtype));
  os << ", strides " << list_string(std::vector<py::ssize_t>(strides.begin(), strides.end()), "(", ")");
  return os.str();
}

[[noreturn]] void reject(size_t index, const std::string& message) {
  ErrorContext c;
  c.input_index = static_cast<int64_t>(index);
  throw Error(ErrorKind::InvalidArgument, message, c);
}

bool is_numpy_array(py::handle obj) { return py::isinstance<py::array>(obj); }

bool g_result_outputs = false;

/// Turns a tensor-like input into a numpy array: ndarray, numpy scalar, __dlpack__ producer or buffer.
py::array as_array(size_t index, py::handle obj, const TensorInfo& info) {
  if (is_numpy_array(obj)) return py::reinterpret_borrow<py::array>(obj);
  if (py::isinstance<PyResult>(obj)) return obj.cast<const PyResult&>().array;
  py::module_ np = py::module_::import("numpy");
  if (py::isinstance(obj, np.attr("generic"))) return np.attr("asarray")(obj);
  if (py::hasattr(obj, "__dlpack__")) {
    try {
      return np.attr("from_dlpack")(obj);
    } catch (py::error_already_set& e) {
      reject(index, "cannot import the " + std::string(py::str(py::type::of(obj).attr("__name__"))) +
                        " object through DLPack (" + e.what() + "); expected " + describe_expected(info));
    }
  }
  if (PyObject_CheckBuffer(obj.ptr())) {
    // memoryview keeps the buffer's format and shape (np.asarray(bytes) would make a string scalar).
    return np.attr("asarray")(py::memoryview(py::reinterpret_borrow<py::object>(obj)));
  }
  reject(index, "expected a numpy array (or a buffer / __dlpack__ object) holding a " + describe_expected(info) +
                    ", got " + std::string(py::str(py::type::of(obj).attr("__name__"))));
}

/// True when every dimension of size > 1 has the stride the dim order gives it.
bool strides_match(std::span<const py::ssize_t> sizes, std::span<const py::ssize_t> strides,
                   const ByteStrides& expected) {
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1 && strides[d] != expected[d]) return false;
  }
  return true;
}

/// True when the array covers its elements without gaps in some order of its dimensions (C order,
/// channels-last, Fortran order, ...). Such an array has a layout of its own; others (slices, broadcasts,
/// reversed views) have none and are copied into the layout the method wants.
bool is_dense(std::span<const py::ssize_t> sizes, std::span<const py::ssize_t> strides, py::ssize_t itemsize) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  py::ssize_t expected = itemsize;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (strides[*it] != expected) return false;
    expected *= static_cast<py::ssize_t>(sizes[*it]);
  }
  return true;
}

// numpy's shapes are read in place as the TensorView's sizes.
static_assert(std::is_same_v<py::ssize_t, int64_t>, "numpy's npy_intp is not int64_t on this platform");

void tensor_input(size_t index, py::handle obj, const TensorInfo& info, bool written, PreparedInput& prepared,
                  std::vector<std::pair<py::array, py::array>>& write_back) {
  py::array array = as_array(index, obj, info);
  const py::array given_array = array;
  std::optional<ScalarType> given = scalar_type_of(array.dtype());
  if (!given) {
    reject(index, "unsupported dtype " + std::string(py::str(array.dtype())) + " (supported: float32, float64, "
                  "float16, bfloat16, int64, int32, int16, int8, uint8, uint16, uint32, uint64, bool); expected " +
                      describe_expected(info));
  }
  // Raw uint16 bits stand for bfloat16 only where the method wants bfloat16 (numpy has no bfloat16 of its own).
  if (*given == ScalarType::UInt16 && info.dtype == ScalarType::BFloat16) given = ScalarType::BFloat16;
  if (*given != info.dtype) {
    reject(index, "expected " + describe_expected(info) + ", got " + describe_array(array) + " (dtype " +
                      std::string(scalar_type_name(*given)) + " instead of " + std::string(scalar_type_name(info.dtype)) +
                      ")");
  }
  if (static_cast<size_t>(array.ndim()) != info.sizes.size()) {
    reject(index, "expected " + describe_expected(info) + ", got " + describe_array(array) + " (rank " +
                      std::to_string(array.ndim()) + " instead of " + std::to_string(info.sizes.size()) + ")");
  }
  if (!has_native_byte_order(array.dtype())) {
    array = array.attr("astype")(array.dtype().attr("newbyteorder")("="));
  }
  const auto rank = static_cast<size_t>(array.ndim());
  const std::span<const py::ssize_t> sizes(array.shape(), rank);
  const std::span<const py::ssize_t> strides(array.strides(), rank);
  const py::ssize_t itemsize = array.itemsize();
  const std::vector<uint8_t>& order = info.dim_order;
  const bool empty = std::any_of(sizes.begin(), sizes.end(), [](py::ssize_t s) { return s == 0; });
  const bool layout_matches =
      empty || strides_match(sizes, strides, byte_strides(sizes, order, static_cast<size_t>(itemsize)));
  if (!layout_matches && is_dense(sizes, strides, itemsize)) {
    reject(index, "memory layout not accepted: expected " + describe_expected(info) + ", got " + describe_array(array) +
                      (is_contiguous_order(order) ? "; make it C-contiguous (numpy.ascontiguousarray)"
                                                               : "; lay it out in the method's dim order"));
  }
  // Kernels may load elements with aligned instructions: a misaligned array (a view into a byte buffer at an odd
  // offset) is copied like an array with no layout of its own.
  const bool aligned = (array.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) != 0;
  // The method writes this input in place: it writes the array given, unless the array may not be written.
  const bool read_only_but_written = written && !array.writeable();
  if (!layout_matches || !aligned || read_only_but_written) {
    // Copy it into the method's dim order (an empty array in physical order, viewed back in logical order).
    py::module_ np = py::module_::import("numpy");
    std::vector<py::ssize_t> physical(order.size()), axes(order.size());
    for (size_t k = 0; k < order.size(); ++k) {
      physical[k] = sizes[order[k]];
      axes[order[k]] = static_cast<py::ssize_t>(k);
    }
    py::array buffer = np.attr("empty")(py::cast(physical), array.dtype());
    py::array view = buffer.attr("transpose")(py::cast(axes));
    np.attr("copyto")(view, array);
    array = view;
  }
  // The method writes a copy: what it writes goes back into the caller's array after the run.
  if (written && array.ptr() != given_array.ptr() && given_array.writeable()) write_back.emplace_back(given_array, array);
  prepared.tensor.dtype = info.dtype;
  prepared.tensor.sizes = std::span<const int64_t>(array.shape(), rank);  // the array's own, kept alive below
  if (!is_contiguous_order(order)) prepared.tensor.dim_order = order;       // empty: contiguous
  prepared.tensor.data = array.data();
  prepared.is_tensor = true;
  prepared.array = std::move(array);
}

Value scalar_input(size_t index, py::handle obj, py::object& keep_alive, const ValueInfo& info) {
  if (obj.is_none()) return std::monostate{};
  if (py::isinstance<py::bool_>(obj)) return obj.cast<bool>();
  if (py::isinstance<py::int_>(obj)) {
    try {
      return obj.cast<int64_t>();
    } catch (const py::cast_error&) {
      reject(index, "the integer " + std::string(py::str(obj)) + " does not fit in int64");
    }
  }
  if (py::isinstance<py::float_>(obj)) return obj.cast<double>();
  if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
  py::module_ np = py::module_::import("numpy");
  const bool numpy_scalar = py::isinstance(obj, np.attr("generic")) ||
                            (is_numpy_array(obj) && py::reinterpret_borrow<py::array>(obj).ndim() == 0);
  if (numpy_scalar && info.tag != Tag::Tensor) return scalar_input(index, obj.attr("item")(), keep_alive, info);
  if (is_numpy_array(obj) || py::hasattr(obj, "__dlpack__")) {
    // A tensor where the method wants a scalar: let the runtime say what it expected.
    TensorInfo any;
    py::array array = as_array(index, obj, any);
    auto dtype = scalar_type_of(array.dtype());
    TensorRef ref;
    ref.dtype = dtype.value_or(ScalarType::Float);
    ref.sizes.assign(array.shape(), array.shape() + array.ndim());
    ref.data = array.data();
    keep_alive = array;
    return ref;
  }
  reject(index, std::string("expected ") + tag_name(info.tag) + ", got a Python " +
                    std::string(py::str(py::type::of(obj).attr("__name__"))));
}

}  // namespace

void set_result_outputs(bool on) { g_result_outputs = on; }
bool result_outputs() { return g_result_outputs; }

bool is_contiguous_order(std::span<const uint8_t> order) {
  for (size_t d = 0; d < order.size(); ++d) {
    if (order[d] != d) return false;
  }
  return true;
}

ByteStrides byte_strides(std::span<const int64_t> sizes, std::span<const uint8_t> dim_order, size_t element_size) {
  ByteStrides bytes;
  bytes.rank = sizes.size();
  if (bytes.rank > bytes.values.size()) {
    throw Error(ErrorKind::InvalidArgument, "a tensor of rank " + std::to_string(bytes.rank) + " (at most " +
                                                std::to_string(kMaxTensorRank) + " dims are supported)");
  }
  // Innermost first, as strides_from_dim_order: each dim's stride is the product of the sizes inside it.
  py::ssize_t running = static_cast<py::ssize_t>(element_size);
  for (size_t k = bytes.rank; k-- > 0;) {
    const size_t d = dim_order.empty() ? k : dim_order[k];
    bytes.values[d] = running;
    running *= sizes[d] == 0 ? 1 : static_cast<py::ssize_t>(sizes[d]);
  }
  return bytes;
}

std::string describe_array(const py::array& array) {
  std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
  std::vector<int64_t> strides(array.strides(), array.strides() + array.ndim());
  return std::string(py::str(array.dtype())) + " array of shape " + list_string(shape, "(", ")") + ", strides " +
         list_string(strides, "(", ")");
}

namespace {

bool isinstance_of(py::handle obj, const char* module, const char* name) {
  const int result = PyObject_IsInstance(obj.ptr(), py::module_::import(module).attr(name).ptr());
  if (result < 0) throw py::error_already_set();
  return result != 0;
}

/// Whether `inputs`, neither None, a list nor a tuple, can be one input value (an array, a buffer, a DLPack object,
/// a scalar, ...) or a sequence of them; not a mapping, a set or an iterator, which hold no ordered inputs.
bool is_single_value(py::handle inputs) {
  if (py::isinstance<py::str>(inputs) || py::isinstance<py::bytes>(inputs) || py::isinstance<py::array>(inputs) ||
      PyObject_CheckBuffer(inputs.ptr())) {
    return true;
  }
  if (PyIter_Check(inputs.ptr()) || PyAnySet_Check(inputs.ptr())) return false;
  return !isinstance_of(inputs, "collections.abc", "Mapping") && !isinstance_of(inputs, "collections.abc", "Set") &&
         !isinstance_of(inputs, "collections.abc", "Iterator") && !isinstance_of(inputs, "collections.abc", "MappingView");
}

/// A collections.abc.Sequence of inputs (a deque, a range, ...) that is not itself a value (str, bytes, array).
bool is_sequence_of_values(py::handle inputs) {
  if (py::isinstance<py::str>(inputs) || py::isinstance<py::bytes>(inputs) || py::isinstance<py::array>(inputs) ||
      PyObject_CheckBuffer(inputs.ptr()) || py::hasattr(inputs, "__dlpack__")) {
    return false;
  }
  return isinstance_of(inputs, "collections.abc", "Sequence");
}

}  // namespace

void prepare_inputs(const MethodMeta& meta, py::handle inputs, const std::vector<bool>& written,
                    PreparedInputs& prepared) {
  // The input objects: a tuple's own items, or a tuple made of a list or other sequence (converting an input may
  // run Python code, __dlpack__ or __array__, that changes a list).
  py::object holder;
  PyObject* single = nullptr;
  if (inputs.is_none()) {
    // No inputs.
  } else if (PyTuple_Check(inputs.ptr())) {
    holder = py::reinterpret_borrow<py::object>(inputs);
  } else if (PyList_Check(inputs.ptr())) {
    holder = py::reinterpret_steal<py::object>(PyList_AsTuple(inputs.ptr()));
  } else if (!is_single_value(inputs)) {
    // A dict, set, generator or iterator would otherwise be taken as one input, and the message would be about
    // a count; executorch.runtime takes a sequence.
    throw BindingError("InvalidType", "method '" + meta.name + "': inputs must be a sequence (list or tuple) of " +
                                          std::to_string(meta.inputs.size()) + " input value" +
                                          (meta.inputs.size() == 1 ? "" : "s") + " (arrays or Python scalars), got " +
                                          type_name(inputs), meta.name);
  } else if (is_sequence_of_values(inputs)) {
    holder = py::reinterpret_steal<py::object>(PySequence_Tuple(inputs.ptr()));  // deque, range, ...
  } else {
    single = inputs.ptr();  // one input given on its own
  }
  if (!inputs.is_none() && !holder && single == nullptr) throw py::error_already_set();
  PyObject* const* items = holder ? reinterpret_cast<PyTupleObject*>(holder.ptr())->ob_item : &single;
  const size_t count = holder ? static_cast<size_t>(PyTuple_GET_SIZE(holder.ptr())) : single != nullptr ? 1 : 0;
  if (count != meta.inputs.size()) {
    ErrorContext c;
    c.method = meta.name;
    std::string hint;
    if (single != nullptr && meta.inputs.size() != 1) {
      hint = " (a single " + type_name(inputs) + " was given: pass a list or tuple with one value per input)";
    }
    throw Error(ErrorKind::InvalidArgument,
                "expected " + std::to_string(meta.inputs.size()) + " input" + (meta.inputs.size() == 1 ? "" : "s") +
                    ", got " + std::to_string(count) + hint,
                c);
  }
  for (size_t i = 0; i < count; ++i) {
    const ValueInfo& info = meta.inputs[i];
    PreparedInput& input = prepared.inputs[i];
    try {
      if (info.tag == Tag::Tensor) {
        tensor_input(i, items[i], info.tensor, written[i], input, prepared.write_back);
      } else {
        input.value = scalar_input(i, items[i], input.array, info);
      }
    } catch (const Error& e) {
      ErrorContext c;
      c.method = meta.name;
      throw e.with_context(c);
    }
  }
}

}  // namespace etnp::python
