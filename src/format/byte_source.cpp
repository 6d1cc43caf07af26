#include "format/byte_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "etnp/error.h"

namespace etnp::format {
namespace {

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw Error(ErrorKind::ProgramLoadError, "cannot read '" + name + "': " + what);
}

// Storage aligned for the flatbuffer's force_align(16) vectors and for SIMD reads of constants.
constexpr size_t kAlignment = 64;

}  // namespace

std::shared_ptr<ByteSource> ByteSource::map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::strerror(errno));
  try {
    auto source = map_fd(fd, path);
    ::close(fd);
    return source;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

std::shared_ptr<ByteSource> ByteSource::map_fd(int fd, const std::string& name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(name, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(name, "it is a directory");
  auto source = std::shared_ptr<ByteSource>(new ByteSource());
  source->name_ = name;
  const size_t size = static_cast<size_t>(st.st_size);
  if (!S_ISREG(st.st_mode)) {
    // A pipe or similar: read it whole.
    std::string data;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) data.append(buf, static_cast<size_t>(n));
    if (n < 0) fail(name, std::strerror(errno));
    source->adopt_copy(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    return source;
  }
  if (size == 0) {
    source->data_ = reinterpret_cast<const uint8_t*>("");
    source->size_ = 0;
    return source;
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) fail(name, std::string("mmap failed: ") + std::strerror(errno));
  source->mapping_ = p;
  source->mapping_size_ = size;
  source->data_ = static_cast<const uint8_t*>(p);
  source->size_ = size;
  return source;
}

std::shared_ptr<ByteSource> ByteSource::from_buffer(std::span<const uint8_t> bytes, std::shared_ptr<const void> keep_alive,
                                                    const std::string& name) {
  auto source = std::shared_ptr<ByteSource>(new ByteSource());
  source->name_ = name;
  source->size_ = bytes.size();
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 16 == 0 && bytes.data() != nullptr) {
    source->data_ = bytes.data();
    source->keep_alive_ = std::move(keep_alive);
  } else {
    source->adopt_copy(bytes.data(), bytes.size());
  }
  return source;
}

void ByteSource::adopt_copy(const uint8_t* bytes, size_t size) {
  copy_.assign(size + kAlignment, 0);
  auto base = reinterpret_cast<uintptr_t>(copy_.data());
  uint8_t* aligned = copy_.data() + ((kAlignment - base % kAlignment) % kAlignment);
  if (size != 0) std::memcpy(aligned, bytes, size);
  data_ = aligned;
  size_ = size;
}

void ByteSource::release(std::span<const uint8_t> range) const {
  if (mapping_ == nullptr || range.empty()) return;
  const auto map_begin = reinterpret_cast<uintptr_t>(mapping_);
  const auto begin = reinterpret_cast<uintptr_t>(range.data());
  if (begin < map_begin || range.size() > mapping_size_ || begin - map_begin > mapping_size_ - range.size()) return;
  // Whole pages only: the ends may share a page with bytes still in use. A private, read-only file mapping
  // has no private pages, so MADV_DONTNEED only drops clean page references.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + range.size()) / page * page;
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

ByteSource::~ByteSource() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

}  // namespace etnp::format
