#include "compute/memory_planner.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "etnp/error.h"

namespace etnp::compute {

MemoryPlan plan_memory(std::span<const BufferLifetime> buffers, uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw Error(ErrorKind::InvalidArgument,
                "memory planner: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].last < buffers[i].first) {
      throw Error(ErrorKind::InvalidArgument, "memory planner: buffer " + std::to_string(i) + " ends (step " +
                                                  std::to_string(buffers[i].last) + ") before it starts (step " +
                                                  std::to_string(buffers[i].first) + ")");
    }
  }
  auto align = [alignment](uint64_t v) { return (v + alignment - 1) & ~(alignment - 1); };
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });

  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> placed;
  std::vector<size_t> overlapping;
  std::vector<uint64_t> candidates;
  for (size_t i : order) {
    const BufferLifetime& b = buffers[i];
    overlapping.clear();
    for (size_t p : placed) {
      if (buffers[p].first <= b.last && b.first <= buffers[p].last) overlapping.push_back(p);
    }
    // Candidates: 0 and the aligned end of every buffer live at the same time; the lowest that fits wins.
    candidates.assign(1, 0);
    for (size_t p : overlapping) candidates.push_back(align(plan.offsets[p] + buffers[p].bytes));
    std::sort(candidates.begin(), candidates.end());
    uint64_t chosen = candidates.back();
    for (uint64_t c : candidates) {
      const bool fits = std::none_of(overlapping.begin(), overlapping.end(), [&](size_t p) {
        return c < plan.offsets[p] + buffers[p].bytes && plan.offsets[p] < c + b.bytes;
      });
      if (fits) {
        chosen = c;
        break;
      }
    }
    plan.offsets[i] = chosen;
    placed.push_back(i);
    plan.total = std::max(plan.total, align(chosen + b.bytes));
  }
  return plan;
}

}  // namespace etnp::compute
