// compute::plan_memory, the planner the .pte writer and the XNNPACK delegate share.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "compute/memory_planner.h"
#include "etnp/error.h"

namespace etnp::compute {
namespace {

bool overlap(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) { return a < b + bn && b < a + an; }

// Every pair of buffers live at the same time occupies disjoint bytes; every offset is aligned and in the arena.
void expect_valid(const std::vector<BufferLifetime>& bs, const MemoryPlan& plan, uint64_t alignment) {
  ASSERT_EQ(plan.offsets.size(), bs.size());
  for (size_t i = 0; i < bs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % alignment, 0u) << i;
    EXPECT_LE(plan.offsets[i] + bs[i].bytes, plan.total) << i;
    for (size_t j = i + 1; j < bs.size(); ++j) {
      const bool live_together = bs[i].first <= bs[j].last && bs[j].first <= bs[i].last;
      if (live_together) {
        EXPECT_FALSE(overlap(plan.offsets[i], bs[i].bytes, plan.offsets[j], bs[j].bytes)) << i << " and " << j;
      }
    }
  }
  EXPECT_EQ(plan.total % alignment, 0u);
}

TEST(MemoryPlanner, OverlappingLifetimesNeverShareBytes) {
  const std::vector<BufferLifetime> bs = {{100, 0, 2}, {50, 1, 3}, {70, 2, 2}};
  const MemoryPlan plan = plan_memory(bs, 1);
  expect_valid(bs, plan, 1);
  EXPECT_EQ(plan.total, 220u);  // all three are live at step 2
}

TEST(MemoryPlanner, DisjointLifetimesReuseBytes) {
  // A chain: each buffer dies when the next is made, so two buffers at a time at most.
  const std::vector<BufferLifetime> bs = {{64, 0, 1}, {64, 1, 2}, {64, 2, 3}, {64, 3, 4}};
  const MemoryPlan plan = plan_memory(bs, 1);
  expect_valid(bs, plan, 1);
  EXPECT_EQ(plan.total, 128u);
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
  EXPECT_EQ(plan.offsets[1], plan.offsets[3]);
  // A small buffer fits in a hole a larger dead one left.
  const std::vector<BufferLifetime> hole = {{100, 0, 0}, {40, 1, 1}, {40, 0, 1}};
  const MemoryPlan p2 = plan_memory(hole, 1);
  expect_valid(hole, p2, 1);
  EXPECT_EQ(p2.total, 140u);
  EXPECT_EQ(p2.offsets[1], 0u);
}

TEST(MemoryPlanner, Alignment) {
  const std::vector<BufferLifetime> bs = {{10, 0, 1}, {10, 0, 1}, {1, 0, 1}};
  const MemoryPlan plan = plan_memory(bs, 64);
  expect_valid(bs, plan, 64);
  EXPECT_EQ(plan.total, 192u);
  EXPECT_EQ(plan_memory(bs, 1).total, 21u);
  EXPECT_THROW(plan_memory(bs, 48), Error);
  EXPECT_THROW(plan_memory(bs, 0), Error);
  const std::vector<BufferLifetime> backwards = {{8, 3, 2}};
  EXPECT_THROW(plan_memory(backwards, 16), Error);
  EXPECT_EQ(plan_memory({}, 16).total, 0u);
}

TEST(MemoryPlanner, RandomLifetimesStayValid) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<BufferLifetime> bs(1 + rng() % 40);
    for (auto& b : bs) {
      b.bytes = rng() % 1000;
      b.first = static_cast<int64_t>(rng() % 30) - 1;
      b.last = b.first + static_cast<int64_t>(rng() % 10);
    }
    const uint64_t alignment = uint64_t{1} << (rng() % 7);
    const MemoryPlan plan = plan_memory(bs, alignment);
    expect_valid(bs, plan, alignment);
  }
}

}  // namespace
}  // namespace etnp::compute
