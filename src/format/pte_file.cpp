#include "format/pte_file.h"

#include <flatbuffers/flatbuffers.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/printable.h"
#include "etnp/error.h"

namespace etnp::format {
namespace {

constexpr char kIdentifier[] = "ET12";
constexpr char kHeaderMagic[] = "eh00";
constexpr size_t kMinHeaderLength = 24;
constexpr uint64_t kMaxArenaBytes = uint64_t(1) << 40;  // sanity bound against corrupted sizes

[[noreturn]] void fail(const std::string& message) { throw Error(ErrorKind::ProgramLoadError, message); }

uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint64_t read_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }


bool looks_like_text(std::span<const uint8_t> bytes) {
  const size_t n = std::min<size_t>(bytes.size(), 256);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = bytes[i];
    const bool ok = (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\r' || c == '\t' || (c >= 0x80 && c < 0xf8);
    if (!ok) return false;
  }
  return n > 0;
}

bool contains(std::span<const uint8_t> bytes, std::string_view needle) {
  const std::string_view hay(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return hay.find(needle) != std::string_view::npos;
}

std::string join_dims(const flatbuffers::Vector<int32_t>* v) {
  std::string s = "[";
  for (flatbuffers::uoffset_t i = 0; v && i < v->size(); ++i) s += (i ? ", " : "") + std::to_string(v->Get(i));
  return s + "]";
}

class PteNamedData final : public NamedDataMap {
 public:
  struct Entry {
    std::string_view key;
    std::span<const uint8_t> bytes;
  };
  explicit PteNamedData(std::vector<Entry> entries) : entries_(std::move(entries)) {}

  std::optional<std::span<const uint8_t>> get(std::string_view key) const override {
    for (const auto& e : entries_) {
      if (e.key == key) return e.bytes;
    }
    return std::nullopt;
  }
  std::optional<TensorLayout> layout(std::string_view) const override { return std::nullopt; }
  size_t num_keys() const override { return entries_.size(); }
  std::string_view key(size_t index) const override { return entries_.at(index).key; }
  std::string describe() const override { return "the program's named data"; }

 private:
  std::vector<Entry> entries_;
};

}  // namespace

ExtendedHeader read_pte_header(std::span<const uint8_t> bytes) {
  if (bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] == 'K') {
    if (contains(bytes.first(std::min<size_t>(bytes.size(), 4096)), "data.pkl") ||
        contains(bytes.first(std::min<size_t>(bytes.size(), 4096)), "/version")) {
      fail("not an ExecuTorch program: a ZIP archive (starts with 'PK'), laid out like a TorchScript / "
           "PyTorch Mobile model; export it with ExecuTorch (torch.export + to_executorch) to get a .pte");
    }
    fail("not an ExecuTorch program: a ZIP archive (starts with 'PK')");
  }
  if (bytes.size() < 8) {
    fail("not an ExecuTorch program: the file is " + std::to_string(bytes.size()) +
         " bytes long, too short for a program header");
  }
  const std::span<const uint8_t> id = bytes.subspan(4, 4);
  if (std::memcmp(id.data(), kIdentifier, 4) != 0) {
    auto alnum = [](uint8_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
    if (id[0] == 'E' && id[1] == 'T' && alnum(id[2]) && alnum(id[3])) {
      fail("written by an ExecuTorch exporter with schema " + printable(id) + "; this runtime reads " + kIdentifier +
           " (re-export the model with a matching ExecuTorch version)");
    }
    if (looks_like_text(bytes)) {
      fail("not an ExecuTorch program: plain text (file identifier '" + printable(id) + "', not '" + kIdentifier + "')");
    }
    fail("not an ExecuTorch program: file identifier is '" + printable(id) + "', not '" + kIdentifier + "'");
  }
  ExtendedHeader h;
  if (bytes.size() >= 16 && std::memcmp(bytes.data() + 8, kHeaderMagic, 4) == 0) {
    h.present = true;
    h.length = read_u32(bytes.data() + 12);
    if (h.length < kMinHeaderLength) {
      fail("corrupt extended header: length " + std::to_string(h.length) + " is below the minimum of 24");
    }
    if (bytes.size() < 8 + static_cast<size_t>(std::min<uint32_t>(h.length, 32))) {
      fail("truncated file: the extended header needs " + std::to_string(8 + h.length) + " bytes, the file has " +
           std::to_string(bytes.size()));
    }
    h.program_size = read_u64(bytes.data() + 16);
    h.segment_base_offset = read_u64(bytes.data() + 24);
    h.segment_data_size = h.length >= 32 ? read_u64(bytes.data() + 32) : 0;
  }
  return h;
}

size_t serialized_tensor_nbytes(const fb::Tensor& t) {
  const int st = static_cast<int>(t.scalar_type());
  if (!is_valid_scalar_type(st)) fail("tensor has invalid scalar type " + std::to_string(st));
  uint64_t n = element_size(static_cast<ScalarType>(st));
  if (t.sizes() != nullptr) {
    for (int32_t s : *t.sizes()) {
      if (s < 0) fail("tensor has a negative size in " + join_dims(t.sizes()));
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(s), &n)) fail("tensor size overflows: " + join_dims(t.sizes()));
    }
  }
  return static_cast<size_t>(n);
}

