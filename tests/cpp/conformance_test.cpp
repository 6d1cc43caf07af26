// Runs every entry of the shared fixtures' manifest.json: outputs must match the official runtime's goldens
// within each case's tolerance, and error entries must fail with the expected kind and message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

#include "fixtures.h"

namespace etnp::testing {
namespace {

void run_case(Method& method, const nlohmann::json& inputs, const nlohmann::json& outputs, double atol, double rtol,
              const std::string& label) {
  CaseInput in = load_case_inputs(inputs);
  std::vector<Value> actual;
  try {
    actual = method.execute(in.values);
  } catch (const Error& e) {
    FAIL() << label << ": " << error_kind_name(e.kind()) << ": " << e.what();
  }
  ASSERT_EQ(actual.size(), outputs.size()) << label;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string why = compare_output(actual[i], outputs[i], atol, rtol);
    EXPECT_TRUE(why.empty()) << label << " output " << i << ": " << why;
  }
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, MatchesOfficialRuntime) {
  ETNP_REQUIRE_FIXTURES();
  const nlohmann::json& entry = *manifest_entry(GetParam());
  const std::string kind = entry["kind"];
  if (kind == "etdump") GTEST_SKIP() << "ETDump files are checked by the ETDump reader tests";
  const std::string path = fixtures_dir() + "/" + entry["file"].get<std::string>();

  if (entry["expect"].is_object()) {
    const std::string expected_kind = entry["expect"]["error"];
    const std::string names = entry["expect"]["names"];
    try {
      Program program = Program::load_file(path, entry_load_options(entry));
      for (const auto& name : program.method_names()) program.load_method(name);
      FAIL() << "expected " << expected_kind << " naming '" << names << "', but the program loaded";
    } catch (const Error& e) {
      EXPECT_EQ(error_kind_name(e.kind()), expected_kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos)
          << "the message does not name '" << names << "': " << e.what();
    }
    return;
  }

  Program program = Program::load_file(path, entry_load_options(entry));
  for (const auto& c : entry["cases"]) {
    if (c.contains("requires_backend")) continue;
    const std::string method_name = c["method"];
    const std::string label = GetParam() + " " + method_name + (c.contains("case") ? "__" + c["case"].get<std::string>() : "");
    const double atol = c["atol"], rtol = c["rtol"];
    std::unique_ptr<Method> method;
    try {
      method = program.load_method(method_name);
    } catch (const Error& e) {
      ADD_FAILURE() << label << ": " << error_kind_name(e.kind()) << ": " << e.what();
      continue;
    }
    if (c.value("stateful", false)) {
      size_t k = 0;
      for (const auto& call : c["calls"]) {
        run_case(*method, call["inputs"], call["outputs"], atol, rtol, label + " call " + std::to_string(k++));
      }
    } else {
      run_case(*method, c["inputs"], c["outputs"], atol, rtol, label);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Manifest, Conformance, ::testing::ValuesIn(manifest_ids()), manifest_test_name);

// The ops/ programs carry their own test vectors: input_N / output_N constant methods and atol / rtol.
class SelfChecking : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> self_checking_ids() {
  std::vector<std::string> ids;
  for (const auto& e : manifest()) {
    const std::string id = e["id"];
    if (id.rfind("ops/", 0) == 0) ids.push_back(id);
  }
  if (ids.empty()) ids.push_back("fixtures_absent");
  return ids;
}

TEST_P(SelfChecking, ForwardReproducesEmbeddedVectors) {
  ETNP_REQUIRE_FIXTURES();
  const nlohmann::json& entry = *manifest_entry(GetParam());
  Program program = Program::load_file(fixtures_dir() + "/" + entry["file"].get<std::string>());
  auto scalar = [&](const std::string& name) { return program.load_method(name)->execute({}).at(0); };
  const int64_t nb_inputs = std::get<int64_t>(scalar("nb_inputs"));
  const int64_t nb_outputs = std::get<int64_t>(scalar("nb_outputs"));
  const double atol = std::get<double>(scalar("atol")), rtol = std::get<double>(scalar("rtol"));
  std::vector<std::unique_ptr<Method>> keep;
  std::vector<Value> inputs;
  for (int64_t i = 0; i < nb_inputs; ++i) {
    keep.push_back(program.load_method("input_" + std::to_string(i)));
    inputs.push_back(keep.back()->execute({}).at(0));
  }
  auto forward = program.load_method("forward");
  const std::vector<Value> outputs = forward->execute(inputs);
  ASSERT_EQ(static_cast<int64_t>(outputs.size()), nb_outputs);
  for (int64_t i = 0; i < nb_outputs; ++i) {
    auto expected_method = program.load_method("output_" + std::to_string(i));
    const Value expected = expected_method->execute({}).at(0);
    const auto& a = std::get<TensorRef>(outputs[i]);
    const auto& g = std::get<TensorRef>(expected);
    ASSERT_EQ(a.sizes, g.sizes) << "output " << i;
    ASSERT_EQ(a.dtype, g.dtype) << "output " << i;
    for (int64_t k = 0; k < a.numel(); ++k) {
      double x = 0, y = 0;
      if (a.dtype == ScalarType::Float) {
        x = static_cast<const float*>(a.data)[k];
        y = static_cast<const float*>(g.data)[k];
      } else if (a.dtype == ScalarType::Long) {
        x = static_cast<double>(static_cast<const int64_t*>(a.data)[k]);
        y = static_cast<double>(static_cast<const int64_t*>(g.data)[k]);
      } else {
        ASSERT_EQ(std::memcmp(a.data, g.data, a.nbytes()), 0) << "output " << i;
        break;
      }
      if (std::isnan(x) && std::isnan(y)) continue;
      ASSERT_LE(std::fabs(x - y), atol + rtol * std::fabs(y)) << "output " << i << " element " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, SelfChecking, ::testing::ValuesIn(self_checking_ids()), manifest_test_name);

}  // namespace
}  // namespace etnp::testing
