// `etnp check`: run a bundled program's test cases, or a .pte on given inputs, and compare the outputs with the
// expected ones. One line per output, a summary line; exit 0 when all match, 1 when any differs.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "cli/cli.h"
#include "core/half.h"
#include "format/bundled_program.h"

namespace etnp::cli {
namespace {

// An output or an expectation as a row-major array (a scalar as a 0-d array).
struct Array {
  ScalarType dtype = ScalarType::Float;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
  std::string kind;  // empty for a tensor; "String" or "None" for outputs that have no array form
};

Array from_value(const Value& v) {
  Array a;
  if (const auto* t = std::get_if<TensorRef>(&v)) {
    a.dtype = t->dtype;
    a.shape = t->sizes;
    a.data = row_major_bytes(*t);
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    a.dtype = ScalarType::Long;
    a.data.resize(8);
    std::memcpy(a.data.data(), i, 8);
  } else if (const auto* d = std::get_if<double>(&v)) {
    a.dtype = ScalarType::Double;
    a.data.resize(8);
    std::memcpy(a.data.data(), d, 8);
  } else if (const auto* b = std::get_if<bool>(&v)) {
    a.dtype = ScalarType::Bool;
    a.data.assign(1, *b ? 1 : 0);
  } else {
    a.kind = std::holds_alternative<std::string>(v) ? "String" : "None";
  }
  return a;
}

Array from_bundled(const format::BundledValue& v) {
  switch (v.kind) {
    case format::BundledValue::Kind::Tensor: {
      const auto& t = v.tensor;
      return from_value(TensorRef{t.dtype, t.sizes, t.dim_order, t.data.data()});
    }
    case format::BundledValue::Kind::Int: return from_value(Value(v.int_value));
    case format::BundledValue::Kind::Double: return from_value(Value(v.double_value));
    case format::BundledValue::Kind::Bool: return from_value(Value(v.bool_value));
  }
  return {};
}

Value bundled_input(const format::BundledValue& v) {
  switch (v.kind) {
    case format::BundledValue::Kind::Tensor:
      return TensorRef{v.tensor.dtype, v.tensor.sizes, v.tensor.dim_order, v.tensor.data.data()};
    case format::BundledValue::Kind::Int: return v.int_value;
    case format::BundledValue::Kind::Double: return v.double_value;
    case format::BundledValue::Kind::Bool: return v.bool_value;
  }
  return {};
}

bool is_floating(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::Half || t == ScalarType::BFloat16;
}

double element(const Array& a, int64_t i) {
  const uint8_t* p = a.data.data() + i * static_cast<int64_t>(element_size(a.dtype));
  switch (a.dtype) {
    case ScalarType::Float: { float f; std::memcpy(&f, p, 4); return f; }
    case ScalarType::Double: { double d; std::memcpy(&d, p, 8); return d; }
    case ScalarType::Half: { uint16_t h; std::memcpy(&h, p, 2); return Half::to_float(h); }
    case ScalarType::BFloat16: { uint16_t h; std::memcpy(&h, p, 2); return BFloat16::to_float(h); }
    case ScalarType::Long: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case ScalarType::Int: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case ScalarType::Short: { int16_t x; std::memcpy(&x, p, 2); return x; }
    case ScalarType::Char: return static_cast<int8_t>(*p);
    default: return *p;
  }
}

std::string dims_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string type_text(const Array& a) {
  return a.kind.empty() ? std::string(scalar_type_name(a.dtype)) + dims_text(a.shape) : a.kind;
}

// The multi-index of flat element i.
std::string where(const std::vector<int64_t>& shape, int64_t i) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] > 0) {
      idx[d] = i % shape[d];
      i /= shape[d];
    }
  }
  return dims_text(idx);
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

struct Verdict {
  bool ok = false;
  std::string text;
};