std::unique_ptr<PteFile> PteFile::parse(std::shared_ptr<ByteSource> source, Verification level) {
  std::unique_ptr<PteFile> file(new PteFile());
  file->source_ = std::move(source);
  file->verify_container();
  if (level == Verification::InternalConsistency) {
    for (size_t i = 0; i < file->num_plans(); ++i) file->validate_plan(file->plan(i));
  }
  return file;
}

size_t PteFile::num_plans() const { return program_->execution_plan()->size(); }

std::optional<size_t> PteFile::find_plan(std::string_view name) const {
  for (size_t i = 0; i < num_plans(); ++i) {
    const auto* n = plan(i).name();
    if (n != nullptr && n->string_view() == name) return i;
  }
  return std::nullopt;
}

// FlatBuffers' verifier checks a vector's length word (4-byte aligned), not its elements: a vector of 8-byte
// elements at an address that is 4 but not 8 mod 8 passes, and reading it is a misaligned load (undefined
// behaviour). Builders align such vectors to 8; a file that does not is refused here, before anything reads them.
// An empty vector has no element to read wherever it starts (builders may leave it 4-aligned).
void PteFile::check_vector_alignment() const {
  auto misaligned = [](const auto* vec) {
    return vec != nullptr && vec->size() != 0 && reinterpret_cast<uintptr_t>(vec->Data()) % 8 != 0;
  };
  auto refuse = [](const std::string& what) { fail("corrupt program: " + what + " is not 8-byte aligned"); };
  if (const auto* cs = program_->constant_segment(); cs != nullptr && misaligned(cs->offsets()))
    refuse("the constant segment's offset list");
  if (const auto* ms = program_->mutable_data_segments()) {
    for (size_t i = 0; i < ms->size(); ++i)
      if (ms->Get(i) != nullptr && misaligned(ms->Get(i)->offsets()))
        refuse("mutable data segment " + std::to_string(i) + "'s offset list");
  }
  for (size_t p = 0; p < num_plans(); ++p) {
    const fb::ExecutionPlan& ep = plan(p);
    if (misaligned(ep.non_const_buffer_sizes()))
      refuse("execution plan " + std::to_string(p) + "'s planned buffer sizes");
    for (size_t v = 0; ep.values() != nullptr && v < ep.values()->size(); ++v) {
      const fb::EValue* value = ep.values()->Get(v);
      const auto* ints = value == nullptr ? nullptr : value->val_as_IntList();
      const auto* doubles = value == nullptr ? nullptr : value->val_as_DoubleList();
      if ((ints != nullptr && misaligned(ints->items())) || (doubles != nullptr && misaligned(doubles->items())))
        refuse("execution plan " + std::to_string(p) + " value " + std::to_string(v) + "'s list");
    }
  }
}

