// Bounds the fuzz targets share: ResourceLimits small enough that what the fuzzer reports is a real fault, not a
// plan of gigabytes or a loop that never ends (the runtime refuses those, which the targets then exercise).
#pragma once

#include <cstdint>

#include "etnp/program.h"

namespace etnp::fuzz {

inline LoadOptions bounded_options(Verification level = Verification::InternalConsistency) {
  LoadOptions options;
  options.verification = level;
  options.limits.max_method_bytes = uint64_t{64} << 20;
  options.limits.max_tensor_bytes = uint64_t{16} << 20;  // also bounds the inputs fuzz_execute makes
  options.limits.max_instructions_per_execute = 100'000;
  return options;
}

}  // namespace etnp::fuzz
