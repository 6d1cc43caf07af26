// compute::allocate_large: small blocks from malloc, blocks of 2 MiB and more mapped on a 2 MiB boundary with
// exactly the pages asked for (no rounding to 2 MiB), every byte writable, and freed with the size given; the
// mid-sized ones in between from compute::ChunkPool, whose chunks are checked against the kernel's own record of
// the mappings (/proc/self/smaps: which are advised as huge pages, which are gone).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "compute/large_pages.h"

namespace etnp::compute {
namespace {

constexpr size_t kMib = size_t{1} << 20;

TEST(LargePages, BlocksOfTwoMibAndMoreStartOnATwoMibBoundaryAndHoldEveryByte) {
  for (size_t bytes : {size_t{1}, size_t{4096}, size_t{16384}, 2 * kMib - 1, 2 * kMib, 2 * kMib + 1, 5 * kMib + 123,
                       9 * kMib}) {
    auto* p = static_cast<unsigned char*>(allocate_large(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    if (bytes >= 2 * kMib) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2 * kMib), 0u) << bytes;
    } else if (bytes >= ChunkPool::kMinBlock) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % ChunkPool::kBlockAlignment, 0u) << bytes;
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

/// The VmFlags line of the mapping that holds `address`, from /proc/self/smaps ("" when none does).
std::string vm_flags_at(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long begin = 0, end = 0;
    if (line.find('-') != std::string::npos && std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 &&
        line.find(':') > line.find(' ')) {
      inside = at >= begin && at < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool mapped(const void* address) {
  unsigned char resident = 0;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(address) / page * page);
  return mincore(start, 1, &resident) == 0 || errno != ENOMEM;
}

/// Whether huge-page advice shows in /proc/self/smaps here: a probe mapping advised MADV_HUGEPAGE gets the "hg"
/// flag where the kernel has transparent huge pages (qemu-user accepts the advice and drops it).
bool huge_page_advice_recorded() {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good()) return false;
  const size_t bytes = ChunkPool::kChunkBytes;
  void* probe = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) return false;
  const bool recorded = madvise(probe, bytes, MADV_HUGEPAGE) == 0 && vm_flags_at(probe).find(" hg") != std::string::npos;
  munmap(probe, bytes);
  return recorded;
}

// ZeroedBuffer, what the planned arenas of activations live in: zero throughout, 64-byte aligned, every byte
// writable; from 2 MiB a 2 MiB-aligned mapping advised as huge pages (where the kernel records the advice), below
// from the heap; moved, not copied, and freed once (ASan checks the frees and the ends).
TEST(ZeroedBuffer, IsZeroAlignedAndFromTwoMibOnHugePages) {
  const bool advice = huge_page_advice_recorded();
  for (size_t bytes : {size_t{1}, size_t{100}, size_t{70000}, 2 * kMib - 1, 2 * kMib, 6 * kMib + 5}) {
    ZeroedBuffer buffer(bytes);
    ASSERT_TRUE(buffer) << bytes;
    EXPECT_EQ(buffer.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u) << bytes;
    EXPECT_TRUE(std::all_of(buffer.data(), buffer.data() + bytes, [](uint8_t b) { return b == 0; })) << bytes;
    if (bytes >= 2 * kMib) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % (2 * kMib), 0u) << bytes;
      if (advice) {
        EXPECT_NE(vm_flags_at(buffer.data()).find(" hg"), std::string::npos) << bytes;
      }
    }
    std::memset(buffer.data(), 0x5A, bytes);
    ZeroedBuffer moved(std::move(buffer));
    EXPECT_FALSE(buffer);
    EXPECT_EQ(moved.data()[bytes - 1], 0x5A);
    ZeroedBuffer assigned;
    assigned = std::move(moved);
    EXPECT_EQ(assigned.size(), bytes);
    EXPECT_EQ(assigned.data()[0], 0x5A);
  }
}

/// Pages of [begin, begin + bytes) resident now (mincore; `begin` on a page boundary).
size_t resident_pages(const void* begin, size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> pages((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(begin), bytes, pages.data()) != 0) return 0;
  return static_cast<size_t>(std::count_if(pages.begin(), pages.end(), [](unsigned char p) { return p & 1; }));
}

