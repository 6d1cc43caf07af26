// Program::load_buffer and load of every method, at both verification levels (Minimal and
// InternalConsistency), with each method's metadata and load verdict.
#include <cstdint>
#include <memory>
#include <string>

#include "etnp/error.h"
#include "etnp/program.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace etnp;
  for (Verification level : {Verification::Minimal, Verification::InternalConsistency}) {
    try {
      const LoadOptions options = fuzz::bounded_options(level);
      Program program = Program::load_buffer({data, size}, nullptr, options);
      (void)program.info();
      for (const std::string& name : program.method_names()) {
        try {
          (void)program.method_meta(name);
          (void)program.load_verdict(name);
          (void)program.input_spec(name);
          (void)program.load_method(name);
        } catch (const Error&) {
        }
      }
    } catch (const Error&) {
    }
  }
  return 0;
}
