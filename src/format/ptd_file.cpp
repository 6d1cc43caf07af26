#include "format/ptd_file.h"

#include <flatbuffers/flatbuffers.h>

#include <cstring>
#include <map>

#include "core/printable.h"
#include "etnp/error.h"
#include "flat_tensor_generated.h"
#include "flat_tensor_legacy_generated.h"

namespace etnp {

size_t TensorLayout::nbytes() const {
  size_t n = element_size(dtype);
  for (int64_t s : sizes) n *= static_cast<size_t>(s < 0 ? 0 : s);
  return n;
}

}  // namespace etnp

namespace etnp::format {
namespace {

constexpr size_t kHeaderMinLength = 40;

struct PtdHeader {
  uint64_t flatbuffer_offset = 0;
  uint64_t flatbuffer_size = 0;
  uint64_t segment_base_offset = 0;
  uint64_t segment_data_size = 0;
};

uint64_t read_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

template <typename Layout>
std::optional<TensorLayout> to_layout(int scalar_type, const flatbuffers::Vector<int32_t>* sizes,
                                      const flatbuffers::Vector<uint8_t>* dim_order) {
  TensorLayout l;
  if (!is_valid_scalar_type(scalar_type)) return std::nullopt;
  l.dtype = static_cast<ScalarType>(scalar_type);
  if (sizes != nullptr) l.sizes.assign(sizes->begin(), sizes->end());
  if (dim_order != nullptr) l.dim_order.assign(dim_order->begin(), dim_order->end());
  return l;
}

}  // namespace

std::unique_ptr<PtdFile> PtdFile::parse(std::shared_ptr<ByteSource> source) {
  const std::string name = source->name();
  auto fail = [&](const std::string& what) -> void {
    throw Error(ErrorKind::ProgramLoadError, "external data file '" + name + "': " + what);
  };
  const auto bytes = source->bytes();
  if (bytes.size() < 8 + kHeaderMinLength) fail("too short (" + std::to_string(bytes.size()) + " bytes) for a .ptd header");
  if (std::memcmp(bytes.data() + 4, "FT01", 4) != 0) {
    if (std::memcmp(bytes.data() + 4, "ET12", 4) == 0) fail("this is a .pte program, not .ptd external data");
    fail("not a .ptd file (file identifier is not 'FT01')");
  }
  if (std::memcmp(bytes.data() + 8, "FH01", 4) != 0) fail("missing 'FH01' header");
  uint32_t header_length;
  std::memcpy(&header_length, bytes.data() + 12, 4);
  if (header_length < kHeaderMinLength) fail("header length " + std::to_string(header_length) + " is below 40");
  PtdHeader h{read_u64(bytes.data() + 16), read_u64(bytes.data() + 24), read_u64(bytes.data() + 32),
              read_u64(bytes.data() + 40)};
  uint64_t fb_end = 0, seg_end = 0;
  if (__builtin_add_overflow(h.flatbuffer_offset, h.flatbuffer_size, &fb_end) || fb_end > bytes.size()) {
    fail("truncated: the flatbuffer extends past the end of the file");
  }
  if (__builtin_add_overflow(h.segment_base_offset, h.segment_data_size, &seg_end) || seg_end > bytes.size()) {
    fail("truncated: the segment data extends past the end of the file");
  }
  if (fb_end >= FLATBUFFERS_MAX_BUFFER_SIZE) fail("flatbuffer larger than 2 GiB");

  auto file = std::unique_ptr<PtdFile>(new PtdFile());
  file->source_ = source;
  const uint8_t* base = bytes.data();
  auto segment_bytes = [&](uint64_t offset, uint64_t size, const std::string& what) -> std::span<const uint8_t> {
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, size, &end) || end > h.segment_data_size) {
      fail(what + " (offset " + std::to_string(offset) + ", " + std::to_string(size) +
           " bytes) lies outside the segment data");
    }
    return {base + h.segment_base_offset + offset, static_cast<size_t>(size)};
  };

  // The early-2025 layout has a 4th root field (segments) and a scalar in field 1; tell them apart by
  // the root table's vtable before choosing a schema to verify against.
  const auto* root = flatbuffers::GetRoot<flatbuffers::Table>(base);
  uint32_t root_offset;
  std::memcpy(&root_offset, base, 4);
  if (root_offset < 8 || root_offset + 4 > fb_end) fail("root offset out of range");
  flatbuffers::Verifier probe(base, static_cast<size_t>(fb_end));
  if (!root->VerifyTableStart(probe)) fail("corrupt flatbuffer (root table does not verify)");
  const bool legacy = root->GetOptionalFieldOffset(10) != 0;

  flatbuffers::Verifier verifier(base, static_cast<size_t>(fb_end));
  if (!legacy) {
    if (!flat_tensor_flatbuffer::VerifyFlatTensorBuffer(verifier)) fail("corrupt flatbuffer (does not verify)");
    const auto* ft = flat_tensor_flatbuffer::GetFlatTensor(base);
    if (ft->segments() == nullptr || ft->named_data() == nullptr) fail("missing segments or named_data");
    for (size_t i = 0; i < ft->named_data()->size(); ++i) {
      const auto* nd = ft->named_data()->Get(i);
      if (nd == nullptr || nd->key() == nullptr) fail("named data entry " + std::to_string(i) + " has no key");
      const std::string key = nd->key()->str();
      if (nd->segment_index() >= ft->segments()->size()) {
        fail("segment index " + std::to_string(nd->segment_index()) + " for key " + quoted_name(key) + " is out of range (" +
             std::to_string(ft->segments()->size()) + " segments)");
      }
      const auto* seg = ft->segments()->Get(nd->segment_index());
      if (seg == nullptr) fail("null segment");
      Entry e{key, segment_bytes(seg->offset(), seg->size(), "segment for key " + quoted_name(key)), std::nullopt};
      if (const auto* tl = nd->tensor_layout()) {
        e.layout = to_layout<void>(static_cast<int>(tl->scalar_type()), tl->sizes(), tl->dim_order());
        if (!e.layout) fail("key " + quoted_name(key) + " has an invalid scalar type");
        if (e.layout->nbytes() > e.bytes.size()) fail("key " + quoted_name(key) + ": tensor needs more bytes than its segment holds");
      }
      file->entries_.push_back(std::move(e));
    }
  } else {
    if (!flat_tensor_legacy_flatbuffer::VerifyFlatTensorBuffer(verifier)) fail("corrupt flatbuffer (does not verify)");
    const auto* ft = flat_tensor_legacy_flatbuffer::GetFlatTensor(base);
    if (ft->segments() == nullptr || ft->tensors() == nullptr) fail("missing segments or tensors");
    for (size_t i = 0; i < ft->tensors()->size(); ++i) {
      const auto* t = ft->tensors()->Get(i);
      if (t == nullptr || t->fully_qualified_name() == nullptr) fail("tensor " + std::to_string(i) + " has no name");
      const std::string key = t->fully_qualified_name()->str();
      if (t->segment_index() < 0 || static_cast<size_t>(t->segment_index()) >= ft->segments()->size()) {
        fail("segment index " + std::to_string(t->segment_index()) + " for key " + quoted_name(key) + " is out of range");
      }
      const auto* seg = ft->segments()->Get(t->segment_index());
      auto layout = to_layout<void>(static_cast<int>(t->scalar_type()), t->sizes(), t->dim_order());
      if (!layout) fail("key " + quoted_name(key) + " has an invalid scalar type");
      const auto seg_span = segment_bytes(seg->offset(), seg->size(), "segment for key " + quoted_name(key));
      if (t->offset() > seg_span.size() || layout->nbytes() > seg_span.size() - t->offset()) {
        fail("tensor " + quoted_name(key) + " extends past its segment");
      }
      file->entries_.push_back({key, seg_span.subspan(static_cast<size_t>(t->offset()), layout->nbytes()), layout});
    }
  }
  return file;
}