// From 64 KiB a ZeroedBuffer is not written when made, even where glibc's heap would hand back a block it has
// used (calloc then zeroes it, touching every page at load): a freed 8 MiB block raises glibc's threshold for
// mapping blocks of their own, so that a calloc of 1 MiB comes from the heap. (Under ASan blocks come from
// malloc, which keeps their redzones.)
TEST(ZeroedBuffer, FromSixtyFourKibIsNotTouchedUntilWritten) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan: from malloc";
#else
  void* used = std::malloc(8 * kMib);
  ASSERT_NE(used, nullptr);
  std::memset(used, 1, 8 * kMib);
  std::free(used);
  for (size_t bytes : {size_t{65536}, size_t{300000}, kMib, 2 * kMib - 1}) {
    ZeroedBuffer buffer(bytes);
    EXPECT_EQ(resident_pages(buffer.data(), bytes), 0u) << bytes;
    buffer.data()[bytes / 2] = 7;
    EXPECT_EQ(resident_pages(buffer.data(), bytes), 1u) << bytes;
    EXPECT_TRUE(std::all_of(buffer.data(), buffer.data() + bytes, [](uint8_t b) { return b == 0 || b == 7; }));
  }
#endif
}

TEST(ChunkPool, BlocksShareChunksFromTheStartUpAndEveryByteIsTheirs) {
  ChunkPool pool;
  std::vector<std::pair<unsigned char*, size_t>> blocks;
  for (size_t bytes : {size_t{16384}, size_t{100000}, kMib + 1, kMib, 3 * kMib / 2, size_t{70000}}) {
    auto* p = static_cast<unsigned char*>(pool.allocate(bytes));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % ChunkPool::kBlockAlignment, 0u) << bytes;
    std::memset(p, static_cast<int>(blocks.size() + 1), bytes);
    blocks.emplace_back(p, bytes);
  }
  // No two blocks overlap: each still holds its own byte everywhere.
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto [p, bytes] = blocks[i];
    EXPECT_TRUE(std::all_of(p, p + bytes, [&](unsigned char b) { return b == i + 1; })) << i;
  }
  // 16 KiB + 100000 + (1 MiB + 1) share the first chunk; 1 MiB does not fit after them and opens a second,
  // 1.5 MiB a third; 70000 fits back in the first (first fit).
  EXPECT_EQ(pool.chunks(), 3u);
  const auto chunk_of = [](const void* p) { return reinterpret_cast<uintptr_t>(p) / ChunkPool::kChunkBytes; };
  EXPECT_EQ(chunk_of(blocks[1].first), chunk_of(blocks[0].first));
  EXPECT_EQ(blocks[1].first, blocks[0].first + 16384);
  EXPECT_EQ(chunk_of(blocks[5].first), chunk_of(blocks[0].first));
  EXPECT_NE(chunk_of(blocks[3].first), chunk_of(blocks[0].first));
  EXPECT_NE(chunk_of(blocks[4].first), chunk_of(blocks[3].first));
  for (const auto& [p, bytes] : blocks) pool.free(p);
  EXPECT_EQ(pool.chunks(), 0u);
}

TEST(ChunkPool, TheFirstChunkStaysOnSmallPagesLaterOnesAreAdvisedHuge) {
  if (!huge_page_advice_recorded()) {
    GTEST_SKIP() << "huge-page advice does not show in /proc/self/smaps here (no transparent huge pages, or emulated)";
  }
  ChunkPool pool;
  void* first = pool.allocate(3 * kMib / 2);
  void* second = pool.allocate(3 * kMib / 2);  // does not fit in the first chunk
  ASSERT_EQ(pool.chunks(), 2u);
  const std::string first_flags = vm_flags_at(first), second_flags = vm_flags_at(second);
  ASSERT_FALSE(first_flags.empty());
  ASSERT_FALSE(second_flags.empty());
  EXPECT_EQ(first_flags.find(" hg"), std::string::npos) << first_flags;
  EXPECT_NE(second_flags.find(" hg"), std::string::npos) << second_flags;
  // With the first chunk gone, the second is the only one: a chunk opened now is still advised huge (another is
  // live); once both are gone, the next first chunk is on small pages again.
  pool.free(first);
  EXPECT_FALSE(mapped(first));
  void* third = pool.allocate(3 * kMib / 2);
  EXPECT_NE(vm_flags_at(third).find(" hg"), std::string::npos);
  pool.free(second);
  pool.free(third);
  EXPECT_FALSE(mapped(second));
  EXPECT_FALSE(mapped(third));
  EXPECT_EQ(pool.chunks(), 0u);
  void* again = pool.allocate(ChunkPool::kMinBlock);
  EXPECT_EQ(vm_flags_at(again).find(" hg"), std::string::npos);
  pool.free(again);
}

