#include "compute/large_pages.h"

#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace etnp::compute {
namespace {
constexpr size_t kLargePage = size_t{2} << 20;
}  // namespace

void* allocate_large(size_t bytes) {
  if (bytes < kLargePage) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  const size_t rounded = (bytes + kLargePage - 1) / kLargePage * kLargePage;
  void* p = std::aligned_alloc(kLargePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: where huge pages are off, 4 KiB pages as before
#endif
  return p;
}

void free_large(void* p, size_t) noexcept { std::free(p); }

}  // namespace etnp::compute
