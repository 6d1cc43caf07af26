#include "compute/large_pages.h"

#include <cstdint>
#include <cstdlib>
#include <new>

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
}  // namespace

void* allocate_large(size_t bytes) {
  if (bytes < kLargePage) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
#if defined(__linux__)
  static const auto kSmallPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // A mapping of the size asked (in 4 KiB pages) that starts on a 2 MiB boundary: huge pages back its whole
  // 2 MiB blocks and the tail stays on small pages. Rounding the size up to 2 MiB instead kept up to 2 MiB more
  // resident per packing (a ResNet-18's twenty convolutions: 8 MiB).
  const size_t length = round_up(bytes, kSmallPage);
  void* raw = mmap(nullptr, length + kLargePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = round_up(begin, kLargePage);
  if (start > begin) munmap(raw, start - begin);
  const uintptr_t end = begin + length + kLargePage;
  if (end > start + length) munmap(reinterpret_cast<void*>(start + length), end - (start + length));
#if defined(MADV_HUGEPAGE)
  madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);  // advice only: where huge pages are off, 4 KiB
#endif
  return reinterpret_cast<void*>(start);
#else
  void* p = std::aligned_alloc(kLargePage, round_up(bytes, kLargePage));
  if (p == nullptr) throw std::bad_alloc();
  return p;
#endif
}

void free_large(void* p, size_t bytes) noexcept {
#if defined(__linux__)
  if (bytes >= kLargePage) {
    static const auto kSmallPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    munmap(p, round_up(bytes, kSmallPage));
    return;
  }
#else
  (void)bytes;
#endif
  std::free(p);
}

}  // namespace etnp::compute
