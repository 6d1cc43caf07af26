#include "compute/large_pages.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace etnp::compute {
namespace {
constexpr size_t kLargePage = size_t{2} << 20;

template <typename T>
T round_up(T value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Under ASan every block comes from malloc, so that each keeps its redzones.
#if defined(__SANITIZE_ADDRESS__)
#define ETNP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ETNP_ASAN 1
#endif
#endif
#if defined(__linux__) && !defined(ETNP_ASAN)
#define ETNP_POOLED_CHUNKS 1
#endif

#if defined(ETNP_POOLED_CHUNKS)
// A ZeroedBuffer from here up is a mapping of its own even under 2 MiB: calloc memset a block that glibc's heap
// reused (its mmap threshold rises to the largest block freed), touching at load every page of the arenas that
// the first run writes (a sixth of a small MLP's first load, with the page faults it took).
constexpr size_t kOwnMappingBytes = size_t{64} << 10;
#endif

#if defined(__linux__)
size_t small_page() {
  static const auto bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

/// `length` bytes (a multiple of the page size) mapped from a 2 MiB boundary.
void* map_aligned(size_t length) {
  void* raw = mmap(nullptr, length + kLargePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = round_up(begin, kLargePage);
  if (start > begin) munmap(raw, start - begin);
  const uintptr_t end = begin + length + kLargePage;
  if (end > start + length) munmap(reinterpret_cast<void*>(start + length), end - (start + length));
  return reinterpret_cast<void*>(start);
}
#endif

#if defined(ETNP_POOLED_CHUNKS)
// Why the pool: on the project's machine (a VM) writing a fresh 4 KiB page cost 2.6 us and a fresh 2 MiB page
// 0.33 us per 4 KiB of it, which made the page faults of a portable LLM's packed linear layers (13 MiB, each under
// 2 MiB) about half of its load (16 -> 8 ms with the pool).
ChunkPool& process_pool() {
  static auto* pool = new ChunkPool;  // never destroyed: packed weights may be freed during static destruction
  return *pool;
}

bool pooled(size_t bytes) { return bytes >= ChunkPool::kMinBlock && bytes < kLargePage; }
#endif
}  // namespace

void trim_large_pages() {
#if defined(ETNP_POOLED_CHUNKS)
  process_pool().trim();
#endif
}

void* allocate_large(size_t bytes) {
#if defined(ETNP_POOLED_CHUNKS)
  if (pooled(bytes)) return process_pool().allocate(bytes);
#endif
  if (bytes < kLargePage) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
#if defined(__linux__)
  // A mapping of the size asked (in 4 KiB pages) that starts on a 2 MiB boundary: huge pages back its whole
  // 2 MiB blocks and the tail stays on small pages. Rounding the size up to 2 MiB instead kept up to 2 MiB more
  // resident per packing (a ResNet-18's twenty convolutions: 8 MiB).
  const size_t length = round_up(bytes, small_page());
  void* start = map_aligned(length);
#if defined(MADV_HUGEPAGE)
  madvise(start, length, MADV_HUGEPAGE);  // advice only: where huge pages are off, 4 KiB
#endif
  return start;
#else
  void* p = std::aligned_alloc(kLargePage, round_up(bytes, kLargePage));
  if (p == nullptr) throw std::bad_alloc();
  return p;
#endif
}

ZeroedBuffer::ZeroedBuffer(size_t bytes) : size_(bytes) {
  if (bytes >= kLargePage) {  // a mapping of its own: zero until written
    block_ = allocate_large(bytes);
    data_ = static_cast<uint8_t*>(block_);
#if !defined(__linux__)
    std::memset(data_, 0, bytes);  // aligned_alloc's memory is not zeroed
#endif
    return;
  }
#if defined(ETNP_POOLED_CHUNKS)
  if (bytes >= kOwnMappingBytes) {
    void* p = mmap(nullptr, round_up(bytes, small_page()), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    block_ = p;
    data_ = static_cast<uint8_t*>(p);
    return;
  }
#endif
  constexpr size_t kAlignment = 64;
  block_ = std::calloc(bytes + kAlignment, 1);
  if (block_ == nullptr) throw std::bad_alloc();
  data_ = static_cast<uint8_t*>(block_) + (kAlignment - reinterpret_cast<uintptr_t>(block_) % kAlignment) % kAlignment;
}

ZeroedBuffer::~ZeroedBuffer() {
  if (block_ == nullptr) return;
  if (size_ >= kLargePage) {
    free_large(block_, size_);
    return;
  }
#if defined(ETNP_POOLED_CHUNKS)
  if (size_ >= kOwnMappingBytes) {
    munmap(block_, round_up(size_, small_page()));
    return;
  }
#endif
  std::free(block_);
}

void free_large(void* p, size_t bytes) noexcept {
#if defined(ETNP_POOLED_CHUNKS)
  if (pooled(bytes)) return process_pool().free(p);
#endif
#if defined(__linux__)
  if (bytes >= kLargePage) {
    munmap(p, round_up(bytes, small_page()));
    return;
  }
#else
  (void)bytes;
#endif
  std::free(p);
}

#if defined(__linux__)
ChunkPool::~ChunkPool() {
  for (const Chunk& c : chunks_) munmap(reinterpret_cast<void*>(c.base), kChunkBytes);
}

void* ChunkPool::allocate(size_t bytes) {
  bytes = round_up(bytes, kBlockAlignment);
  if (bytes > kChunkBytes) throw std::bad_alloc();
  void* block = cut_block(bytes);
#if defined(MADV_POPULATE_WRITE)
  // The caller writes the whole block next (a packing): its pages are made present in one call (Linux 5.14 and
  // later; advice only) instead of one page fault each, 1.5 us a 4 KiB page instead of 2.7 on the project's
  // machine. Outside the lock: other loads need not wait for it.
  const uintptr_t begin = reinterpret_cast<uintptr_t>(block) / small_page() * small_page();
  const uintptr_t end = round_up(reinterpret_cast<uintptr_t>(block) + bytes, small_page());
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#endif
  return block;
}

void* ChunkPool::cut_block(size_t bytes) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Chunk* chunk = nullptr;
  for (Chunk& c : chunks_) {
    if (kChunkBytes - c.used >= bytes) {
      chunk = &c;
      break;
    }
  }
  if (chunk == nullptr) {
    void* base = map_aligned(kChunkBytes);
    bool huge = false;
#if defined(MADV_HUGEPAGE)
    // Advice only: where huge pages are off, 4 KiB.
    huge = !chunks_.empty() && madvise(base, kChunkBytes, MADV_HUGEPAGE) == 0;
#endif
    try {
      chunks_.push_back(Chunk{reinterpret_cast<uintptr_t>(base), 0, 0, huge, kChunkBytes});
    } catch (...) {
      munmap(base, kChunkBytes);
      throw;
    }
    chunk = &chunks_.back();
  }
  void* p = reinterpret_cast<void*>(chunk->base + chunk->used);
  chunk->used += bytes;
  ++chunk->live;
  return p;
}

void ChunkPool::free(void* p) noexcept {
  const uintptr_t base = reinterpret_cast<uintptr_t>(p) / kChunkBytes * kChunkBytes;
  void* empty = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < chunks_.size(); ++i) {
      if (chunks_[i].base != base) continue;
      if (--chunks_[i].live == 0) {
        empty = reinterpret_cast<void*>(base);
        chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(i));
      }
      break;
    }
  }
  if (empty != nullptr) munmap(empty, kChunkBytes);  // outside the lock: other loads need not wait for it
}

void ChunkPool::trim() {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (Chunk& c : chunks_) {
    const size_t end = round_up(c.used, small_page());
    if (!c.huge || end >= c.trimmed) continue;
    madvise(reinterpret_cast<void*>(c.base + end), c.trimmed - end, MADV_DONTNEED);
    // And no huge page for the chunk from now on: khugepaged collapses an advised 2 MiB range with even one page
    // present (Debian's max_ptes_none is 511), which made the dropped pages resident again seconds later (a
    // soak test saw a transformer's resident set grow by 2 MiB less 8 KiB between two runs).
    madvise(reinterpret_cast<void*>(c.base), kChunkBytes, MADV_NOHUGEPAGE);
    c.trimmed = end;
  }
}

size_t ChunkPool::chunks() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return chunks_.size();
}
#endif

}  // namespace etnp::compute
