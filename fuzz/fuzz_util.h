// Bounds the fuzz targets share. The runtime has no memory limit or instruction budget yet (issue 18 item 3):
// until it does, the targets skip what would only measure the host (a plan of gigabytes, a loop that never
// ends) so that what the fuzzer reports is a real fault.
#pragma once

#include <cstdint>
#include <span>

#include "etnp/program.h"
#include "format/pte_file.h"

namespace etnp::fuzz {

inline constexpr int64_t kMaxPlannedBytes = int64_t{64} << 20;  // all arenas of one method
inline constexpr size_t kMaxInputBytes = size_t{16} << 20;       // one tensor input

inline bool plan_fits(const MethodMeta& meta) {
  int64_t total = 0;
  for (int64_t s : meta.planned_buffer_sizes) {
    if (s < 0 || s > kMaxPlannedBytes - total) return false;
    total += s;
  }
  for (const ValueInfo& v : meta.inputs)
    if (v.tag == Tag::Tensor && v.tensor.nbytes > kMaxInputBytes) return false;
  return true;
}

/// Whether a method of the (verified) program has a JumpFalseCall: without an instruction budget a jump back
/// may loop forever, which the execute target cannot bound.
inline bool has_jumps(const format::PteFile& pte) {
  for (size_t p = 0; p < pte.num_plans(); ++p) {
    const auto* chains = pte.plan(p).chains();
    if (chains == nullptr) continue;
    for (const auto* chain : *chains) {
      if (chain->instructions() == nullptr) continue;
      for (const auto* instr : *chain->instructions())
        if (instr->instr_args_type() == format::fb::InstructionArguments::JumpFalseCall) return true;
    }
  }
  return false;
}

}  // namespace etnp::fuzz