// Floating elements match when |got - expected| <= atol + rtol * |expected| (NaN matches NaN, an infinity only
// itself); other dtypes must be equal.
Verdict compare(const Array& got, const Array& expected, double atol, double rtol) {
  if (!got.kind.empty()) return {false, "the output is " + got.kind + ", which has no expected array form"};
  if (got.dtype != expected.dtype) {
    return {false, "dtype " + std::string(scalar_type_name(got.dtype)) + ", expected " + std::string(scalar_type_name(expected.dtype))};
  }
  if (got.shape != expected.shape) return {false, "shape " + dims_text(got.shape) + ", expected " + dims_text(expected.shape)};
  const int64_t n = static_cast<int64_t>(got.data.size() / std::max<size_t>(1, element_size(got.dtype)));
  const bool floating = is_floating(got.dtype);
  const size_t elem = element_size(got.dtype);
  // The largest differences: over every element (for an "ok" line), and over the elements that differ.
  struct Worst {
    double abs = 0, rel = 0;
    int64_t abs_at = -1, rel_at = -1;
    void add(double abs_diff, double rel_diff, int64_t i) {
      if (abs_at < 0 || abs_diff > abs) { abs = abs_diff; abs_at = i; }
      if (rel_at < 0 || rel_diff > rel) { rel = rel_diff; rel_at = i; }
    }
  } all, differing;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = element(got, i), e = element(expected, i);
    bool same;
    double abs_diff, rel_diff;
    if (floating && (std::isnan(a) || std::isnan(e) || std::isinf(a) || std::isinf(e))) {
      same = (std::isnan(a) && std::isnan(e)) || a == e;
      abs_diff = rel_diff = same ? 0 : INFINITY;
    } else {
      abs_diff = std::fabs(a - e);
      rel_diff = e != 0 ? abs_diff / std::fabs(e) : (abs_diff == 0 ? 0 : INFINITY);
      same = floating ? abs_diff <= atol + rtol * std::fabs(e)
                      : std::memcmp(got.data.data() + i * elem, expected.data.data() + i * elem, elem) == 0;
    }
    all.add(abs_diff, rel_diff, i);
    if (!same) {
      ++bad;
      differing.add(abs_diff, rel_diff, i);
    }
  }
  const std::string type = type_text(got);
  if (bad == 0) {
    if (all.abs == 0) return {true, "ok (" + type + ", exact)"};
    return {true, "ok (" + type + ", max abs diff " + num(all.abs) + ", max rel diff " + num(all.rel) + ")"};
  }
  const int64_t at = differing.abs_at;
  std::string text = std::to_string(bad) + " of " + std::to_string(n) + " elements differ (" + type + "): max abs diff " +
                     num(differing.abs) + " at " + where(got.shape, at) + " (got " + num(element(got, at)) +
                     ", expected " + num(element(expected, at)) + "), max rel diff " + num(differing.rel) + " at " +
                     where(got.shape, differing.rel_at);
  if (floating) text += "; atol " + num(atol) + ", rtol " + num(rtol);
  return {false, text};
}

struct Tally {
  int64_t outputs = 0, failed = 0, cases = 0;
};

void report(Tally& tally, const std::string& label, const Verdict& v) {
  ++tally.outputs;
  if (!v.ok) ++tally.failed;
  std::printf("%s: %s%s\n", label.c_str(), v.ok ? "" : "FAIL: ", v.text.c_str());
  std::fflush(stdout);
}

// Runs the method; an error in the run is this case's failure (the others still run).
bool execute(Method& method, const std::vector<Value>& inputs, std::vector<Value>* outputs, Tally& tally,
             const std::string& label) {
  try {
    *outputs = method.execute(inputs);
    return true;
  } catch (const Error& e) {
    report(tally, label, {false, std::string(error_kind_name(e.kind())) + ": " + e.what()});
    return false;
  }
}

void compare_outputs(const std::vector<Value>& outputs, const std::vector<Array>& expected, const std::string& prefix,
                     double atol, double rtol, Tally& tally) {
  if (outputs.size() < expected.size()) {
    report(tally, prefix.empty() ? "outputs" : prefix, {false, "the method returned " + std::to_string(outputs.size()) +
                                                                 " outputs, " + std::to_string(expected.size()) +
                                                                 " are expected"});
    return;
  }
  for (size_t o = 0; o < expected.size(); ++o) {
    report(tally, prefix + (prefix.empty() ? "" : " ") + "output " + std::to_string(o),
           compare(from_value(outputs[o]), expected[o], atol, rtol));
  }
}

}  // namespace