void PteFile::verify_container() {
  const std::span<const uint8_t> bytes = source_->bytes();
  header_ = read_pte_header(bytes);
  uint64_t program_size = bytes.size();
  if (header_.present) {
    if (header_.program_size > bytes.size()) {
      fail("truncated file: the header records " + std::to_string(header_.program_size) +
           " bytes of program data, the file has " + std::to_string(bytes.size()));
    }
    if (header_.program_size < 16) fail("corrupt extended header: program size " + std::to_string(header_.program_size));
    program_size = header_.program_size;
    uint64_t end = 0;
    if (add_overflows(header_.segment_base_offset, header_.segment_data_size, &end)) {
      fail("corrupt extended header: segment offset + size overflows");
    }
    if (header_.segment_data_size > 0 || header_.segment_base_offset == 0) {
      const uint64_t expected = header_.segment_base_offset == 0 ? header_.program_size : end;
      if (expected > bytes.size()) {
        fail("truncated file: the header records " + std::to_string(expected) + " bytes, the file has " +
             std::to_string(bytes.size()));
      }
    }
    if (header_.segment_base_offset != 0 && header_.segment_base_offset < header_.program_size) {
      fail("corrupt extended header: segments start inside the program data");
    }
  }
  const uint32_t root = read_u32(bytes.data());
  if (root < 8 || static_cast<uint64_t>(root) + 4 > program_size) {
    fail("corrupt program: root table offset " + std::to_string(root) + " lies outside the " +
         std::to_string(program_size) + " bytes of program data");
  }
  if (program_size >= FLATBUFFERS_MAX_BUFFER_SIZE) fail("program data is larger than 2 GiB");
  flatbuffers::Verifier verifier(bytes.data(), static_cast<size_t>(program_size), /*max_depth=*/64,
                                 /*max_tables=*/1000000);
  if (!fb::VerifyProgramBuffer(verifier)) {
    fail("corrupt program: the FlatBuffers structure does not verify (truncated or damaged file)");
  }
  program_ = fb::GetProgram(bytes.data());
  if (program_->execution_plan() == nullptr) fail("corrupt program: no execution plans");
  for (size_t i = 0; i < num_plans(); ++i) {
    if (program_->execution_plan()->Get(i) == nullptr) fail("corrupt program: execution plan " + std::to_string(i) + " is null");
  }
  check_vector_alignment();

  // Every segment the program refers to must lie inside the file.
  const auto* segments = program_->segments();
  const size_t num_segments = segments == nullptr ? 0 : segments->size();
  for (size_t i = 0; i < num_segments; ++i) {
    if (segments->Get(i) == nullptr) fail("corrupt program: segment " + std::to_string(i) + " is null");
  }

  if (const auto* cs = program_->constant_segment(); cs != nullptr && cs->offsets() != nullptr && cs->offsets()->size() > 1) {
    if (program_->constant_buffer() != nullptr && program_->constant_buffer()->size() > 0) {
      fail("corrupt program: constants are in both constant_segment and constant_buffer");
    }
    constant_segment_ = segment(cs->segment_index());
    for (uint64_t off : *cs->offsets()) {
      if (off > constant_segment_.size()) {
        fail("corrupt program: constant offset " + std::to_string(off) + " lies outside the constant segment (" +
             std::to_string(constant_segment_.size()) + " bytes)");
      }
    }
  }
  if (const auto* cb = program_->constant_buffer(); cb != nullptr) {
    for (size_t i = 0; i < cb->size(); ++i) {
      if (cb->Get(i) == nullptr) fail("corrupt program: constant buffer " + std::to_string(i) + " is null");
    }
  }
  if (const auto* ms = program_->mutable_data_segments(); ms != nullptr) {
    for (size_t i = 0; i < ms->size(); ++i) {
      const auto* m = ms->Get(i);
      if (m == nullptr || m->offsets() == nullptr) fail("corrupt program: mutable data segment " + std::to_string(i) + " is incomplete");
      const auto seg = segment(m->segment_index());
      for (uint64_t off : *m->offsets()) {
        if (off > seg.size()) fail("corrupt program: mutable data offset " + std::to_string(off) + " lies outside its segment");
      }
    }
  }
  if (const auto* nd = program_->named_data(); nd != nullptr && nd->size() > 0) {
    std::vector<PteNamedData::Entry> entries;
    entries.reserve(nd->size());
    for (size_t i = 0; i < nd->size(); ++i) {
      const auto* e = nd->Get(i);
      if (e == nullptr || e->key() == nullptr) fail("corrupt program: named data entry " + std::to_string(i) + " has no key");
      entries.push_back({e->key()->string_view(), segment(e->segment_index())});
    }
    named_data_ = std::make_unique<PteNamedData>(std::move(entries));
  }
}

