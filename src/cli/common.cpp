#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "cli/cli.h"

namespace etnp::cli {

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (*end != '\0' || errno != 0 || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

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
  if (!parse_int(*v, &n)) usage_error(option + " takes an integer, got '" + *v + "'");
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
  if (!parse_double(*v, &d)) usage_error(option + " takes a number, got '" + *v + "'");
  if (d < min || d > max) usage_error(option + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + *v);
  return d;
}

std::vector<std::string> Args::positionals() {
  std::vector<std::string> out;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (used_[i]) continue;
    if (args_[i].size() > 1 && args_[i][0] == '-' && !std::isdigit(static_cast<unsigned char>(args_[i][1]))) {
      usage_error("unknown option '" + args_[i] + "'");
    }
    out.push_back(args_[i]);
  }
  return out;
}

void usage_error(const std::string& message) { throw Error(ErrorKind::InvalidArgument, message); }

LoadOptions load_options_from(Args& args) {
  LoadOptions options;
  options.data_files = args.values("--data");
  return options;
}

namespace {

format::NpyArray filled_array(const TensorInfo& info, const std::vector<int64_t>& shape, const std::string& fill,
                              std::mt19937_64& rng) {
  format::NpyArray a;
  a.dtype = info.dtype;
  a.shape = shape;
  const int64_t n = a.numel();
  const size_t elem = element_size(info.dtype);
  a.data.assign(static_cast<size_t>(n) * elem, 0);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> integer(-100, 100);
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    if (fill == "ones") v = 1;
    else if (fill == "random") v = is_floating_type(info.dtype) ? real(rng) : static_cast<double>(integer(rng));
    uint8_t* p = a.data.data() + i * elem;
    switch (info.dtype) {
      case ScalarType::Float: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case ScalarType::Double: std::memcpy(p, &v, 8); break;
      case ScalarType::Long: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
      case ScalarType::Int: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
      case ScalarType::Short: { int16_t x = static_cast<int16_t>(v); std::memcpy(p, &x, 2); break; }
      case ScalarType::Char: { int8_t x = static_cast<int8_t>(v); std::memcpy(p, &x, 1); break; }
      case ScalarType::Byte: { uint8_t x = static_cast<uint8_t>(v < 0 ? -v : v); std::memcpy(p, &x, 1); break; }
      case ScalarType::Bool: *p = fill == "random" ? (v > 0) : static_cast<uint8_t>(v != 0); break;
      default:
        usage_error("--fill does not support dtype " + std::string(scalar_type_name(info.dtype)) + "; pass a .npy input");
    }
  }
  return a;
}

}  // namespace

PreparedInputs prepare_inputs(const MethodMeta& meta, const std::vector<std::string>& specs, const std::string& fill,
                              uint64_t seed, const std::vector<std::vector<int64_t>>& shape_overrides) {
  if (!fill.empty() && fill != "ones" && fill != "zeros" && fill != "random") {
    usage_error("--fill must be ones, zeros or random, not '" + fill + "'");
  }
  if (specs.size() > meta.inputs.size()) {
    usage_error("method '" + meta.name + "' takes " + std::to_string(meta.inputs.size()) + " inputs, " +
                std::to_string(specs.size()) + " were given");
  }
  PreparedInputs prepared;
  prepared.arrays.reserve(meta.inputs.size());
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < meta.inputs.size(); ++i) {
    const ValueInfo& info = meta.inputs[i];
    if (i < specs.size()) {
      const std::string& s = specs[i];
      int64_t iv;
      double dv;
      if (info.tag != Tag::Tensor && (s == "true" || s == "false")) {
        prepared.values.emplace_back(s == "true");
      } else if (info.tag != Tag::Tensor && parse_int(s, &iv)) {
        if (info.tag == Tag::Double) prepared.values.emplace_back(static_cast<double>(iv));
        else prepared.values.emplace_back(iv);
      } else if (info.tag != Tag::Tensor && parse_double(s, &dv)) {
        prepared.values.emplace_back(dv);
      } else if (info.tag == Tag::String) {
        prepared.values.emplace_back(s);
      } else {
        prepared.arrays.push_back(format::read_npy(s));
        const auto& a = prepared.arrays.back();
        prepared.values.emplace_back(TensorRef{a.dtype, a.shape, {}, a.data.data()});
      }
      continue;
    }
    if (info.tag == Tag::Tensor) {
      if (fill.empty()) {
        usage_error("method '" + meta.name + "' takes " + std::to_string(meta.inputs.size()) + " inputs, " +
                    std::to_string(specs.size()) + " were given (use --fill to supply the rest)");
      }
      std::vector<int64_t> shape = info.tensor.sizes;
      if (i < shape_overrides.size() && !shape_overrides[i].empty()) shape = shape_overrides[i];
      prepared.arrays.push_back(filled_array(info.tensor, shape, fill, rng));
      const auto& a = prepared.arrays.back();
      prepared.values.emplace_back(TensorRef{a.dtype, a.shape, info.tensor.dim_order, a.data.data()});
    } else {
      prepared.values.push_back(info.value);  // the value recorded at export is the only one accepted
    }
  }
  return prepared;
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
