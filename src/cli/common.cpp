#include <cctype>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "cli/cli.h"

namespace etnp::cli {

Args::Args(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) args_.emplace_back(argv[i]);
  used_.assign(args_.size(), false);
}

bool Args::has_flag(const std::string& flag) {
  bool found = false;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!used_[i] && args_[i] == flag) {
      used_[i] = true;
      found = true;
    }
  }
  return found;
}

std::vector<std::string> Args::values(const std::string& option) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (used_[i]) continue;
    if (args_[i] == option) {
      if (i + 1 >= args_.size()) usage_error(option + " needs a value");
      used_[i] = used_[i + 1] = true;
      out.push_back(args_[i + 1]);
      ++i;
    } else if (args_[i].rfind(option + "=", 0) == 0) {
      used_[i] = true;
      out.push_back(args_[i].substr(option.size() + 1));
    }
  }
  return out;
}

std::optional<std::string> Args::single_value(const std::string& option) {
  auto v = values(option);
  if (v.size() > 1) usage_error(option + " given more than once");
  if (v.empty()) return std::nullopt;
  return v[0];
}

std::string Args::value(const std::string& option, const std::string& fallback) {
  return single_value(option).value_or(fallback);
}

int64_t Args::int_value(const std::string& option, int64_t fallback, int64_t min, int64_t max) {
  const auto v = single_value(option);
  if (!v) return fallback;
  int64_t n = 0;
  if (!parse_int(*v, &n)) usage_error(option + " takes an integer, got '" + shortened(*v) + "'");
  if (n < min || n > max) {
    usage_error(option + " must be " + (max == std::numeric_limits<int64_t>::max() ? ">= " + std::to_string(min)
                                                                                    : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]") +
                ", got " + *v);
  }
  return n;
}

double Args::double_value(const std::string& option, double fallback, double min, double max) {
  const auto v = single_value(option);
  if (!v) return fallback;
  double d = 0;
  if (!parse_double(*v, &d)) usage_error(option + " takes a number, got '" + shortened(*v) + "'");
  if (d < min || d > max) {
    char range[96];
    std::snprintf(range, sizeof range, "[%g, %g]", min, max);
    usage_error(option + " must be in " + range + ", got " + shortened(*v));
  }
  return d;
}

std::vector<std::string> Args::positionals() {
  std::vector<std::string> out;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (used_[i]) continue;
    if (args_[i].size() > 1 && args_[i][0] == '-' && !std::isdigit(static_cast<unsigned char>(args_[i][1]))) {
      usage_error("unknown option '" + shortened(args_[i]) + "' (try --help)");
    }
    out.push_back(args_[i]);
  }
  return out;
}

void usage_error(const std::string& message) { throw Error(ErrorKind::InvalidArgument, message); }

std::string shortened(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return s.substr(0, cut) + "...";
}

namespace {

// "--limit NAME=N": N a count, or bytes with a K, M, G or T suffix (powers of 1024).
void set_limit(ResourceLimits& limits, const std::string& spec) {
  std::string names;
  for (std::string_view n : ResourceLimits::names()) names += (names.empty() ? "" : ", ") + std::string(n);
  const size_t eq = spec.find('=');
  const std::string name = spec.substr(0, eq);
  if (eq == std::string::npos || !limits.set(name, 0)) {
    usage_error("--limit takes NAME=N with NAME one of " + names + ", got '" + shortened(spec) + "'");
  }
  std::string number = spec.substr(eq + 1);
  uint64_t scale = 1;
  if (!number.empty()) {
    const std::string units = "KMGT";
    if (const size_t u = units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(number.back()))));
        u != std::string::npos) {
      scale = uint64_t{1} << (10 * (u + 1));
      number.pop_back();
    }
  }
  int64_t n = 0;
  uint64_t value = 0;
  if (!parse_int(number, &n) || n < 0 || __builtin_mul_overflow(static_cast<uint64_t>(n), scale, &value)) {
    usage_error("--limit " + name + " takes a count >= 0 (bytes may end in K, M, G or T; 0: no limit), got '" +
                shortened(spec.substr(eq + 1)) + "'");
  }
  limits.set(name, value);
}

}  // namespace

LoadOptions load_options_from(Args& args) {
  LoadOptions options;
  options.data_files = args.values("--data");
  for (const std::string& spec : args.values("--limit")) set_limit(options.limits, spec);
  return options;
}

Program load_program(const std::string& path, const LoadOptions& options) {
  try {
    return Program::load_file(path, options);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::ProgramLoadError) throw;
    // A .ptd (FlatTensor) file has the identifier "FT01" where a program has "ET12".
    char head[8] = {};
    std::ifstream in(path, std::ios::binary);
    if (in.read(head, sizeof head) && std::memcmp(head + 4, "FT", 2) == 0) {
      throw Error(ErrorKind::ProgramLoadError, std::string(e.what()) + "; '" + shortened(path, 240) +
                                                   "' is a .ptd data file: pass it with --data, after the .pte "
                                                   "program that uses it");
    }
    throw;
  }
}