TEST(ChunkPool, TrimDropsThePagesPastTheLastBlockOfHugeChunksAndKeepsTheBlocks) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ChunkPool pool;
  auto* first = static_cast<unsigned char*>(pool.allocate(3 * kMib / 2));  // the first chunk: small pages
  auto* second = static_cast<unsigned char*>(pool.allocate(kMib / 2 + 100));  // a second chunk, advised huge
  std::memset(first, 1, 3 * kMib / 2);
  std::memset(second, 2, kMib / 2 + 100);
  const size_t used = (kMib / 2 + 100 + page - 1) / page * page;  // 64-byte blocks, whole pages kept
  unsigned char* second_end = second + used;
  const size_t tail = ChunkPool::kChunkBytes - used;
  // Where the kernel backed the second chunk with a huge page, its tail is resident until the trim.
  const size_t tail_before = resident_pages(second_end, tail);
  EXPECT_TRUE(tail_before == 0 || tail_before == tail / page) << tail_before;
  pool.trim();
  EXPECT_EQ(resident_pages(second_end, tail), 0u);
  // Advised against huge pages now, so that khugepaged does not collapse the chunk back into one (which makes
  // every dropped page resident again).
  if (huge_page_advice_recorded()) {
    EXPECT_EQ(vm_flags_at(second).find(" hg"), std::string::npos);
    EXPECT_NE(vm_flags_at(second).find(" nh"), std::string::npos);
  }
  EXPECT_EQ(resident_pages(second, used), used / page);
  EXPECT_TRUE(std::all_of(second, second + kMib / 2 + 100, [](unsigned char b) { return b == 2; }));
  EXPECT_TRUE(std::all_of(first, first + 3 * kMib / 2, [](unsigned char b) { return b == 1; }));
  // A block cut after the trim, where the pages were dropped (too large for the first chunk's rest): mapped and
  // writable again.
  auto* third = static_cast<unsigned char*>(pool.allocate(kMib / 4 * 3));
  EXPECT_GE(third, second + kMib / 2 + 100);
  EXPECT_LT(third, second + ChunkPool::kChunkBytes);
  std::memset(third, 3, kMib / 4 * 3);
  EXPECT_EQ(third[kMib / 4 * 3 - 1], 3);
  pool.trim();  // again: the third block's pages stay
  EXPECT_EQ(third[0], 3);
  EXPECT_EQ(second[0], 2);
  pool.free(first);
  pool.free(second);
  pool.free(third);
  EXPECT_EQ(pool.chunks(), 0u);
}

TEST(ChunkPool, AChunkIsUnmappedWithItsLastBlockNotBefore) {
  ChunkPool pool;
  void* a = pool.allocate(kMib / 2);
  void* b = pool.allocate(kMib / 2);
  pool.free(a);
  EXPECT_EQ(pool.chunks(), 1u);
  EXPECT_TRUE(mapped(a));  // b still lives in the chunk
  std::memset(b, 7, kMib / 2);
  pool.free(b);
  EXPECT_EQ(pool.chunks(), 0u);
  EXPECT_FALSE(mapped(b));
}

TEST(Concurrency, ChunkPoolAllocatesAndFreesFromSeveralThreads) {
  ChunkPool pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int round = 0; round < 50; ++round) {
        std::vector<std::pair<unsigned char*, size_t>> held;
        for (size_t bytes : {size_t{20000}, size_t{300000}, size_t{16384}}) {
          auto* p = static_cast<unsigned char*>(pool.allocate(bytes + 64 * t));
          std::memset(p, t + 1, bytes + 64 * t);
          held.emplace_back(p, bytes + 64 * t);
        }
        for (const auto& [p, bytes] : held) {
          EXPECT_TRUE(std::all_of(p, p + bytes, [t](unsigned char v) { return v == t + 1; }));
          pool.free(p);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(pool.chunks(), 0u);
}

}  // namespace
}  // namespace etnp::compute
