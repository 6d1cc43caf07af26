// Memory for large packed weights that kernels stream on every call: backed by 2 MiB pages where the kernel
// allows it (Linux transparent huge pages in "madvise" mode, the Debian default), so that streaming them
// does not walk the page tables once per 4 KiB. Measured on the project's machine: a one-thread read of
// 16 MiB at 23 GB/s on 4 KiB pages, 29 GB/s on 2 MiB pages.
#pragma once

#include <cstddef>
#include <new>
#include <utility>

namespace etnp::compute {

void* allocate_large(size_t bytes);
void free_large(void* p, size_t bytes) noexcept;

/// A std::allocator whose allocations of 2 MiB and more are 2 MiB-aligned and advised as huge pages. Elements
/// made without a value (resize(n), vector(n)) are default-initialized, not zeroed: a packing writes every
/// element it reads, and a pass of zeros over tens of MiB of weights only to overwrite them cost load time.
template <class T>
struct LargePageAllocator {
  using value_type = T;
  LargePageAllocator() = default;
  template <class U>
  LargePageAllocator(const LargePageAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(allocate_large(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { free_large(p, n * sizeof(T)); }
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const LargePageAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace etnp::compute