void make_directories(const std::string& dir, const std::string& flag) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) usage_error(flag + " '" + shortened(dir, 240) + "' exists and is not a directory");
    return;
  }
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_directories(dir.substr(0, slash), flag);
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    usage_error(flag + ": cannot create the directory '" + shortened(dir, 240) + "': " + std::strerror(errno));
  }
}

std::string fill_value(Args& args, const std::string& fallback) {
  const std::string fill = args.value("--fill", fallback);
  if (!fill.empty() && fill != "ones" && fill != "zeros" && fill != "random") {
    usage_error("--fill takes ones, zeros or random, got '" + shortened(fill) + "'");
  }
  return fill;
}

// "--shape 0=1x3x224x224" -> input 0 gets that shape.
std::vector<std::vector<int64_t>> parse_shapes(const std::vector<std::string>& specs, size_t num_inputs) {
  std::vector<std::vector<int64_t>> shapes(num_inputs);
  for (const auto& s : specs) {
    const std::string shown = shortened(s);
    const size_t eq = s.find('=');
    if (eq == std::string::npos) usage_error("--shape takes INDEX=D0xD1x..., got '" + shown + "'");
    int64_t parsed = 0;
    if (!parse_int(s.substr(0, eq), &parsed) || parsed < 0) {
      usage_error("--shape takes INDEX=D0xD1x... with INDEX an input number, got '" + shown + "'");
    }
    if (static_cast<uint64_t>(parsed) >= num_inputs) {
      usage_error("--shape names input " + std::to_string(parsed) + "; the method has " + std::to_string(num_inputs) +
                  " input" + (num_inputs == 1 ? "" : "s"));
    }
    std::vector<int64_t> dims;
    size_t p = eq + 1;
    while (p <= s.size()) {
      size_t x = s.find('x', p);
      if (x == std::string::npos) x = s.size();
      int64_t dim = 0;
      if (x == p || !parse_int(s.substr(p, x - p), &dim) || dim < 0) {
        usage_error("--shape takes INDEX=D0xD1x... with non-negative sizes, got '" + shown + "'");
      }
      dims.push_back(dim);
      p = x + 1;
    }
    shapes[static_cast<size_t>(parsed)] = dims;
  }
  return shapes;
}

