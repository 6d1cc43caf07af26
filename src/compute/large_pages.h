// Memory for large packed weights that kernels stream on every call: backed by 2 MiB pages where the kernel
// allows it (Linux transparent huge pages in "madvise" mode, the Debian default), so that streaming them
// does not walk the page tables once per 4 KiB, and so that writing them at load faults once per 2 MiB. Measured
// on the project's machine: a one-thread read of 16 MiB at 23 GB/s on 4 KiB pages, 29 GB/s on 2 MiB pages; the
// first write of a fresh 4 KiB page 2.6 us, of a 2 MiB page 0.33 us per 4 KiB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace etnp::compute {

/// Blocks under 16 KiB come from malloc; from 16 KiB up to 2 MiB, from the process's ChunkPool (under ASan, from
/// malloc, so that each keeps its redzones); from 2 MiB, from a mapping of their own on a 2 MiB boundary.
void* allocate_large(size_t bytes);
/// Frees a block of allocate_large(bytes), `bytes` as given to it.
void free_large(void* p, size_t bytes) noexcept;

/// The process's ChunkPool::trim() (nothing where there is none).
void trim_large_pages();

/// Zero-filled memory for what a program writes as it runs (the planned arenas of its activations), 64-byte
/// aligned and not touched here: from 2 MiB a mapping of its own advised as huge pages (allocate_large), so that
/// the first run faults it in 2 MiB at a time instead of 4 KiB (8x less per byte on the project's machine, see
/// above: etnp_demo's portable MobileNetV2 writes 9.2 MiB of activations on its first run); from 64 KiB a
/// mapping of small pages (Linux, not under ASan); below, calloc.
class ZeroedBuffer {
 public:
  ZeroedBuffer() = default;
  /// Throws std::bad_alloc when the memory cannot be had.
  explicit ZeroedBuffer(size_t bytes);
  ZeroedBuffer(ZeroedBuffer&& other) noexcept { swap(other); }
  ZeroedBuffer& operator=(ZeroedBuffer&& other) noexcept {
    ZeroedBuffer(std::move(other)).swap(*this);
    return *this;
  }
  ~ZeroedBuffer();
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  void swap(ZeroedBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(block_, other.block_);
  }
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* block_ = nullptr;  ///< what was allocated: allocate_large's block, or calloc's (data_ aligned within it)
};

#if defined(__linux__)
/// Mid-sized blocks cut from shared 2 MiB chunks, so that a model's many packings under 2 MiB each sit on huge
/// pages too (large_pages.cpp says what that saves). The first chunk stays on small pages, so that a program
/// with under 2 MiB of such packings keeps no more resident than it writes; a chunk opened while another is live
/// is advised as huge pages. Blocks are handed out from a chunk's start up (64-byte aligned, first fit over the
/// live chunks); a chunk is unmapped when its last block is freed, and space freed inside a live chunk is not
/// reused. Thread-safe. allocate_large uses the process's; tests make their own.
class ChunkPool {
 public:
  static constexpr size_t kChunkBytes = size_t{2} << 20;
  static constexpr size_t kMinBlock = size_t{16} << 10;  ///< smaller blocks are better off in malloc's heap
  static constexpr size_t kBlockAlignment = 64;

  ChunkPool() = default;
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;
  ~ChunkPool();  ///< unmaps the chunks still held (their blocks must no longer be in use)

  /// A block of `bytes` (kMinBlock up to kChunkBytes), its pages present (written next, in full, by a packing).
  void* allocate(size_t bytes);
  /// Frees a block of allocate().
  void free(void* p) noexcept;
  /// Chunks mapped now.
  size_t chunks() const;
  /// Drops the pages past the last block of each chunk advised huge: a huge page backs the whole 2 MiB when it is
  /// first written, so the unwritten end of a model's last chunk was resident for nothing. (The kernel splits the
  /// huge page, and the chunk is advised against huge pages from then on, so that khugepaged does not make the
  /// dropped pages resident again; later blocks there fault in small pages.) The runtime calls it
  /// (trim_large_pages) when a method has loaded.
  void trim();

 private:
  struct Chunk {
    uintptr_t base;
    size_t used;     ///< bytes handed out from the start, freed or not
    size_t live;     ///< blocks not yet freed
    bool huge;       ///< advised as huge pages
    size_t trimmed;  ///< pages from here on were dropped by trim() (kChunkBytes: none)
  };
  void* cut_block(size_t bytes);  ///< allocate() under the lock: the block's place, a new chunk where none has room
  mutable std::mutex mutex_;
  std::vector<Chunk> chunks_;  // few: a model's mid-sized packings hold one per 2 MiB
};
#endif

/// A std::allocator over allocate_large (2 MiB and more: 2 MiB-aligned and advised as huge pages; from 16 KiB:
/// pooled, 64-byte aligned). Elements
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
