#include "compute/weight_cache.h"

#include <cstring>
#include <optional>

#include "etnp/backend.h"

namespace etnp::compute {
namespace {

constexpr uint64_t kMul0 = 0x9e3779b97f4a7c15ull;  // odd constants with well-spread bits
constexpr uint64_t kMul1 = 0xc2b2ae3d27d4eb4full;
constexpr uint64_t kLane[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull,
                               0x082efa98ec4e6c89ull};

uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The 128-bit product of a and b, folded to 64 bits: every input bit reaches many output bits.
uint64_t fold_mul(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

uint64_t rotl(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }

}  // namespace

uint64_t hash_bytes(std::span<const std::byte> bytes, uint64_t seed) {
  const std::byte* p = bytes.data();
  size_t n = bytes.size();
  uint64_t lane[4] = {seed ^ kLane[0], seed ^ kLane[1], seed ^ kLane[2], seed ^ kLane[3]};
  // Each lane's multiply does not depend on the lane's state, so the four run in parallel.
  for (; n >= 64; n -= 64, p += 64) {
    for (int l = 0; l < 4; ++l) {
      lane[l] = rotl(lane[l], 29) + fold_mul(load64(p + 16 * l) ^ kLane[l], load64(p + 16 * l + 8) ^ kMul1);
    }
  }
  for (; n >= 16; n -= 16, p += 16) lane[0] = rotl(lane[0], 29) + fold_mul(load64(p) ^ kLane[1], load64(p + 8) ^ kMul1);
  uint64_t tail[2] = {0, 0};
  if (n > 0) std::memcpy(tail, p, n);
  uint64_t h = fold_mul(tail[0] ^ kMul0 ^ bytes.size(), tail[1] ^ kMul1);
  for (int l = 0; l < 4; ++l) h = fold_mul(h ^ lane[l], kMul0 + 2 * static_cast<uint64_t>(l));
  return h;
}

// ---- the cache ---------------------------------------------------------------------------------------

/// The deleter of the pointers the cache hands out: forgets the entry, then drops the packed object (outside
/// the mutex, so freeing large packings does not hold up other loads).
class WeightCache::Release {
 public:
  Release(WeightCache* cache, std::shared_ptr<const void> object) : cache_(cache), object_(std::move(object)) {}
  /// Set once the entry is in the map; before that (a failed insertion) there is nothing to forget.
  void attach(Entries::iterator it) { it_ = it; }
  void operator()(const void*) {
    if (it_) cache_->erase(*it_);
    object_.reset();
  }

 private:
  WeightCache* cache_;
  std::optional<Entries::iterator> it_;
  std::shared_ptr<const void> object_;
};

namespace {
thread_local LoadMemo* current_memo = nullptr;
}

LoadMemo::LoadMemo() : enclosing_(current_memo) { current_memo = this; }
LoadMemo::~LoadMemo() { current_memo = enclosing_; }
LoadMemo* LoadMemo::current() { return current_memo; }

WeightCache& WeightCache::global() {
  static auto* cache = new WeightCache;  // never destroyed: entries may be released during static destruction
  return *cache;
}

uint64_t WeightCache::hash_of(const WeightBytes& content) {
  // Of a large part, the size and a 64-byte sample every 4 KiB (and its last 64 bytes): hashing every byte cost a
  // tenth of a large model's load, and the key only has to spread packings across buckets. The byte comparison
  // that confirms a match is what guarantees the weights; packings that differ only between samples (sparse
  // weights) share a bucket and cost one comparison.
  constexpr size_t kSampled = 64 * 1024, kStride = 4096, kSample = 64;
  uint64_t h = content.size();
  for (const auto& part : content) {
    if (part.size() <= kSampled) {
      h = hash_bytes(part, h);
      continue;
    }
    h = hash_bytes(bytes_of(part.size()), h);
    for (size_t at = 0; at + kSample <= part.size(); at += kStride) h = hash_bytes(part.subspan(at, kSample), h);
    h = hash_bytes(part.last(kSample), h);
  }
  return h;
}

bool WeightCache::same_bytes(const WeightBytes& a, const WeightBytes& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    if (!a[i].empty() && std::memcmp(a[i].data(), b[i].data(), a[i].size()) != 0) return false;
  }
  return true;
}

std::shared_ptr<const void> WeightCache::find_locked(std::type_index type, uint64_t hash,
                                                     std::vector<std::shared_ptr<const void>>& held,
                                                     bool (*same)(const void* context, const void* entry),
                                                     const void* context) {
  const auto [first, last] = entries_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    if (it->second.type != type) continue;
    std::shared_ptr<const void> entry = it->second.object.lock();
    if (!entry) continue;  // its last user is gone; its release is waiting for the mutex
    held.push_back(entry);
    if (same(context, entry.get())) return entry;
  }
  return nullptr;
}

std::shared_ptr<const void> WeightCache::insert_locked(std::type_index type, std::shared_ptr<const void> packed,
                                                       uint64_t hash, size_t bytes) {
  // The handle first: should the map's insertion throw, dropping it must not erase (nor take the mutex).
  const void* object = packed.get();
  std::shared_ptr<const void> handle(object, Release(this, std::move(packed)));
  const auto it = entries_.emplace(hash, Entry{type, bytes, handle});
  std::get_deleter<Release>(handle)->attach(it);
  bytes_ += bytes;
  return handle;
}

void WeightCache::erase(Entries::iterator it) {
  const std::lock_guard<std::mutex> lock(mutex_);
  bytes_ -= it->second.bytes;
  entries_.erase(it);
}

WeightCacheCounts WeightCache::counts() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return {entries_.size(), bytes_};
}

}  // namespace etnp::compute

namespace etnp {

PackedWeightCacheStats packed_weight_cache_stats() {
  const compute::WeightCacheCounts c = compute::WeightCache::global().counts();
  return {c.entries, c.bytes};
}

}  // namespace etnp
