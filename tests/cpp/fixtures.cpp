#include <cctype>
#include "fixtures.h"

#include <openssl/sha.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace etnp::testing {
namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

double element(const void* data, ScalarType t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(data) + i * static_cast<int64_t>(element_size(t));
  switch (t) {
    case ScalarType::Float: { float f; std::memcpy(&f, p, 4); return f; }
    case ScalarType::Double: { double d; std::memcpy(&d, p, 8); return d; }
    default: return 0;
  }
}

}  // namespace

std::string fixtures_dir() {
  static const std::string dir = [] {
    if (const char* env = std::getenv("ETNP_FIXTURES"); env != nullptr && is_dir(env)) return std::string(env);
#ifdef ETNP_FIXTURES_DIR
    if (is_dir(ETNP_FIXTURES_DIR)) return std::string(ETNP_FIXTURES_DIR);
#endif
    return std::string();
  }();
  return dir;
}

const nlohmann::json& manifest() {
  static const nlohmann::json m = [] {
    if (fixtures_dir().empty()) return nlohmann::json::array();
    std::ifstream in(fixtures_dir() + "/manifest.json");
    return nlohmann::json::parse(in);
  }();
  return m;
}

const nlohmann::json* manifest_entry(const std::string& id) {
  for (const auto& e : manifest()) {
    if (e["id"] == id) return &e;
  }
  return nullptr;
}

std::vector<std::string> manifest_ids() {
  std::vector<std::string> ids;
  for (const auto& e : manifest()) ids.push_back(e["id"].get<std::string>());
  if (ids.empty()) ids.push_back("fixtures_absent");
  return ids;
}

std::string manifest_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

LoadOptions entry_load_options(const nlohmann::json& entry) {
  LoadOptions options;
  for (const auto& f : entry["data_files"]) options.data_files.push_back(fixtures_dir() + "/" + f.get<std::string>());
  return options;
}

CaseInput load_case_inputs(const nlohmann::json& inputs) {
  CaseInput in;
  in.arrays.reserve(inputs.size());
  for (const auto& v : inputs) {
    if (v.contains("npy")) {
      in.arrays.push_back(format::read_npy(fixtures_dir() + "/" + v["npy"].get<std::string>()));
      const auto& a = in.arrays.back();
      std::vector<uint8_t> dim_order;
      if (v.contains("dim_order")) dim_order = v["dim_order"].get<std::vector<uint8_t>>();
      in.values.emplace_back(TensorRef{a.dtype, a.shape, dim_order, a.data.data()});
    } else {
      const std::string type = v["type"];
      if (type == "int") in.values.emplace_back(v["value"].get<int64_t>());
      else if (type == "double") in.values.emplace_back(v["value"].get<double>());
      else if (type == "bool") in.values.emplace_back(v["value"].get<bool>());
      else in.values.emplace_back(v["value"].get<std::string>());
    }
  }
  return in;
}

std::vector<std::vector<uint8_t>> run_first_case(const std::string& id, const std::string& method_name, Method& method) {
  const nlohmann::json* entry = manifest_entry(id);
  EXPECT_NE(entry, nullptr) << id;
  if (entry == nullptr) return {};
  for (const auto& c : (*entry)["cases"]) {
    if (c["method"] != method_name) continue;
    CaseInput in = load_case_inputs(c["inputs"]);
    std::vector<std::vector<uint8_t>> bytes;
    for (const Value& v : method.execute(in.values)) {
      const auto& t = std::get<TensorRef>(v);
      const auto* p = static_cast<const uint8_t*>(t.data);
      bytes.emplace_back(p, p + t.nbytes());
    }
    return bytes;
  }
  ADD_FAILURE() << id << " has no case for " << method_name;
  return {};
}

