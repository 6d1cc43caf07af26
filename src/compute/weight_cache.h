// A process-wide cache of weights packed at load (compute::PackedGemm, compute::DepthwiseConv and the XNNPACK
// delegate's int8 packings), so that methods and programs that pack the same constants hold them once.
//
// An entry is identified by its *packed* content: the packing's type and every byte its kernels read (sizes,
// parameters, packed panels). A loader packs as usual, then share() returns the live entry with the same
// type and content, or stores the new packing. Keying on the result rather than on the source constant means
// that every parameter that changes the packed bytes is in the key by construction, and that the confirmation
// (a byte comparison after a 64-bit hash, of samples of the large parts, matched) compares exactly the bytes the
// kernels will read: a hash collision costs one comparison, never wrong weights. The price is that a hit still
// packs once (the temporary packing is freed at once); what is saved is memory, not load time. Within one load,
// share_made() also saves the time: a LoadMemo remembers each packing by its source (the pointers it read and its
// parameters), so that the layers of a model that use the same constants pack them once.
//
// Entries are owned by the shared_ptrs handed out (the delegates' steps); the cache keeps only weak
// references and forgets an entry when its last user is gone. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <typeindex>
#include <vector>

namespace etnp::compute {

/// A packed weight's identity: byte ranges that, equal one by one, make two packings interchangeable.
using WeightBytes = std::vector<std::span<const std::byte>>;

/// The bytes of one scalar member.
template <typename T>
std::span<const std::byte> bytes_of(const T& scalar) {
  return std::as_bytes(std::span<const T>(&scalar, 1));
}
/// The bytes of a vector's elements (any allocator).
template <typename T, typename A>
std::span<const std::byte> bytes_of(const std::vector<T, A>& v) {
  return std::as_bytes(std::span<const T>(v));
}

/// A fast non-cryptographic 64-bit hash (16 bytes per 64x64->128-bit multiply, four independent lanes). Equal
/// bytes give equal hashes; the cache confirms every match byte by byte.
uint64_t hash_bytes(std::span<const std::byte> bytes, uint64_t seed = 0);

/// Live entries and the bytes of their packed weights (each counted once, however many users share it).
struct WeightCacheCounts {
  size_t entries = 0;
  size_t bytes = 0;
};

class WeightCache {
 public:
  /// The process's cache (never destroyed, so entries may outlive static objects).
  static WeightCache& global();

  /// The live entry of type T whose content() equals packed->content(), or `packed` itself, now an entry.
  /// T needs `WeightBytes content() const` and `size_t bytes() const`. The returned pointer keeps the entry
  /// alive; `packed` may be dropped.
  template <typename T>
  std::shared_ptr<const T> share(std::shared_ptr<const T> packed) {
    if (!packed) return packed;
    const WeightBytes content = packed->content();
    const auto same = [&content](const void* entry) {
      return same_bytes(static_cast<const T*>(entry)->content(), content);
    };
    return std::static_pointer_cast<const T>(
        share_erased(std::type_index(typeid(T)), packed, hash_of(content), packed->bytes(), same));
  }

  /// share(make()), except that while a LoadMemo is open on this thread, a call with the `source` of an earlier
  /// call under the same memo returns that call's packing without calling make(). `source` must name every input
  /// of the packing: the addresses of the bytes it reads (unchanged while the load runs) and its parameters.
  template <typename T, typename Make>
  std::shared_ptr<const T> share_made(std::vector<uint64_t> source, Make&& make);

  WeightCacheCounts counts() const;

 private:
  struct Entry {
    std::type_index type;
    size_t bytes;
    std::weak_ptr<const void> object;
  };
  using Entries = std::multimap<uint64_t, Entry>;  // by content hash; iterators stay valid until erased
  class Release;

  static uint64_t hash_of(const WeightBytes& content);
  static bool same_bytes(const WeightBytes& a, const WeightBytes& b);
  template <typename F>
  std::shared_ptr<const void> share_erased(std::type_index type, std::shared_ptr<const void> packed, uint64_t hash,
                                           size_t bytes, const F& same);
  std::shared_ptr<const void> find_locked(std::type_index type, uint64_t hash,
                                          std::vector<std::shared_ptr<const void>>& held,
                                          bool (*same)(const void* context, const void* entry),
                                          const void* context);
  std::shared_ptr<const void> insert_locked(std::type_index type, std::shared_ptr<const void> packed, uint64_t hash,
                                            size_t bytes);
  void erase(Entries::iterator it);

  mutable std::mutex mutex_;
  Entries entries_;
  size_t bytes_ = 0;
};

/// Opens, for its lifetime and on the calling thread, the scope within which WeightCache::share_made() remembers
/// packings by their source. The runtime opens one around each method's load: within it the program's constants
/// (and what the load derived from them) stay where they are, so an address names the same bytes throughout.
/// Scopes nest (the innermost is used); not shared across threads.
class LoadMemo {
 public:
  LoadMemo();
  ~LoadMemo();
  LoadMemo(const LoadMemo&) = delete;
  LoadMemo& operator=(const LoadMemo&) = delete;

  /// The innermost memo open on this thread, or null.
  static LoadMemo* current();

 private:
  friend class WeightCache;
  std::map<std::pair<std::type_index, std::vector<uint64_t>>, std::shared_ptr<const void>> made_;
  LoadMemo* enclosing_;
};

template <typename T, typename Make>
std::shared_ptr<const T> WeightCache::share_made(std::vector<uint64_t> source, Make&& make) {
  LoadMemo* memo = LoadMemo::current();
  if (memo == nullptr) return share(std::shared_ptr<const T>(make()));
  auto key = std::make_pair(std::type_index(typeid(T)), std::move(source));
  if (const auto it = memo->made_.find(key); it != memo->made_.end()) {
    return std::static_pointer_cast<const T>(it->second);
  }
  std::shared_ptr<const T> packed = share(std::shared_ptr<const T>(make()));
  memo->made_.emplace(std::move(key), packed);
  return packed;
}

template <typename F>
std::shared_ptr<const void> WeightCache::share_erased(std::type_index type, std::shared_ptr<const void> packed,
                                                      uint64_t hash, size_t bytes, const F& same) {
  // Candidates locked during the search are released after the mutex: dropping the last reference to an
  // entry runs its release, which takes the mutex.
  std::vector<std::shared_ptr<const void>> held;
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto call = [](const void* context, const void* entry) { return (*static_cast<const F*>(context))(entry); };
  if (auto found = find_locked(type, hash, held, call, &same)) return found;
  return insert_locked(type, std::move(packed), hash, bytes);
}

}  // namespace etnp::compute
