// compute::allocate_large: small blocks from malloc, blocks of 2 MiB and more mapped on a 2 MiB boundary with
// exactly the pages asked for (no rounding to 2 MiB), every byte writable, and freed with the size given.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "compute/large_pages.h"

namespace etnp::compute {
namespace {

TEST(LargePages, BlocksOfTwoMibAndMoreStartOnATwoMibBoundaryAndHoldEveryByte) {
  constexpr size_t kMib = size_t{1} << 20;
  for (size_t bytes : {size_t{1}, size_t{4096}, 2 * kMib - 1, 2 * kMib, 2 * kMib + 1, 5 * kMib + 123, 9 * kMib}) {
    auto* p = static_cast<unsigned char*>(allocate_large(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    if (bytes >= 2 * kMib) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2 * kMib), 0u) << bytes;
    }
    std::memset(p, 0xA5, bytes);  // the whole block is mapped and writable (ASan and the MMU check the ends)
    EXPECT_EQ(p[0], 0xA5) << bytes;
    EXPECT_EQ(p[bytes - 1], 0xA5) << bytes;
    free_large(p, bytes);
  }
  // Through the allocator, as the packed weights hold them: grown, copied and freed.
  std::vector<float, LargePageAllocator<float>> v(3 * kMib / sizeof(float) + 7, 1.0f);
  v.resize(v.size() * 2, 2.0f);
  std::vector<float, LargePageAllocator<float>> w = v;
  EXPECT_EQ(w.front(), 1.0f);
  EXPECT_EQ(w.back(), 2.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % (2 * kMib), 0u);
}

}  // namespace
}  // namespace etnp::compute