std::string compare_output(const Value& actual, const nlohmann::json& expected, double atol, double rtol) {
  std::ostringstream why;
  if (!expected.contains("npy") && !expected.contains("splat")) {
    const std::string type = expected["type"];
    if (type == "int") {
      if (!std::holds_alternative<int64_t>(actual) || std::get<int64_t>(actual) != expected["value"].get<int64_t>()) {
        why << "expected Int " << expected["value"];
      }
    } else if (type == "double") {
      if (!std::holds_alternative<double>(actual) || std::get<double>(actual) != expected["value"].get<double>()) {
        why << "expected Double " << expected["value"];
      }
    } else if (type == "bool") {
      if (!std::holds_alternative<bool>(actual) || std::get<bool>(actual) != expected["value"].get<bool>()) {
        why << "expected Bool " << expected["value"];
      }
    } else if (!std::holds_alternative<std::string>(actual) || std::get<std::string>(actual) != expected["value"].get<std::string>()) {
      why << "expected String " << expected["value"];
    }
    return why.str();
  }
  if (!std::holds_alternative<TensorRef>(actual)) return "expected a tensor output";
  const TensorRef& t = std::get<TensorRef>(actual);
  const auto dtype = scalar_type_from_name(expected["dtype"].get<std::string>());
  if (!dtype || *dtype != t.dtype) {
    return "dtype " + std::string(scalar_type_name(t.dtype)) + " != expected " + expected["dtype"].get<std::string>();
  }
  const auto shape = expected["shape"].get<std::vector<int64_t>>();
  if (shape != t.sizes) {
    std::ostringstream s;
    s << "shape [";
    for (auto x : t.sizes) s << x << ",";
    s << "] != expected " << expected["shape"];
    return s.str();
  }
  bool contiguous = true;
  for (size_t i = 0; i < t.dim_order.size(); ++i) contiguous = contiguous && t.dim_order[i] == i;
  const int64_t n = t.numel();
  const size_t elem = element_size(t.dtype);
  if (expected.contains("splat")) {
    // Every element equals the splat value; also check the sha256 of the raw bytes.
    const double v = expected["splat"].get<double>();
    for (int64_t i = 0; i < n; ++i) {
      if (element(t.data, t.dtype, i) != v) return "element " + std::to_string(i) + " differs from the splat value";
    }
    if (expected.contains("sha256")) {
      unsigned char digest[SHA256_DIGEST_LENGTH];
      SHA256(static_cast<const unsigned char*>(t.data), static_cast<size_t>(n) * elem, digest);
      char hex[2 * SHA256_DIGEST_LENGTH + 1];
      for (int i = 0; i < SHA256_DIGEST_LENGTH; ++i) std::snprintf(hex + 2 * i, 3, "%02x", digest[i]);
      if (expected["sha256"].get<std::string>() != hex) return "sha256 of the output bytes differs";
    }
    return {};
  }
  if (!contiguous) return "output is not contiguous; the goldens are row-major";
  const format::NpyArray golden = format::read_npy(fixtures_dir() + "/" + expected["npy"].get<std::string>());
  if (golden.dtype != t.dtype) return "golden dtype differs";
  const bool floating = t.dtype == ScalarType::Float || t.dtype == ScalarType::Double;
  if (!floating || (atol == 0 && rtol == 0)) {
    if (floating) {
      // Bit-exact, except that any NaN equals any NaN.
      for (int64_t i = 0; i < n; ++i) {
        const double a = element(t.data, t.dtype, i), g = element(golden.data.data(), t.dtype, i);
        if (std::isnan(a) && std::isnan(g)) continue;
        if (std::memcmp(static_cast<const uint8_t*>(t.data) + i * elem, golden.data.data() + i * elem, elem) != 0) {
          std::ostringstream s;
          s.precision(9);
          s << "element " << i << ": " << a << " != golden " << g << " (bit-exact comparison)";
          return s.str();
        }
      }
      return {};
    }
    if (n > 0 && std::memcmp(t.data, golden.data.data(), static_cast<size_t>(n) * elem) != 0) {
      for (int64_t i = 0; i < n; ++i) {
        if (std::memcmp(static_cast<const uint8_t*>(t.data) + i * elem, golden.data.data() + i * elem, elem) != 0) {
          return "element " + std::to_string(i) + " differs (exact comparison of " +
                 std::string(scalar_type_name(t.dtype)) + ")";
        }
      }
    }
    return {};
  }
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = element(t.data, t.dtype, i), g = element(golden.data.data(), t.dtype, i);
    if (std::isnan(a) && std::isnan(g)) continue;
    if (std::isinf(g) || std::isinf(a)) {
      if (a != g) { ++bad; if (first < 0) first = i; }
      continue;
    }
    const double err = std::fabs(a - g);
    if (!(err <= atol + rtol * std::fabs(g))) {
      ++bad;
      if (first < 0) first = i;
      worst = std::max(worst, err);
    }
  }
  if (bad > 0) {
    std::ostringstream s;
    s.precision(9);
    s << bad << " of " << n << " elements outside atol " << atol << " rtol " << rtol << "; first at " << first << ": "
      << element(t.data, t.dtype, first) << " vs golden " << element(golden.data.data(), t.dtype, first)
      << "; worst abs error " << worst;
    return s.str();
  }
  return {};
}

}  // namespace etnp::testing