std::span<const uint8_t> PteFile::segment(size_t index) const {
  const auto* segments = program_->segments();
  if (segments == nullptr || index >= segments->size()) {
    fail("corrupt program: segment index " + std::to_string(index) + " is out of range (the program has " +
         std::to_string(segments == nullptr ? 0 : segments->size()) + " segments)");
  }
  if (!header_.present || header_.segment_base_offset == 0) {
    fail("corrupt program: segment " + std::to_string(index) +
         " is referenced but the file has no segment data (no extended header)");
  }
  const auto* s = segments->Get(index);
  uint64_t start = 0, end = 0;
  if (add_overflows(header_.segment_base_offset, s->offset(), &start) || add_overflows(start, s->size(), &end) ||
      end > source_->bytes().size()) {
    fail("truncated file: segment " + std::to_string(index) + " (offset " + std::to_string(s->offset()) + ", " +
         std::to_string(s->size()) + " bytes) extends past the end of the file (" +
         std::to_string(source_->bytes().size()) + " bytes)");
  }
  return source_->bytes().subspan(static_cast<size_t>(start), static_cast<size_t>(s->size()));
}

bool PteFile::uses_legacy_constants() const { return constant_segment_.empty(); }

std::span<const uint8_t> PteFile::constant(uint32_t buffer_index, size_t nbytes) const {
  if (!uses_legacy_constants()) {
    const auto* offsets = program_->constant_segment()->offsets();
    if (buffer_index >= offsets->size()) {
      fail("constant index " + std::to_string(buffer_index) + " is out of range (" + std::to_string(offsets->size()) +
           " constants)");
    }
    const uint64_t off = offsets->Get(buffer_index);
    if (off > constant_segment_.size() || nbytes > constant_segment_.size() - off) {
      fail("constant " + std::to_string(buffer_index) + " (" + std::to_string(nbytes) +
           " bytes) extends past the constant segment");
    }
    return constant_segment_.subspan(static_cast<size_t>(off), nbytes);
  }
  const auto* cb = program_->constant_buffer();
  if (cb == nullptr || buffer_index >= cb->size()) {
    fail("constant index " + std::to_string(buffer_index) + " is out of range (the program has " +
         std::to_string(cb == nullptr ? 0 : cb->size()) + " constant buffers)");
  }
  const auto* storage = cb->Get(buffer_index)->storage();
  const size_t have = storage == nullptr ? 0 : storage->size();
  if (nbytes > have) {
    fail("constant buffer " + std::to_string(buffer_index) + " holds " + std::to_string(have) + " bytes, the tensor needs " +
         std::to_string(nbytes));
  }
  return {storage == nullptr ? nullptr : storage->data(), nbytes};
}

std::span<const uint8_t> PteFile::mutable_initial_data(uint32_t buffer_index, size_t nbytes) const {
  const auto* ms = program_->mutable_data_segments();
  if (ms == nullptr || ms->size() == 0) fail("tensor refers to mutable initial data but the program has none");
  const auto* m = ms->Get(0);
  if (buffer_index >= m->offsets()->size()) {
    fail("mutable data index " + std::to_string(buffer_index) + " is out of range");
  }
  const auto seg = segment(m->segment_index());
  const uint64_t off = m->offsets()->Get(buffer_index);
  if (off > seg.size() || nbytes > seg.size() - off) {
    fail("mutable data " + std::to_string(buffer_index) + " extends past its segment");
  }
  return seg.subspan(static_cast<size_t>(off), nbytes);
}

std::span<const uint8_t> PteFile::delegate_payload(const fb::BackendDelegate& d) const {
  const auto* ref = d.processed();
  if (ref == nullptr) fail("delegate has no payload reference");
  if (ref->location() == fb::DataLocation::SEGMENT) return segment(ref->index());
  if (ref->location() != fb::DataLocation::INLINE) {
    fail("delegate payload location " + std::to_string(static_cast<int>(ref->location())) + " is not INLINE or SEGMENT");
  }
  const auto* inline_data = program_->backend_delegate_data();
  if (inline_data == nullptr || ref->index() >= inline_data->size() || inline_data->Get(ref->index()) == nullptr) {
    fail("delegate payload index " + std::to_string(ref->index()) + " is out of range");
  }
  const auto* data = inline_data->Get(ref->index())->data();
  if (data == nullptr) return {};
  return {data->data(), data->size()};
}

