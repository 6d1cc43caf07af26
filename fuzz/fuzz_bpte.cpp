// Bundled programs (.bpte): BundledProgram::parse and the views of every test tensor.
#include <cstdint>

#include "etnp/error.h"
#include "format/bundled_program.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace etnp;
  try {
    const auto bp = format::BundledProgram::parse({data, size});
    for (const auto& suite : bp.method_test_suites())
      for (const auto& test : suite.test_cases)
        for (const auto& v : test.inputs)
          if (v.kind == format::BundledValue::Kind::Tensor) (void)v.tensor.view();
  } catch (const Error&) {
  }
  return 0;
}
