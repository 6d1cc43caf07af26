// The bytes of a loaded file: a read-only memory map of a file or descriptor, or a caller's buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace etnp::format {

class ByteSource {
 public:
  /// Maps `path` read-only. Throws etnp::Error(ProgramLoadError) naming the path and the OS error.
  static std::shared_ptr<ByteSource> map_file(const std::string& path);
  /// Maps an open descriptor (the mapping stays valid after the descriptor is closed).
  static std::shared_ptr<ByteSource> map_fd(int fd, const std::string& name);
  /// Uses the caller's bytes in place when 16-byte aligned (kept alive by `keep_alive`), else copies them once.
  static std::shared_ptr<ByteSource> from_buffer(std::span<const uint8_t> bytes, std::shared_ptr<const void> keep_alive,
                                                 const std::string& name);

  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  /// The path, or a description such as "<buffer>", for messages.
  const std::string& name() const { return name_; }
  /// Tells the kernel that the whole pages of `range` that lie in this source's file mapping are not needed
  /// now (what a delegate packed at load): they leave the process's resident memory and, read again, come
  /// back from the file. Does nothing outside the mapping (a caller's buffer, a copy), so never changes bytes.
  void release(std::span<const uint8_t> range) const;

 private:
  ByteSource() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;       // munmap'ed on destruction
  size_t mapping_size_ = 0;
  std::vector<uint8_t> copy_;  // over-allocated so data_ can be aligned inside it
  void adopt_copy(const uint8_t* bytes, size_t size);
  std::shared_ptr<const void> keep_alive_;
  std::string name_;
};

}  // namespace etnp::format