void PteFile::validate_plan(const fb::ExecutionPlan& plan) const {
  const std::string method = plan.name() ? "method " + quoted_name(plan.name()->string_view()) : "a method with no name";
  auto bad = [&](const std::string& what) { fail(method + ": " + what); };
  if (plan.name() == nullptr) fail("corrupt program: an execution plan has no name");
  const auto* values = plan.values();
  if (values == nullptr) bad("no value table");
  const int64_t nvalues = values->size();
  if (plan.inputs() == nullptr || plan.outputs() == nullptr) bad("no input or output list");
  if (plan.chains() == nullptr || plan.chains()->size() == 0) bad("no instruction chains");
  const auto* sizes = plan.non_const_buffer_sizes();
  const int64_t narenas = sizes == nullptr || sizes->size() == 0 ? 0 : static_cast<int64_t>(sizes->size()) - 1;
  if (sizes != nullptr) {
    for (size_t i = 1; i < sizes->size(); ++i) {
      if (sizes->Get(i) < 0 || static_cast<uint64_t>(sizes->Get(i)) > kMaxArenaBytes) {
        bad("planned buffer " + std::to_string(i) + " has an invalid size " + std::to_string(sizes->Get(i)));
      }
    }
  }
  // (`where` makes the message's subject only when it fails: the checks run for every value of every load.)
  auto check_index = [&](int64_t index, const auto& where) {
    if (index < 0 || index >= nvalues) {
      bad(where() + " refers to value " + std::to_string(index) + ", outside the " + std::to_string(nvalues) + " values");
    }
  };
  auto value_type = [&](int64_t index) { return values->Get(static_cast<flatbuffers::uoffset_t>(index))->val_type(); };

  for (int64_t i = 0; i < nvalues; ++i) {
    const auto* v = values->Get(static_cast<flatbuffers::uoffset_t>(i));
    const auto where = [i] { return "value " + std::to_string(i); };
    if (v == nullptr) bad(where() + " is null");
    const auto type = v->val_type();
    if (type == fb::KernelTypes::NONE || static_cast<int>(type) > static_cast<int>(fb::KernelTypes::MAX)) {
      bad(where() + " has unknown type " + std::to_string(static_cast<int>(type)));
    }
    if (type != fb::KernelTypes::Null && v->val() == nullptr) bad(where() + " has no payload");
    switch (type) {
      case fb::KernelTypes::Tensor: {
        const auto* t = v->val_as_Tensor();
        if (t->sizes() == nullptr || t->dim_order() == nullptr) bad(where() + ": tensor has no sizes or dim_order");
        const size_t rank = t->sizes()->size();
        if (rank > static_cast<size_t>(kMaxTensorRank)) bad(where() + ": tensor rank " + std::to_string(rank) + " exceeds 16");
        if (t->dim_order()->size() != rank) bad(where() + ": dim_order length differs from the rank");
        bool seen[kMaxTensorRank] = {};
        for (uint8_t d : *t->dim_order()) {
          if (d >= rank || seen[d]) bad(where() + ": dim_order is not a permutation of 0.." + std::to_string(rank - 1));
          seen[d] = true;
        }
        size_t nbytes = 0;
        try {
          nbytes = serialized_tensor_nbytes(*t);
        } catch (const Error& e) {
          bad(where() + ": " + e.detail());
        }
        if (t->storage_offset() != 0) bad(where() + ": tensors with a storage offset are not supported");
        if (t->shape_dynamism() == fb::TensorShapeDynamism::DYNAMIC_UNBOUND) {
          bad(where() + ": tensors with unbounded dynamic shapes are not supported (export with an upper bound)");
        }
        if (static_cast<int>(t->shape_dynamism()) > 2) bad(where() + ": unknown shape dynamism");
        const auto* extra = t->extra_tensor_info();
        const bool external = extra != nullptr && extra->location() == fb::TensorDataLocation::EXTERNAL;
        if (extra != nullptr && static_cast<int>(extra->location()) > 1) bad(where() + ": unknown tensor data location");
        if (external && (extra->fully_qualified_name() == nullptr || extra->fully_qualified_name()->size() == 0)) {
          bad(where() + ": external tensor has no fully qualified name");
        }
        if (const auto* a = t->allocation_info(); a != nullptr) {
          if (a->memory_id() == 0 || static_cast<int64_t>(a->memory_id()) > narenas) {
            bad(where() + ": memory id " + std::to_string(a->memory_id()) + " names no planned buffer (the method has " +
                std::to_string(narenas) + ")");
          }
          const uint64_t offset = uint64_t(a->memory_offset_low()) | (uint64_t(a->memory_offset_high()) << 32);
          const uint64_t arena = static_cast<uint64_t>(sizes->Get(a->memory_id()));
          if (offset > arena || nbytes > arena - offset) {
            bad(where() + ": planned at offset " + std::to_string(offset) + " with " + std::to_string(nbytes) +
                " bytes, past the end of planned buffer " + std::to_string(a->memory_id()) + " (" + std::to_string(arena) +
                " bytes)");
          }
          // Planned buffers start aligned; an offset that is not a multiple of the element size would make
          // every access to the tensor a misaligned one (exporters align to 16 bytes or more).
          const size_t element = element_size(static_cast<ScalarType>(t->scalar_type()));
          if (element > 1 && offset % element != 0) {
            bad(where() + ": planned at offset " + std::to_string(offset) + ", not a multiple of its element size (" +
                std::to_string(element) + " bytes)");
          }
          if (t->data_buffer_idx() > 0 && !external) {
            try {
              mutable_initial_data(t->data_buffer_idx(), nbytes);
            } catch (const Error& e) {
              bad(where() + ": " + e.detail());
            }
          }
        } else if (t->data_buffer_idx() > 0 && !external) {
          try {
            constant(t->data_buffer_idx(), nbytes);
          } catch (const Error& e) {
            bad(where() + ": " + e.detail());
          }
        }
        break;
      }
      case fb::KernelTypes::String:
        if (v->val_as_String()->string_val() == nullptr) bad(where() + ": string has no value");
        break;
      case fb::KernelTypes::IntList: {
        const auto* items = v->val_as_IntList()->items();
        if (items == nullptr) bad(where() + ": int list has no items");
        for (int64_t item : *items) {
          check_index(item, [&] { return where() + " (int list)"; });
          if (value_type(item) != fb::KernelTypes::Int) bad(where() + ": int list item " + std::to_string(item) + " is not an Int");
        }
        break;
      }
      case fb::KernelTypes::DoubleList:
        if (v->val_as_DoubleList()->items() == nullptr) bad(where() + ": double list has no items");
        break;
      case fb::KernelTypes::BoolList:
        if (v->val_as_BoolList()->items() == nullptr) bad(where() + ": bool list has no items");
        break;
      case fb::KernelTypes::TensorList: {
        const auto* items = v->val_as_TensorList()->items();
        if (items == nullptr) bad(where() + ": tensor list has no items");
        for (int32_t item : *items) {
          check_index(item, [&] { return where() + " (tensor list)"; });
          if (value_type(item) != fb::KernelTypes::Tensor) bad(where() + ": tensor list item " + std::to_string(item) + " is not a Tensor");
        }
        break;
      }
      case fb::KernelTypes::OptionalTensorList: {
        const auto* items = v->val_as_OptionalTensorList()->items();
        if (items == nullptr) bad(where() + ": optional tensor list has no items");
        for (int32_t item : *items) {
          if (item == -1) continue;
          check_index(item, [&] { return where() + " (optional tensor list)"; });
          const auto t = value_type(item);
          if (t != fb::KernelTypes::Tensor && t != fb::KernelTypes::Null) {
            bad(where() + ": optional tensor list item " + std::to_string(item) + " is neither a Tensor nor None");
          }
        }
        break;
      }
      default:
        break;
    }
  }
  for (size_t i = 0; i < plan.inputs()->size(); ++i) {
    check_index(plan.inputs()->Get(i), [i] { return "input " + std::to_string(i); });
  }
  for (size_t i = 0; i < plan.outputs()->size(); ++i) {
    check_index(plan.outputs()->Get(i), [i] { return "output " + std::to_string(i); });
  }

  const int64_t nops = plan.operators() ? plan.operators()->size() : 0;
  for (int64_t i = 0; i < nops; ++i) {
    const auto* op = plan.operators()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (op == nullptr || op->name() == nullptr) bad("operator " + std::to_string(i) + " has no name");
  }
  const int64_t ndelegates = plan.delegates() ? plan.delegates()->size() : 0;
  for (int64_t i = 0; i < ndelegates; ++i) {
    const auto* d = plan.delegates()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (d == nullptr || d->id() == nullptr) bad("delegate " + std::to_string(i) + " has no backend id");
    try {
      delegate_payload(*d);
    } catch (const Error& e) {
      bad("delegate " + std::to_string(i) + " (" + printable(d->id()->string_view()) + "): " + e.detail());
    }
    if (const auto* specs = d->compile_specs(); specs != nullptr) {
      for (const auto* spec : *specs) {
        if (spec == nullptr || spec->key() == nullptr) bad("delegate " + std::to_string(i) + " has a compile spec without a key");
      }
    }
  }
  for (size_t c = 0; c < plan.chains()->size(); ++c) {
    const auto* chain = plan.chains()->Get(c);
    if (chain == nullptr || chain->instructions() == nullptr) bad("chain " + std::to_string(c) + " has no instruction list");
    const int64_t ninstr = chain->instructions()->size();
    for (int64_t i = 0; i < ninstr; ++i) {
      const auto* instr = chain->instructions()->Get(static_cast<flatbuffers::uoffset_t>(i));
      const auto where = [i] { return "instruction " + std::to_string(i); };
      if (instr == nullptr || instr->instr_args() == nullptr) bad(where() + " is empty");
      switch (instr->instr_args_type()) {
        case fb::InstructionArguments::KernelCall: {
          const auto* k = instr->instr_args_as_KernelCall();
          if (k->op_index() < 0 || k->op_index() >= nops) bad(where() + ": operator index " + std::to_string(k->op_index()) + " is out of range");
          if (k->args() == nullptr) bad(where() + ": kernel call has no argument list");
          for (int32_t a : *k->args()) check_index(a, where);
          break;
        }
        case fb::InstructionArguments::DelegateCall: {
          const auto* d = instr->instr_args_as_DelegateCall();
          if (d->delegate_index() < 0 || d->delegate_index() >= ndelegates) bad(where() + ": delegate index " + std::to_string(d->delegate_index()) + " is out of range");
          if (d->args() == nullptr) bad(where() + ": delegate call has no argument list");
          for (int32_t a : *d->args()) check_index(a, where);
          break;
        }
        case fb::InstructionArguments::MoveCall: {
          const auto* m = instr->instr_args_as_MoveCall();
          check_index(m->move_from(), where);
          check_index(m->move_to(), where);
          break;
        }
        case fb::InstructionArguments::JumpFalseCall: {
          const auto* j = instr->instr_args_as_JumpFalseCall();
          check_index(j->cond_value_index(), where);
          if (j->destination_instruction() < 0 || j->destination_instruction() > ninstr) {
            bad(where() + ": jump destination " + std::to_string(j->destination_instruction()) + " is out of range");
          }
          break;
        }
        case fb::InstructionArguments::FreeCall: {
          const auto* f = instr->instr_args_as_FreeCall();
          check_index(f->value_index(), where);
          if (value_type(f->value_index()) != fb::KernelTypes::Tensor) bad(where() + ": free of a value that is not a tensor");
          break;
        }
        default:
          bad(where() + " has unknown type " + std::to_string(static_cast<int>(instr->instr_args_type())));
      }
    }
  }
}

ProgramInfo PteFile::info() const {
  ProgramInfo info;
  info.identifier = kIdentifier;
  info.version = program_->version();
  info.has_extended_header = header_.present;
  info.file_size = source_->bytes().size();
  info.program_size = header_.present ? header_.program_size : source_->bytes().size();
  info.segment_base_offset = header_.segment_base_offset;
  info.segment_data_size = header_.segment_data_size;
  if (const auto* segs = program_->segments()) {
    for (const auto* s : *segs) info.segments.push_back({s->offset(), s->size()});
  }
  if (!constant_segment_.empty()) {
    info.constant_bytes = constant_segment_.size();
  } else if (const auto* cb = program_->constant_buffer(); cb != nullptr && cb->size() > 1) {
    info.legacy_constant_buffer = true;
    for (const auto* b : *cb) info.constant_bytes += b->storage() ? b->storage()->size() : 0;
  }
  info.num_named_data = program_->named_data() ? program_->named_data()->size() : 0;
  info.num_mutable_segments = program_->mutable_data_segments() ? program_->mutable_data_segments()->size() : 0;
  return info;
}

}  // namespace etnp::format
