// Runs the program embedded in the upstream bundled-program fixture on each bundled test case and checks the
// outputs against the bundled expectations (the reference verify_method_outputs rules, exact here).
#include <gtest/gtest.h>

#include <variant>

#include "etnp/program.h"
#include "format/bundled_program.h"

namespace etnp::format {
namespace {

std::string fixtures_dir() {
  if (const char* env = std::getenv("ETNP_FIXTURES")) return env;
  return ETNP_FIXTURES_DIR;
}

Value to_input(const BundledValue& v) {
  switch (v.kind) {
    case BundledValue::Kind::Tensor: {
      TensorRef t;
      t.dtype = v.tensor.dtype;
      t.sizes = v.tensor.sizes;
      t.dim_order = v.tensor.dim_order;
      t.data = v.tensor.data.data();
      return t;
    }
    case BundledValue::Kind::Int: return v.int_value;
    case BundledValue::Kind::Double: return v.double_value;
    case BundledValue::Kind::Bool: return v.bool_value;
  }
  return {};
}

TEST(BundledProgramRun, EmbeddedProgramReproducesBundledOutputs) {
  const std::string path = fixtures_dir() + "/upstream/bundled_program.bpte";
  BundledProgram bundle;
  try {
    bundle = BundledProgram::load_file(path);
  } catch (const Error&) {
    GTEST_SKIP() << "fixture upstream/bundled_program.bpte not available";
  }
  const Program program = Program::load_buffer(bundle.program(), bundle.bytes_owner());
  for (const BundledMethodTests& suite : bundle.method_test_suites()) {
    const LoadVerdict verdict = program.load_verdict(suite.method_name);
    if (!verdict.loads()) GTEST_SKIP() << "method " << suite.method_name << ": " << verdict.problems.front().message;
  }

  for (const BundledMethodTests& suite : bundle.method_test_suites()) {
    auto method = program.load_method(suite.method_name);
    for (size_t c = 0; c < suite.test_cases.size(); ++c) {
      SCOPED_TRACE(suite.method_name + " case " + std::to_string(c));
      const BundledTestCase& tc = suite.test_cases[c];
      std::vector<Value> inputs;
      for (const auto& v : tc.inputs) inputs.push_back(to_input(v));
      const std::vector<Value> outputs = method->execute(inputs);
      ASSERT_EQ(outputs.size(), tc.expected_outputs.size());
      for (size_t o = 0; o < outputs.size(); ++o) {
        const BundledValue& expected = tc.expected_outputs[o];
        ASSERT_EQ(expected.kind, BundledValue::Kind::Tensor);
        const TensorRef* got = std::get_if<TensorRef>(&outputs[o]);
        ASSERT_NE(got, nullptr);
        const Tensor actual(got->dtype, got->sizes, got->dim_order, const_cast<void*>(got->data));
        std::string why;
        EXPECT_TRUE(bundled_tensor_matches(expected.tensor, actual, 0, 0, &why)) << "output " << o << ": " << why;
      }
    }
  }
}

}  // namespace
}  // namespace etnp::format