namespace {

// The largest value of an integer dtype that --fill writes (the value range of the smaller types).
int64_t integer_max(ScalarType t) {
  switch (t) {
    case ScalarType::Char: return 127;
    case ScalarType::Byte: return 255;
    case ScalarType::Short: return 32767;
    case ScalarType::Int: return 2147483647;
    default: return std::numeric_limits<int64_t>::max();
  }
}

format::NpyArray filled_array(const TensorInfo& info, const std::vector<int64_t>& shape, const std::string& fill,
                              const InputUse& use, std::mt19937_64& rng) {
  format::NpyArray a;
  a.dtype = info.dtype;
  a.shape = shape;
  const int64_t n = a.numel();
  const size_t elem = element_size(info.dtype);
  a.data.assign(static_cast<size_t>(n) * elem, 0);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  // Integers: indices stay in [0, bound) of the tables they index; plain values in [-100, 100] ([0, 100] unsigned).
  int64_t lo = info.dtype == ScalarType::Byte ? 0 : -100, hi = 100;
  if (use.kind == InputUse::Kind::Index) {
    lo = 0;
    hi = std::min(use.bound - 1, integer_max(info.dtype));
  } else if (use.kind == InputUse::Kind::Unknown) {
    lo = hi = 0;
  }
  std::uniform_int_distribution<int64_t> integer(lo, std::max(lo, hi));
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    int64_t iv = 0;
    if (fill == "ones") {
      v = 1;
      iv = 1;
    } else if (fill == "random") {
      if (is_floating_type(info.dtype) || info.dtype == ScalarType::Bool) v = real(rng);
      else iv = integer(rng);
    }
    uint8_t* p = a.data.data() + i * elem;
    switch (info.dtype) {
      case ScalarType::Float: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case ScalarType::Double: std::memcpy(p, &v, 8); break;
      case ScalarType::Long: std::memcpy(p, &iv, 8); break;
      case ScalarType::Int: { int32_t x = static_cast<int32_t>(iv); std::memcpy(p, &x, 4); break; }
      case ScalarType::Short: { int16_t x = static_cast<int16_t>(iv); std::memcpy(p, &x, 2); break; }
      case ScalarType::Char: { int8_t x = static_cast<int8_t>(iv); std::memcpy(p, &x, 1); break; }
      case ScalarType::Byte: { uint8_t x = static_cast<uint8_t>(iv); std::memcpy(p, &x, 1); break; }
      case ScalarType::Bool: *p = fill == "random" ? (v > 0) : static_cast<uint8_t>(fill == "ones"); break;
      default:
        usage_error("--fill does not support dtype " + std::string(scalar_type_name(info.dtype)) + "; pass a .npy input");
    }
  }
  return a;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// "an Int", "a Double".
std::string with_article(const char* name) {
  return std::string(std::strchr("AEIOU", name[0]) != nullptr ? "an " : "a ") + name;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

}  // namespace

PreparedInputs prepare_inputs(const MethodMeta& meta, const std::vector<InputSpec>& specs, const std::string& fill,
                              uint64_t seed, const std::vector<std::vector<int64_t>>& shape_overrides,
                              const std::vector<InputUse>& uses) {
  const auto count = [](size_t n) { return std::to_string(n) + (n == 1 ? " input" : " inputs"); };
  if (specs.size() > meta.inputs.size()) {
    usage_error("method '" + meta.name + "' takes " + count(meta.inputs.size()) + ", " + std::to_string(specs.size()) +
                " were given");
  }
  PreparedInputs prepared;
  prepared.arrays.reserve(meta.inputs.size());
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < meta.inputs.size(); ++i) {
    const ValueInfo& info = meta.inputs[i];
    const std::string which = "input " + std::to_string(i) + " of method '" + meta.name + "'";
    if (i < specs.size()) {
      const std::string& s = specs[i].text;
      if (specs[i].array) {  // an array of a .npz archive
        if (info.tag != Tag::Tensor) {
          usage_error(which + " is " + with_article(tag_name(info.tag)) + ": --input takes a literal for it, not the "
                      "array '" + shortened(s, 240) + "'");
        }
        prepared.arrays.push_back(specs[i].array);
        const auto& a = *prepared.arrays.back();
        prepared.values.emplace_back(TensorRef{a.dtype, a.shape, {}, a.data.data()});
        continue;
      }
      if (i < shape_overrides.size() && !shape_overrides[i].empty()) {
        usage_error("--shape names " + which + ", which --input gives ('" + shortened(s) + "')");
      }
      int64_t iv;
      double dv;
      if (info.tag == Tag::Tensor || (info.tag != Tag::String && s.size() > 4 && s.ends_with(".npy"))) {
        if (!is_file(s)) {
          const std::string what = info.tag == Tag::Tensor ? "a tensor (" + std::string(scalar_type_name(info.tensor.dtype)) +
                                                                 shape_text(info.tensor.sizes) + ")"
                                                           : with_article(tag_name(info.tag));
          usage_error(which + " is " + what + ": --input takes a .npy file for it, and '" + shortened(s, 240) +
                      "' is not a file");
        }
        prepared.arrays.push_back(std::make_shared<format::NpyArray>(format::read_npy(s)));
        const auto& a = *prepared.arrays.back();
        prepared.values.emplace_back(TensorRef{a.dtype, a.shape, {}, a.data.data()});
      } else if (s == "true" || s == "false") {
        prepared.values.emplace_back(s == "true");
      } else if (parse_int(s, &iv)) {
        if (info.tag == Tag::Double) prepared.values.emplace_back(static_cast<double>(iv));
        else prepared.values.emplace_back(iv);
      } else if (parse_double(s, &dv)) {
        prepared.values.emplace_back(dv);
      } else if (info.tag == Tag::String) {
        prepared.values.emplace_back(s);
      } else {
        usage_error(which + " is " + with_article(tag_name(info.tag)) +
                    ": --input takes a literal for it (3, 2.5, true or false), got '" + shortened(s) + "'");
      }
      continue;
    }
    if (info.tag != Tag::Tensor && i < shape_overrides.size() && !shape_overrides[i].empty()) {
      usage_error("--shape names " + which + ", which is " + with_article(tag_name(info.tag)) + ", not a tensor");
    }
    if (info.tag == Tag::Tensor) {
      if (fill.empty()) {
        usage_error("method '" + meta.name + "' takes " + count(meta.inputs.size()) + ", " +
                    std::to_string(specs.size()) + " were given (use --fill to supply the rest)");
      }
      std::vector<int64_t> shape = info.tensor.sizes;
      if (i < shape_overrides.size() && !shape_overrides[i].empty()) shape = shape_overrides[i];
      // An integer input whose use is not known (the program could not be analysed) gets zeros.
      const InputUse use = i < uses.size() ? uses[i] : InputUse{InputUse::Kind::Unknown, 0};
      prepared.arrays.push_back(std::make_shared<format::NpyArray>(filled_array(info.tensor, shape, fill, use, rng)));
      const auto& a = *prepared.arrays.back();
      prepared.values.emplace_back(TensorRef{a.dtype, a.shape, info.tensor.dim_order, a.data.data()});
    } else {
      prepared.values.push_back(info.value);  // the value recorded at export is the only one accepted
    }
  }
  return prepared;
}

