// Running a test body at each vector level this CPU has (core/cpu_features.h), so that every implementation
// of a kernel, the portable twin included, meets the same expectations.
#pragma once

#include "core/cpu_features.h"

namespace etnp::testing {

/// Calls fn(level) with cpu_level() capped at each level this CPU has, the portable one first; the cap is
/// lifted afterwards, a failed assertion included.
template <class Fn>
void at_each_cpu_level(Fn fn) {
  struct Lift {
    ~Lift() { lift_cpu_level_cap(); }
  } lift;
  const CpuLevel top = cpu_level();
  for (CpuLevel level : cpu_levels()) {
    if (level > top) break;
    cap_cpu_level(level);
    fn(level);
  }
}

}  // namespace etnp::testing