const PtdFile::Entry* PtdFile::find(std::string_view key) const {
  for (const auto& e : entries_) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

std::optional<std::span<const uint8_t>> PtdFile::get(std::string_view key) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::nullopt;
  return e->bytes;
}

std::optional<TensorLayout> PtdFile::layout(std::string_view key) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::nullopt;
  return e->layout;
}

MergedDataMap::MergedDataMap(std::vector<const NamedDataMap*> maps) : maps_(std::move(maps)) {
  std::map<std::string_view, const NamedDataMap*> seen;  // key -> the source that defines it first
  for (const auto* m : maps_) {
    for (size_t i = 0; i < m->num_keys(); ++i) {
      const auto [at, inserted] = seen.emplace(m->key(i), m);
      if (!inserted) {
        throw Error(ErrorKind::ProgramLoadError,
                    "data key " + quoted_name(m->key(i)) + " is defined twice" +
                        (at->second == m ? " in " + m->describe()
                                         : ": in " + at->second->describe() + " and in " + m->describe()));
      }
    }
  }
}

std::optional<std::span<const uint8_t>> MergedDataMap::get(std::string_view key) const {
  for (const auto* m : maps_) {
    if (auto r = m->get(key)) return r;
  }
  return std::nullopt;
}

std::optional<TensorLayout> MergedDataMap::layout(std::string_view key) const {
  for (const auto* m : maps_) {
    if (m->get(key)) return m->layout(key);
  }
  return std::nullopt;
}

size_t MergedDataMap::num_keys() const {
  size_t n = 0;
  for (const auto* m : maps_) n += m->num_keys();
  return n;
}

std::string_view MergedDataMap::key(size_t index) const {
  for (const auto* m : maps_) {
    if (index < m->num_keys()) return m->key(index);
    index -= m->num_keys();
  }
  throw Error(ErrorKind::InvalidArgument, "data key index out of range");
}

std::string MergedDataMap::describe() const {
  std::string s;
  for (const auto* m : maps_) s += (s.empty() ? "" : ", ") + m->describe();
  return s;
}

}  // namespace etnp::format
