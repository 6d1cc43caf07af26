// When splitting an operator across the shared thread pool is worth it.
#pragma once

#include <cstddef>

namespace etnp::compute {

/// Below this many multiply-adds (or elements moved) an operator is not split across threads: waking the
/// pool's workers takes a few microseconds, about what this much work takes on one core.
inline constexpr size_t kParallelWork = size_t{1} << 18;

}  // namespace etnp::compute
