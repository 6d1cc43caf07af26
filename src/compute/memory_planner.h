// One greedy planner for buffers that share an arena: the .pte writer places a method's planned tensors with
// it, the XNNPACK delegate its intermediate values. Buffers whose lifetimes overlap never share a byte;
// buffers whose lifetimes are disjoint may.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace etnp::compute {

/// A buffer to place: its size and the steps that use it, from `first` to `last` inclusive.
struct BufferLifetime {
  uint64_t bytes = 0;
  int64_t first = 0;
  int64_t last = 0;
};

struct MemoryPlan {
  std::vector<uint64_t> offsets;  ///< Per buffer, in the order given; each a multiple of the alignment.
  uint64_t total = 0;             ///< Arena bytes: the end of the last buffer, rounded up to the alignment.
};

/// Places buffers largest first (ties in the order given), each at the lowest aligned offset that overlaps no
/// buffer already placed whose lifetime overlaps its own. `alignment` is a power of two (1: none).
/// Throws etnp::Error(InvalidArgument) for another alignment or a lifetime that ends before it starts.
MemoryPlan plan_memory(std::span<const BufferLifetime> buffers, uint64_t alignment);

}  // namespace etnp::compute