int run_check(Args& args) {
  LoadOptions options = load_options_from(args);
  const auto method_arg = args.single_value("--method");
  const auto input_args = args.values("--input");
  const auto expect_args = args.values("--expect");
  const double atol = args.double_value("--atol", 1e-8, 0, INFINITY);
  const double rtol = args.double_value("--rtol", 1e-5, 0, INFINITY);
  const auto files = args.positionals();
  if (files.size() != 1) usage_error("check takes one .pte or .bpte file");
  const std::string& path = files[0];

  Tally tally;
  bool bundled = false;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    uint8_t head[8] = {};
    if (f != nullptr) {
      bundled = std::fread(head, 1, sizeof head, f) == sizeof head && std::memcmp(head + 4, "BP", 2) == 0;
      std::fclose(f);
    }
  }
  if (bundled) {
    if (!input_args.empty() || !expect_args.empty()) {
      usage_error("'" + shortened(path, 240) + "' is a bundled program: its test cases bring their inputs and "
                  "expected outputs (--input and --expect are for a .pte)");
    }
    const format::BundledProgram bundle = format::BundledProgram::load_file(path);
    const Program program = load_program(path, options);
    std::vector<const format::BundledMethodTests*> suites;
    std::string names;
    for (const auto& suite : bundle.method_test_suites()) {
      names += (names.empty() ? "" : ", ") + suite.method_name;
      if (!method_arg || *method_arg == suite.method_name) suites.push_back(&suite);
    }
    if (method_arg && suites.empty()) {
      usage_error("'" + shortened(path, 240) + "' has no test cases for method '" + shortened(*method_arg) + "'" +
                  (names.empty() ? std::string() : " (it has some for: " + names + ")"));
    }
    int64_t count = 0;
    for (const auto* suite : suites) count += static_cast<int64_t>(suite->test_cases.size());
    if (count == 0) usage_error("'" + shortened(path, 240) + "' holds no bundled test cases");
    for (const auto* suite : suites) {
      auto method = program.load_method(suite->method_name);
      for (size_t c = 0; c < suite->test_cases.size(); ++c) {
        const auto& tc = suite->test_cases[c];
        const std::string label = suite->method_name + " case " + std::to_string(c);
        ++tally.cases;
        std::vector<Value> inputs;
        for (const auto& v : tc.inputs) inputs.push_back(bundled_input(v));
        std::vector<Value> outputs;
        if (!execute(*method, inputs, &outputs, tally, label)) continue;
        if (tc.expected_outputs.empty()) {
          report(tally, label, {true, "ran (the case has no expected outputs)"});
          continue;
        }
        std::vector<Array> expected;
        for (const auto& v : tc.expected_outputs) expected.push_back(from_bundled(v));
        compare_outputs(outputs, expected, label, atol, rtol, tally);
      }
    }
  } else {
    if (expect_args.empty()) usage_error("check of a .pte needs --expect OUT.npy (one per output, in order)");
    const auto input_specs = expand_input_specs(input_args);
    std::vector<Array> expected;
    for (const auto& spec : expand_input_specs(expect_args, "--expect")) {
      const auto array = spec.array ? spec.array : std::make_shared<format::NpyArray>(format::read_npy(spec.text));
      expected.push_back({array->dtype, array->shape, array->data, ""});
    }
    const Program program = load_program(path, options);
    const std::string method_name = method_arg.value_or("forward");
    auto method = program.load_method(method_name);
    if (expected.size() > method->meta().outputs.size()) {
      usage_error("method '" + method_name + "' returns " + std::to_string(method->meta().outputs.size()) +
                  " outputs, --expect gives " + std::to_string(expected.size()));
    }
    PreparedInputs inputs = prepare_inputs(method->meta(), input_specs, "", 0);
    std::vector<Value> outputs;
    tally.cases = 1;
    if (execute(*method, inputs.values, &outputs, tally, method_name)) {
      compare_outputs(outputs, expected, method_name, atol, rtol, tally);
    }
  }
  if (tally.failed == 0) {
    std::printf("check: %lld of %lld outputs ok (%lld case%s)\n", static_cast<long long>(tally.outputs),
                static_cast<long long>(tally.outputs), static_cast<long long>(tally.cases), tally.cases == 1 ? "" : "s");
    return 0;
  }
  std::printf("check: FAILED: %lld of %lld outputs differ (%lld case%s)\n", static_cast<long long>(tally.failed),
              static_cast<long long>(tally.outputs), static_cast<long long>(tally.cases), tally.cases == 1 ? "" : "s");
  return 1;
}

}  // namespace etnp::cli
