// Access to the shared public fixtures (../shared/fixtures): their manifest, goldens and comparisons.
// Tests that need them skip with a clear message when the folder is absent (a fresh clone).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "etnp/error.h"
#include "etnp/etnp.h"
#include "format/npy.h"

namespace etnp::testing {

/// The etnp::Error that f() throws (a test failure when it throws none).
template <typename F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an etnp::Error";
  return Error(ErrorKind::ExecutionError, "none");
}

/// The fixtures folder, or empty when absent ($ETNP_FIXTURES overrides the build-time default).
std::string fixtures_dir();

#define ETNP_REQUIRE_FIXTURES()                                                                     \
  do {                                                                                              \
    if (::etnp::testing::fixtures_dir().empty()) {                                                  \
      GTEST_SKIP() << "shared fixtures not found (expected ../shared/fixtures or $ETNP_FIXTURES)";  \
    }                                                                                               \
  } while (0)

/// The parsed manifest.json (empty array when the fixtures are absent).
const nlohmann::json& manifest();
const nlohmann::json* manifest_entry(const std::string& id);

/// The manifest's entry ids (for TEST_P), or {"fixtures_absent"} so that the suite reports its skip.
std::vector<std::string> manifest_ids();
/// A test name for an entry id: every character that is not alphanumeric becomes '_'.
std::string manifest_test_name(const ::testing::TestParamInfo<std::string>& info);
/// LoadOptions with the entry's data files (.ptd).
LoadOptions entry_load_options(const nlohmann::json& entry);

/// A method input built from a manifest value ({"npy": ...} or {"value": ..., "type": ...}); keeps its data.
struct CaseInput {
  std::vector<format::NpyArray> arrays;
  std::vector<Value> values;
};
CaseInput load_case_inputs(const nlohmann::json& inputs);

/// The raw bytes of every tensor output of `method` run on the manifest entry `id`'s first case of `method_name`.
std::vector<std::vector<uint8_t>> run_first_case(const std::string& id, const std::string& method_name, Method& method);

/// Compares one output with its manifest description; returns an empty string when it matches, else why not.
std::string compare_output(const Value& actual, const nlohmann::json& expected, double atol, double rtol);

}  // namespace etnp::testing