std::vector<uint8_t> row_major_bytes(const TensorRef& t) {
  const size_t elem = element_size(t.dtype);
  const size_t rank = t.sizes.size();
  const auto* src = static_cast<const uint8_t*>(t.data);
  bool contiguous = true;
  for (size_t i = 0; i < t.dim_order.size(); ++i) contiguous = contiguous && t.dim_order[i] == i;
  if (contiguous || src == nullptr) {
    return src == nullptr ? std::vector<uint8_t>{} : std::vector<uint8_t>(src, src + static_cast<size_t>(t.numel()) * elem);
  }
  std::vector<int64_t> strides(rank);
  strides_from_dim_order(t.sizes, t.dim_order, strides);
  std::vector<uint8_t> data(static_cast<size_t>(t.numel()) * elem);
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d) off += idx[d] * strides[d];
    std::memcpy(data.data() + i * elem, src + off * elem, elem);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < t.sizes[d]) break;
      idx[d] = 0;
    }
  }
  return data;
}

void write_output(const std::string& dir, size_t index, const Value& v) {
  const std::string path = dir + "/output_" + std::to_string(index) + ".npy";
  if (const auto* t = std::get_if<TensorRef>(&v)) {
    const std::vector<uint8_t> data = row_major_bytes(*t);  // logical (row-major) order
    format::write_npy(path, t->dtype, t->sizes, data.data());
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    format::write_npy(path, ScalarType::Long, {}, i);
  } else if (const auto* d = std::get_if<double>(&v)) {
    format::write_npy(path, ScalarType::Double, {}, d);
  } else if (const auto* b = std::get_if<bool>(&v)) {
    const uint8_t byte = *b ? 1 : 0;
    format::write_npy(path, ScalarType::Bool, {}, &byte);
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    format::write_npy_string(path, *s);  // a 0-d unicode array, as numpy.save(np.array("text")) writes it
  } else {
    // None has no numeric or text form: no file, and a line that says so (the numbering stays the output's).
    std::fprintf(stderr, "note: output %zu is None: no %s written\n", index, path.c_str());
  }
}

bool progress_wanted(Args& args) { return !args.has_flag("--no-progress") && ::isatty(STDERR_FILENO) != 0; }

void Progress::update(int64_t done, const std::string& label) {
  if (!enabled_) return;
  const int64_t filled = std::min<int64_t>(40, done * 40 / total_);
  std::fprintf(stderr, "\r\033[K[%-40s] %lld/%lld%s%s", std::string(static_cast<size_t>(filled), '#').c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), label.empty() ? "" : " ",
               shortened(label).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::clear() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

void Progress::finish() {
  if (drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
  enabled_ = false;
}

std::string value_summary(const Value& v) {
  std::ostringstream os;
  if (const auto* t = std::get_if<TensorRef>(&v)) {
    os << scalar_type_name(t->dtype) << "[";
    for (size_t i = 0; i < t->sizes.size(); ++i) os << (i ? ", " : "") << t->sizes[i];
    os << "]";
    const int64_t n = t->numel();
    if (n > 0 && t->data != nullptr && t->dtype != ScalarType::BFloat16 && t->dtype != ScalarType::Half) {
      double lo = INFINITY, hi = -INFINITY, sum = 0;
      auto get = [&](int64_t i) -> double {
        const auto* p = static_cast<const uint8_t*>(t->data) + i * static_cast<int64_t>(element_size(t->dtype));
        switch (t->dtype) {
          case ScalarType::Float: { float f; std::memcpy(&f, p, 4); return f; }
          case ScalarType::Double: { double d; std::memcpy(&d, p, 8); return d; }
          case ScalarType::Long: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
          case ScalarType::Int: { int32_t x; std::memcpy(&x, p, 4); return x; }
          case ScalarType::Short: { int16_t x; std::memcpy(&x, p, 2); return x; }
          case ScalarType::Char: return static_cast<int8_t>(*p);
          default: return *p;
        }
      };
      for (int64_t i = 0; i < n; ++i) {
        const double x = get(i);
        lo = std::fmin(lo, x);
        hi = std::fmax(hi, x);
        sum += x;
      }
      os << " min " << lo << " max " << hi << " mean " << sum / static_cast<double>(n);
    }
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    os << "Int " << *i;
  } else if (const auto* d = std::get_if<double>(&v)) {
    os << "Double " << *d;
  } else if (const auto* b = std::get_if<bool>(&v)) {
    os << "Bool " << (*b ? "true" : "false");
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    os << "String '" << *s << "'";
  } else {
    os << "None";
  }
  return os.str();
}

}  // namespace etnp::cli
