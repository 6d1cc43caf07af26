#include "tools/writer/writer.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <unordered_map>

#include "compute/memory_planner.h"
#include "etnp/error.h"
#include "flat_tensor_generated.h"
#include "program_generated.h"

namespace etnp::format {
namespace {

namespace fb = ::executorch_flatbuffer;

[[noreturn]] void fail(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, "program writer: " + message);
}

uint64_t round_up(uint64_t value, uint64_t alignment) {
  return alignment <= 1 ? value : (value + alignment - 1) / alignment * alignment;
}

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

/// Inserts `header` (already padded) after the 8-byte root-offset + identifier prefix of a finished
/// flatbuffer and moves the root offset past it. Every other offset in a flatbuffer is relative, so shifting
/// the body by a multiple of the largest alignment keeps the buffer valid.
std::vector<uint8_t> splice_header(const uint8_t* fb_data, size_t fb_size, const std::vector<uint8_t>& header) {
  std::vector<uint8_t> out;
  out.reserve(fb_size + header.size());
  out.insert(out.end(), fb_data, fb_data + 8);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), fb_data + 8, fb_data + fb_size);
  uint32_t root;
  std::memcpy(&root, out.data(), 4);
  put_u32(out.data(), root + static_cast<uint32_t>(header.size()));
  return out;
}

/// Hash for deduplicating blobs (identical bytes are stored once, as exporters do).
size_t blob_hash(std::span<const uint8_t> data) {
  return std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
}

/// Lays segments out one after another, each aligned to lcm(segment alignment, its own alignment).
struct SegmentLayout {
  struct Item {
    std::span<const uint8_t> data;
    uint64_t offset = 0;
  };
  std::vector<Item> items;
  uint64_t end = 0;

  uint32_t add(std::span<const uint8_t> data, uint64_t segment_alignment, uint64_t blob_alignment) {
    const uint64_t align = std::lcm(std::max<uint64_t>(segment_alignment, 1), std::max<uint64_t>(blob_alignment, 1));
    const uint64_t offset = items.empty() ? 0 : round_up(end, align);
    items.push_back({data, offset});
    end = offset + data.size();
    return static_cast<uint32_t>(items.size() - 1);
  }
  void copy_into(std::vector<uint8_t>& out, size_t base) const {
    for (const auto& it : items) {
      if (!it.data.empty()) std::memcpy(out.data() + base + it.offset, it.data.data(), it.data.size());
    }
  }
};

std::string default_input_spec(size_t num_inputs) {
  static const char* leaf = "{\"type\": null, \"context\": null, \"children_spec\": []}";
  std::string s = "[1, {\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": [{\"type\": "
                  "\"builtins.tuple\", \"context\": \"null\", \"children_spec\": [";
  for (size_t i = 0; i < num_inputs; ++i) s += (i ? ", " : "") + std::string(leaf);
  s += "]}, {\"type\": \"builtins.dict\", \"context\": \"[]\", \"children_spec\": []}]}]";
  return s;
}

std::string default_output_spec(size_t num_outputs) {
  static const char* leaf = "{\"type\": null, \"context\": null, \"children_spec\": []}";
  if (num_outputs == 1) return std::string("[1, ") + leaf + "]";
  std::string s = "[1, {\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": [";
  for (size_t i = 0; i < num_outputs; ++i) s += (i ? ", " : "") + std::string(leaf);
  return s + "]}]";
}

std::vector<uint8_t> contiguous_dim_order(size_t rank) {
  std::vector<uint8_t> order(rank);
  std::iota(order.begin(), order.end(), uint8_t{0});
  return order;
}

}  // namespace

size_t TensorSpec::nbytes() const {
  size_t n = element_size(dtype);
  for (int32_t s : sizes) n *= static_cast<size_t>(std::max(s, 0));
  return n;
}

// ---------------------------------------------------------------------------------------------------------------
// MethodWriter
// ---------------------------------------------------------------------------------------------------------------

int32_t MethodWriter::push(Value v) {
  values_.push_back(std::move(v));
  return static_cast<int32_t>(values_.size() - 1);
}

int32_t MethodWriter::none() { return push(Value{}); }

int32_t MethodWriter::int_value(int64_t v) {
  Value x;
  x.kind = Kind::Int;
  x.int_value = v;
  return push(std::move(x));
}

int32_t MethodWriter::double_value(double v) {
  Value x;
  x.kind = Kind::Double;
  x.double_value = v;
  return push(std::move(x));
}

int32_t MethodWriter::bool_value(bool v) {
  Value x;
  x.kind = Kind::Bool;
  x.bool_value = v;
  return push(std::move(x));
}

int32_t MethodWriter::string_value(std::string v) {
  Value x;
  x.kind = Kind::String;
  x.string_value = std::move(v);
  return push(std::move(x));
}

int32_t MethodWriter::int_list(std::span<const int64_t> items) {
  std::vector<int32_t> indices;
  for (int64_t item : items) indices.push_back(int_value(item));
  return int_list_of_values(std::move(indices));
}

int32_t MethodWriter::int_list_of_values(std::vector<int32_t> value_indices) {
  Value x;
  x.kind = Kind::IntList;
  x.items.assign(value_indices.begin(), value_indices.end());
  return push(std::move(x));
}

int32_t MethodWriter::double_list(std::vector<double> items) {
  Value x;
  x.kind = Kind::DoubleList;
  x.double_items = std::move(items);
  return push(std::move(x));
}

int32_t MethodWriter::bool_list(std::vector<bool> items) {
  Value x;
  x.kind = Kind::BoolList;
  x.bool_items = std::move(items);
  return push(std::move(x));
}

int32_t MethodWriter::tensor_list(std::vector<int32_t> tensor_values) {
  Value x;
  x.kind = Kind::TensorList;
  x.items.assign(tensor_values.begin(), tensor_values.end());
  return push(std::move(x));
}

int32_t MethodWriter::optional_tensor_list(std::vector<int32_t> items) {
  Value x;
  x.kind = Kind::OptionalTensorList;
  x.items.assign(items.begin(), items.end());
  return push(std::move(x));
}

int32_t MethodWriter::planned_tensor(TensorSpec spec, uint32_t memory_id) {
  if (memory_id == 0) fail("memory ids are 1-based");
  Value x;
  x.kind = Kind::Tensor;
  x.tensor = std::move(spec);
  x.storage = Storage::Planned;
  x.memory_id = memory_id;
  return push(std::move(x));
}

int32_t MethodWriter::planned_alias(int32_t base, TensorSpec spec, uint64_t byte_offset) {
  if (base < 0 || static_cast<size_t>(base) >= values_.size() || values_[base].kind != Kind::Tensor ||
      (values_[base].storage != Storage::Planned && values_[base].storage != Storage::Alias)) {
    fail("planned_alias: value " + std::to_string(base) + " is not a planned tensor");
  }
  while (values_[base].storage == Storage::Alias) {
    byte_offset += values_[base].alias_offset;
    base = values_[base].alias_of;
  }
  if (spec.nbytes() + byte_offset > values_[base].tensor.nbytes()) {
    fail("planned_alias: the view is larger than its base");
  }
  Value x;
  x.kind = Kind::Tensor;
  x.tensor = std::move(spec);
  x.storage = Storage::Alias;
  x.memory_id = values_[base].memory_id;
  x.alias_of = base;
  x.alias_offset = byte_offset;
  return push(std::move(x));
}

int32_t MethodWriter::unplanned_tensor(TensorSpec spec) {
  Value x;
  x.kind = Kind::Tensor;
  x.tensor = std::move(spec);
  x.storage = Storage::Unplanned;
  return push(std::move(x));
}

int32_t MethodWriter::constant_tensor(TensorSpec spec, std::span<const uint8_t> data) {
  Value x;
  x.kind = Kind::Tensor;
  x.tensor = std::move(spec);
  x.storage = Storage::Constant;
  x.data_index = owner_->add_constant(data);
  return push(std::move(x));
}

int32_t MethodWriter::mutable_tensor(TensorSpec spec, std::span<const uint8_t> initial, uint32_t memory_id) {
  if (memory_id == 0) fail("memory ids are 1-based");
  Value x;
  x.kind = Kind::Tensor;
  x.tensor = std::move(spec);
  x.storage = Storage::Mutable;
  x.memory_id = memory_id;
  x.data_index = owner_->add_mutable(initial);
  return push(std::move(x));
}

int32_t MethodWriter::external_tensor(TensorSpec spec, std::span<const uint8_t> data) {
  if (spec.name.empty()) fail("external tensors need a fully qualified name");
  if (!data.empty() && !owner_->external_.contains(spec.name)) {
    TensorLayout layout;
    layout.dtype = spec.dtype;
    layout.sizes.assign(spec.sizes.begin(), spec.sizes.end());
    layout.dim_order = spec.dim_order.empty() ? contiguous_dim_order(spec.sizes.size()) : spec.dim_order;
    owner_->external_.add_tensor(spec.name, layout, data);
  }
  Value x;
  x.kind = Kind::Tensor;
  x.tensor = std::move(spec);
  x.storage = Storage::External;
  return push(std::move(x));
}

size_t MethodWriter::append(Instruction instr) {
  chains_.back().push_back(std::move(instr));
  return chains_.back().size() - 1;
}

size_t MethodWriter::kernel(std::string_view op, std::vector<int32_t> args) {
  auto it = std::find(operators_.begin(), operators_.end(), op);
  const auto op_index = static_cast<int32_t>(it - operators_.begin());
  if (it == operators_.end()) operators_.emplace_back(op);
  return append({InstrKind::Kernel, op_index, std::move(args)});
}

size_t MethodWriter::delegate(std::string backend_id, std::vector<uint8_t> payload, std::vector<int32_t> args,
                              std::vector<CompileSpecEntry> compile_specs, PayloadPlacement placement) {
  Delegate d;
  d.id = std::move(backend_id);
  d.payload = owner_->add_payload(std::move(payload));
  d.placement = placement;
  d.compile_specs = std::move(compile_specs);
  delegates_.push_back(std::move(d));
  return append({InstrKind::Delegate, static_cast<int32_t>(delegates_.size() - 1), std::move(args)});
}

size_t MethodWriter::move(int32_t from, int32_t to) { return append({InstrKind::Move, 0, {from, to}}); }

size_t MethodWriter::jump_false(int32_t cond, int32_t destination) {
  return append({InstrKind::JumpFalse, 0, {cond, destination}});
}

void MethodWriter::set_jump_destination(size_t instruction, int32_t destination) {
  auto& chain = chains_.back();
  if (instruction >= chain.size() || chain[instruction].kind != InstrKind::JumpFalse) {
    fail("set_jump_destination: instruction " + std::to_string(instruction) + " is not a jump");
  }
  chain[instruction].args[1] = destination;
}

size_t MethodWriter::free(int32_t tensor_value) { return append({InstrKind::Free, 0, {tensor_value}}); }

size_t MethodWriter::num_instructions() const { return chains_.back().size(); }

void MethodWriter::new_chain() { chains_.emplace_back(); }

int64_t MethodWriter::planned_offset(int32_t value) const {
  if (value < 0 || static_cast<size_t>(value) >= values_.size()) return -1;
  const Value& v = values_[value];
  if (v.kind != Kind::Tensor) return -1;
  if (v.storage != Storage::Planned && v.storage != Storage::Alias && v.storage != Storage::Mutable) return -1;
  return static_cast<int64_t>(v.offset);
}

// The planner. Each planned tensor is live from the first to the last instruction that touches it (directly,
// through a list argument, or through a view of it); method inputs are live from the start and outputs to the
// end. Tensors connected by a MoveCall share the hull of their lifetimes (after a move both names refer to the
// same storage), and a backward jump extends every lifetime that overlaps the loop to cover the whole loop.
// Buffers are then placed largest first at the lowest 16-byte aligned offset that does not collide with a
// placed buffer whose lifetime overlaps. Tensors never touched by an instruction are kept live throughout.
void MethodWriter::plan_memory() {
  const size_t n = values_.size();
  constexpr int64_t kUnused = -2;
  std::vector<int64_t> first(n, kUnused), last(n, kUnused);
  int64_t total = 0;
  for (const auto& chain : chains_) total += static_cast<int64_t>(chain.size());
  const int64_t begin = -1, end = total;

  auto valid = [&](int64_t v) { return v >= 0 && static_cast<size_t>(v) < n; };
  // The storage owner of a tensor value (views resolve to their base).
  auto root_of = [&](int64_t v) {
    while (valid(v) && values_[v].storage == Storage::Alias) v = values_[v].alias_of;
    return v;
  };
  auto touch = [&](int64_t v, int64_t t) {
    if (!valid(v)) return;
    auto mark = [&](int64_t x) {
      if (!valid(x) || values_[x].kind != Kind::Tensor) return;
      x = root_of(x);
      if (!valid(x)) return;
      first[x] = first[x] == kUnused ? t : std::min(first[x], t);
      last[x] = last[x] == kUnused ? t : std::max(last[x], t);
    };
    mark(v);
    const Value& val = values_[v];
    if (val.kind == Kind::TensorList || val.kind == Kind::OptionalTensorList) {
      for (int64_t item : val.items) mark(item);
    }
  };

  // Union-find over moves.
  std::vector<int64_t> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int64_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };

  struct Loop {
    int64_t from, to;
  };
  std::vector<Loop> loops;
  int64_t t = 0;
  for (const auto& chain : chains_) {
    const int64_t chain_start = t;
    for (const auto& instr : chain) {
      switch (instr.kind) {
        case InstrKind::Kernel:
        case InstrKind::Delegate:
        case InstrKind::Free:
          for (int32_t a : instr.args) touch(a, t);
          break;
        case InstrKind::Move:
          touch(instr.args[0], t);
          touch(instr.args[1], t);
          if (valid(instr.args[0]) && valid(instr.args[1]) && values_[instr.args[0]].kind == Kind::Tensor &&
              values_[instr.args[1]].kind == Kind::Tensor) {
            const int64_t a = find(root_of(instr.args[0])), b = find(root_of(instr.args[1]));
            if (a != b) parent[a] = b;
          }
          break;
        case InstrKind::JumpFalse:
          touch(instr.args[0], t);
          if (instr.args[1] >= 0 && chain_start + instr.args[1] <= t) loops.push_back({chain_start + instr.args[1], t});
          break;
      }
      ++t;
    }
  }
  for (int32_t v : inputs_) {
    touch(v, begin);
  }
  for (int32_t v : outputs_) {
    touch(v, end);
  }
  for (size_t v = 0; v < n; ++v) {
    // State must survive between executions; untouched tensors get the whole method to be safe.
    if (values_[v].kind == Kind::Tensor && (first[v] == kUnused || values_[v].storage == Storage::Mutable)) {
      first[v] = begin;
      last[v] = end;
    }
  }
  // Moves: every member of a group gets the group's hull.
  std::vector<int64_t> group_first(n, end + 1), group_last(n, begin - 1);
  for (size_t v = 0; v < n; ++v) {
    if (values_[v].kind != Kind::Tensor || first[v] == kUnused) continue;
    const int64_t g = find(static_cast<int64_t>(v));
    group_first[g] = std::min(group_first[g], first[v]);
    group_last[g] = std::max(group_last[g], last[v]);
  }
  for (size_t v = 0; v < n; ++v) {
    if (values_[v].kind != Kind::Tensor || first[v] == kUnused) continue;
    const int64_t g = find(static_cast<int64_t>(v));
    first[v] = group_first[g];
    last[v] = group_last[g];
  }
  // Loops, to a fixed point (a lifetime grown by one loop may then overlap another).
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t v = 0; v < n; ++v) {
      if (values_[v].kind != Kind::Tensor || first[v] == kUnused) continue;
      for (const Loop& l : loops) {
        if (first[v] <= l.to && last[v] >= l.from && (first[v] > l.from || last[v] < l.to)) {
          first[v] = std::min(first[v], l.from);
          last[v] = std::max(last[v], l.to);
          changed = true;
        }
      }
    }
  }

  // Sizes: a base holds its largest view.
  std::vector<uint64_t> size(n, 0);
  for (size_t v = 0; v < n; ++v) {
    const Value& val = values_[v];
    if (val.kind != Kind::Tensor) continue;
    if (val.storage == Storage::Planned || val.storage == Storage::Mutable || val.storage == Storage::Alias) {
      const auto r = static_cast<size_t>(root_of(static_cast<int64_t>(v)));
      size[r] = std::max<uint64_t>(size[r], val.tensor.nbytes());
    }
  }

  // One plan per arena (memory id), over the tensors planned in it.
  std::map<uint32_t, std::vector<size_t>> members;
  for (size_t v = 0; v < n; ++v) {
    const Value& val = values_[v];
    if (val.kind == Kind::Tensor && (val.storage == Storage::Planned || val.storage == Storage::Mutable)) {
      members[val.memory_id].push_back(v);
    }
  }
  std::map<uint32_t, uint64_t> arena_size;
  for (const auto& [memory_id, vs] : members) {
    std::vector<compute::BufferLifetime> lifetimes;
    for (size_t v : vs) lifetimes.push_back({size[v], first[v], last[v]});
    const compute::MemoryPlan plan = compute::plan_memory(lifetimes, 16);
    for (size_t i = 0; i < vs.size(); ++i) values_[vs[i]].offset = plan.offsets[i];
    arena_size[memory_id] = plan.total;
  }
  for (size_t v = 0; v < n; ++v) {
    if (values_[v].kind == Kind::Tensor && values_[v].storage == Storage::Alias) {
      values_[v].offset = values_[root_of(static_cast<int64_t>(v))].offset + values_[v].alias_offset;
    }
  }
  arena_sizes_.clear();
  const uint32_t num_arenas = arena_size.empty() ? 0 : arena_size.rbegin()->first;
  for (uint32_t id = 1; id <= num_arenas; ++id) {
    auto it = arena_size.find(id);
    arena_sizes_.push_back(it == arena_size.end() ? 0 : static_cast<int64_t>(it->second));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// PtdWriter
// ---------------------------------------------------------------------------------------------------------------

void PtdWriter::add_tensor(std::string key, const TensorLayout& layout, std::span<const uint8_t> data,
                           uint32_t alignment) {
  if (contains(key)) fail("external data key '" + key + "' is added twice");
  Entry e;
  e.key = std::move(key);
  e.data.assign(data.begin(), data.end());
  e.alignment = alignment;
  e.has_layout = true;
  e.layout = layout;
  if (e.layout.dim_order.empty()) e.layout.dim_order = contiguous_dim_order(e.layout.sizes.size());
  entries_.push_back(std::move(e));
}

void PtdWriter::add_blob(std::string key, std::span<const uint8_t> data, uint32_t alignment) {
  if (contains(key)) fail("external data key '" + key + "' is added twice");
  Entry e;
  e.key = std::move(key);
  e.data.assign(data.begin(), data.end());
  e.alignment = alignment;
  entries_.push_back(std::move(e));
}

bool PtdWriter::contains(std::string_view key) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
}

std::vector<uint8_t> PtdWriter::serialize() const {
  namespace ft = ::flat_tensor_flatbuffer;
  constexpr uint64_t kSegmentAlignment = 128;
  constexpr size_t kHeaderLength = 40, kPaddedHeaderLength = 48;

  SegmentLayout segments;
  std::vector<uint32_t> segment_of(entries_.size());
  std::unordered_multimap<size_t, uint32_t> seen;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto& data = entries_[i].data;
    const size_t h = blob_hash(data);
    bool shared = false;
    for (auto [it, stop] = seen.equal_range(h); it != stop; ++it) {
      const auto& other = segments.items[it->second].data;
      if (other.size() == data.size() && std::equal(data.begin(), data.end(), other.begin())) {
        segment_of[i] = it->second;
        shared = true;
        break;
      }
    }
    if (!shared) {
      segment_of[i] = segments.add(data, kSegmentAlignment, entries_[i].alignment);
      seen.emplace(h, segment_of[i]);
    }
  }

  // Built field by field: the generated object-API Pack() would drop empty vectors (a rank-0 tensor's sizes,
  // an empty file's lists), which readers require to be present.
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<ft::DataSegment>> segment_offsets;
  for (const auto& it : segments.items) segment_offsets.push_back(ft::CreateDataSegment(b, it.offset, it.data.size()));
  std::vector<flatbuffers::Offset<ft::NamedData>> named;
  for (size_t i = 0; i < entries_.size(); ++i) {
    flatbuffers::Offset<ft::TensorLayout> layout = 0;
    if (entries_[i].has_layout) {
      const auto& l = entries_[i].layout;
      std::vector<int32_t> sizes(l.sizes.begin(), l.sizes.end());
      layout = ft::CreateTensorLayout(b, static_cast<executorch_flatbuffer::ScalarType>(l.dtype), b.CreateVector(sizes),
                                      b.CreateVector(l.dim_order));
    }
    named.push_back(ft::CreateNamedData(b, b.CreateString(entries_[i].key), segment_of[i], layout));
  }
  b.Finish(ft::CreateFlatTensor(b, 0, b.CreateVector(segment_offsets), b.CreateVector(named)), "FT01");

  const uint64_t fb_size = b.GetSize();
  const uint64_t segment_base = round_up(kPaddedHeaderLength + fb_size, kSegmentAlignment);
  std::vector<uint8_t> header(kPaddedHeaderLength, 0);
  std::memcpy(header.data(), "FH01", 4);
  put_u32(header.data() + 4, kHeaderLength);
  put_u64(header.data() + 8, kPaddedHeaderLength);
  put_u64(header.data() + 16, fb_size);
  put_u64(header.data() + 24, segment_base);
  put_u64(header.data() + 32, segments.end);
  std::vector<uint8_t> out = splice_header(b.GetBufferPointer(), b.GetSize(), header);
  out.resize(segment_base + segments.end, 0);
  segments.copy_into(out, segment_base);
  return out;
}

void PtdWriter::write(const std::string& path) const { write_file(path, serialize()); }

// ---------------------------------------------------------------------------------------------------------------
// ProgramWriter
// ---------------------------------------------------------------------------------------------------------------

ProgramWriter::ProgramWriter(WriterOptions options) : options_(options) {}
ProgramWriter::~ProgramWriter() = default;

MethodWriter& ProgramWriter::add_method(std::string name) {
  for (const auto& m : methods_) {
    if (m->name() == name) fail("method '" + name + "' is added twice");
  }
  methods_.push_back(std::unique_ptr<MethodWriter>(new MethodWriter(this, std::move(name))));
  return *methods_.back();
}

MethodWriter& ProgramWriter::method(std::string_view name) {
  for (const auto& m : methods_) {
    if (m->name() == name) return *m;
  }
  fail("no method '" + std::string(name) + "'");
}

void ProgramWriter::add_named_data(std::string key, std::span<const uint8_t> data, uint32_t alignment) {
  for (const auto& n : named_) {
    if (n.key == key) {
      if (n.data.size() == data.size() && std::equal(data.begin(), data.end(), n.data.begin())) return;
      fail("named data key '" + key + "' is added twice with different bytes");
    }
  }
  named_.push_back({std::move(key), std::vector<uint8_t>(data.begin(), data.end()), alignment});
}

uint32_t ProgramWriter::add_constant(std::span<const uint8_t> data) {
  const size_t h = blob_hash(data);
  for (auto [it, stop] = constant_index_.equal_range(h); it != stop; ++it) {
    const auto& c = constants_[it->second];
    if (c.size() == data.size() && std::equal(data.begin(), data.end(), c.begin())) return it->second;
  }
  constants_.emplace_back(data.begin(), data.end());
  const auto index = static_cast<uint32_t>(constants_.size() - 1);
  constant_index_.emplace(h, index);
  return index;
}

uint32_t ProgramWriter::add_mutable(std::span<const uint8_t> data) {
  mutables_.emplace_back(data.begin(), data.end());
  return static_cast<uint32_t>(mutables_.size() - 1);
}

uint32_t ProgramWriter::add_payload(std::vector<uint8_t> payload) {
  payloads_.push_back(std::move(payload));
  return static_cast<uint32_t>(payloads_.size() - 1);
}

std::vector<uint8_t> ProgramWriter::serialize() {
  fb::ProgramT program;
  program.version = 0;

  // Constant segment (always segment 0, possibly empty): entries padded to the constant alignment.
  std::vector<uint8_t> constant_blob;
  auto constant_segment = std::make_unique<fb::SubsegmentOffsetsT>();
  for (size_t i = 0; i < constants_.size(); ++i) {
    if (i > 0) constant_blob.resize(round_up(constant_blob.size(), options_.constant_alignment), 0);
    constant_segment->offsets.push_back(constant_blob.size());
    constant_blob.insert(constant_blob.end(), constants_[i].begin(), constants_[i].end());
  }
  SegmentLayout segments;
  constant_segment->segment_index = segments.add(constant_blob, options_.segment_alignment, 1);
  program.constant_segment = std::move(constant_segment);

  // Mutable-data segment: entries back to back.
  std::vector<uint8_t> mutable_blob;
  if (mutables_.size() > 1) {
    auto seg = std::make_unique<fb::SubsegmentOffsetsT>();
    for (const auto& m : mutables_) {
      seg->offsets.push_back(mutable_blob.size());
      mutable_blob.insert(mutable_blob.end(), m.begin(), m.end());
    }
    seg->segment_index = segments.add(mutable_blob, options_.segment_alignment, 1);
    program.mutable_data_segments.push_back(std::move(seg));
  }

  // Delegate payloads: one segment per distinct non-empty blob placed in a segment; the rest inline.
  std::vector<int64_t> payload_segment(payloads_.size(), -1);
  std::vector<int64_t> payload_inline(payloads_.size(), -1);
  auto inline_index = [&](uint32_t p) {
    if (payload_inline[p] < 0) {
      auto data = std::make_unique<fb::BackendDelegateInlineDataT>();
      data->data = payloads_[p];
      program.backend_delegate_data.push_back(std::move(data));
      payload_inline[p] = static_cast<int64_t>(program.backend_delegate_data.size() - 1);
    }
    return static_cast<uint32_t>(payload_inline[p]);
  };
  for (const auto& m : methods_) {
    for (const auto& d : m->delegates_) {
      if (d.placement != PayloadPlacement::Segment || payloads_[d.payload].empty() || payload_segment[d.payload] >= 0) {
        continue;
      }
      for (size_t q = 0; q < d.payload; ++q) {
        if (payload_segment[q] >= 0 && payloads_[q] == payloads_[d.payload]) payload_segment[d.payload] = payload_segment[q];
      }
      if (payload_segment[d.payload] < 0) {
        payload_segment[d.payload] = segments.add(payloads_[d.payload], options_.segment_alignment, 16);
      }
    }
  }

  // Named data: one segment per distinct blob.
  std::unordered_multimap<size_t, uint32_t> named_seen;
  for (const auto& n : named_) {
    const size_t h = blob_hash(n.data);
    int64_t index = -1;
    for (auto [it, stop] = named_seen.equal_range(h); it != stop; ++it) {
      const auto& other = segments.items[it->second].data;
      if (other.size() == n.data.size() && std::equal(n.data.begin(), n.data.end(), other.begin())) index = it->second;
    }
    if (index < 0) {
      index = segments.add(n.data, options_.segment_alignment, n.alignment);
      named_seen.emplace(h, static_cast<uint32_t>(index));
    }
    auto nd = std::make_unique<fb::NamedDataT>();
    nd->key = n.key;
    nd->segment_index = static_cast<uint32_t>(index);
    program.named_data.push_back(std::move(nd));
  }

  for (const auto& it : segments.items) {
    auto seg = std::make_unique<fb::DataSegmentT>();
    seg->offset = it.offset;
    seg->size = it.data.size();
    program.segments.push_back(std::move(seg));
  }

  // Methods.
  for (const auto& mp : methods_) {
    MethodWriter& m = *mp;
    m.plan_memory();
    auto plan = std::make_unique<fb::ExecutionPlanT>();
    plan->name = m.name_;
    plan->container_meta_type = std::make_unique<fb::ContainerMetadataT>();
    plan->container_meta_type->encoded_inp_str = m.has_input_spec_ ? m.input_spec_ : default_input_spec(m.inputs_.size());
    plan->container_meta_type->encoded_out_str =
        m.has_output_spec_ ? m.output_spec_ : default_output_spec(m.outputs_.size());
    for (const auto& v : m.values_) {
      auto ev = std::make_unique<fb::EValueT>();
      using K = MethodWriter::Kind;
      switch (v.kind) {
        case K::None: ev->val.Set(fb::NullT{}); break;
        case K::Int: {
          fb::IntT x;
          x.int_val = v.int_value;
          ev->val.Set(std::move(x));
          break;
        }
        case K::Double: {
          fb::DoubleT x;
          x.double_val = v.double_value;
          ev->val.Set(std::move(x));
          break;
        }
        case K::Bool: {
          fb::BoolT x;
          x.bool_val = v.bool_value;
          ev->val.Set(std::move(x));
          break;
        }
        case K::String: {
          fb::StringT x;
          x.string_val = v.string_value;
          ev->val.Set(std::move(x));
          break;
        }
        case K::IntList: {
          fb::IntListT x;
          x.items = v.items;
          ev->val.Set(std::move(x));
          break;
        }
        case K::DoubleList: {
          fb::DoubleListT x;
          x.items = v.double_items;
          ev->val.Set(std::move(x));
          break;
        }
        case K::BoolList: {
          fb::BoolListT x;
          x.items.assign(v.bool_items.begin(), v.bool_items.end());
          ev->val.Set(std::move(x));
          break;
        }
        case K::TensorList: {
          fb::TensorListT x;
          for (int64_t i : v.items) x.items.push_back(static_cast<int32_t>(i));
          ev->val.Set(std::move(x));
          break;
        }
        case K::OptionalTensorList: {
          fb::OptionalTensorListT x;
          for (int64_t i : v.items) x.items.push_back(static_cast<int32_t>(i));
          ev->val.Set(std::move(x));
          break;
        }
        case K::Tensor: {
          using S = MethodWriter::Storage;
          fb::TensorT x;
          x.scalar_type = static_cast<fb::ScalarType>(v.tensor.dtype);
          x.sizes = v.tensor.sizes;
          x.dim_order = v.tensor.dim_order.empty() ? contiguous_dim_order(v.tensor.sizes.size()) : v.tensor.dim_order;
          x.shape_dynamism = static_cast<fb::TensorShapeDynamism>(v.tensor.dynamism);
          if (v.storage == S::Planned || v.storage == S::Alias || v.storage == S::Mutable) {
            x.allocation_info = std::make_unique<fb::AllocationDetailsT>();
            x.allocation_info->memory_id = v.memory_id;
            x.allocation_info->memory_offset_low = static_cast<uint32_t>(v.offset);
            x.allocation_info->memory_offset_high = static_cast<uint32_t>(v.offset >> 32);
          }
          if (v.storage == S::Constant || v.storage == S::Mutable) x.data_buffer_idx = v.data_index;
          if (v.storage == S::External || !v.tensor.name.empty()) {
            x.extra_tensor_info = std::make_unique<fb::ExtraTensorInfoT>();
            x.extra_tensor_info->fully_qualified_name = v.tensor.name;
            x.extra_tensor_info->location =
                v.storage == S::External ? fb::TensorDataLocation::EXTERNAL : fb::TensorDataLocation::SEGMENT;
          }
          ev->val.Set(std::move(x));
          break;
        }
      }
      plan->values.push_back(std::move(ev));
    }
    plan->inputs = m.inputs_;
    plan->outputs = m.outputs_;
    for (const auto& chain : m.chains_) {
      auto c = std::make_unique<fb::ChainT>();
      for (const auto& instr : chain) {
        auto in = std::make_unique<fb::InstructionT>();
        using I = MethodWriter::InstrKind;
        switch (instr.kind) {
          case I::Kernel: {
            fb::KernelCallT k;
            k.op_index = instr.index;
            k.args = instr.args;
            in->instr_args.Set(std::move(k));
            break;
          }
          case I::Delegate: {
            fb::DelegateCallT d;
            d.delegate_index = instr.index;
            d.args = instr.args;
            in->instr_args.Set(std::move(d));
            break;
          }
          case I::Move: {
            fb::MoveCallT mv;
            mv.move_from = instr.args[0];
            mv.move_to = instr.args[1];
            in->instr_args.Set(std::move(mv));
            break;
          }
          case I::JumpFalse: {
            fb::JumpFalseCallT j;
            j.cond_value_index = instr.args[0];
            j.destination_instruction = instr.args[1];
            in->instr_args.Set(std::move(j));
            break;
          }
          case I::Free: {
            fb::FreeCallT f;
            f.value_index = instr.args[0];
            in->instr_args.Set(std::move(f));
            break;
          }
        }
        c->instructions.push_back(std::move(in));
      }
      plan->chains.push_back(std::move(c));
    }
    for (const auto& op : m.operators_) {
      auto o = std::make_unique<fb::OperatorT>();
      const size_t ns = op.rfind("::");
      const size_t dot = op.find('.', ns == std::string::npos ? 0 : ns + 2);
      o->name = op.substr(0, dot);
      o->overload = dot == std::string::npos ? "" : op.substr(dot + 1);
      plan->operators.push_back(std::move(o));
    }
    for (const auto& d : m.delegates_) {
      auto bd = std::make_unique<fb::BackendDelegateT>();
      bd->id = d.id;
      bd->processed = std::make_unique<fb::BackendDelegateDataReferenceT>();
      if (payload_segment[d.payload] >= 0) {
        bd->processed->location = fb::DataLocation::SEGMENT;
        bd->processed->index = static_cast<uint32_t>(payload_segment[d.payload]);
      } else {
        bd->processed->location = fb::DataLocation::INLINE;
        bd->processed->index = inline_index(d.payload);
      }
      for (const auto& cs : d.compile_specs) {
        auto spec = std::make_unique<fb::CompileSpecT>();
        spec->key = cs.key;
        spec->value = cs.value;
        bd->compile_specs.push_back(std::move(spec));
      }
      plan->delegates.push_back(std::move(bd));
    }
    plan->non_const_buffer_sizes.push_back(0);
    plan->non_const_buffer_sizes.insert(plan->non_const_buffer_sizes.end(), m.arena_sizes_.begin(),
                                        m.arena_sizes_.end());
    program.execution_plan.push_back(std::move(plan));
  }

  const std::vector<uint8_t> flat = pack_program(program);
  if (segments.end == 0) return flat;
  // The extended header: 32 bytes (already a multiple of the schema's largest alignment, 16).
  constexpr size_t kHeaderSize = 32;
  const uint64_t program_size = kHeaderSize + flat.size();
  const uint64_t segment_base = round_up(program_size, options_.segment_alignment);
  std::vector<uint8_t> header(kHeaderSize, 0);
  std::memcpy(header.data(), "eh00", 4);
  put_u32(header.data() + 4, kHeaderSize);
  put_u64(header.data() + 8, program_size);
  put_u64(header.data() + 16, segment_base);
  put_u64(header.data() + 24, segments.end);
  std::vector<uint8_t> out = splice_header(flat.data(), flat.size(), header);
  out.resize(segment_base + segments.end, 0);
  segments.copy_into(out, segment_base);
  return out;
}

size_t ProgramWriter::write(const std::string& path) {
  const std::vector<uint8_t> bytes = serialize();
  write_file(path, bytes);
  return bytes.size();
}

// ---------------------------------------------------------------------------------------------------------------
// pack_program
// ---------------------------------------------------------------------------------------------------------------

namespace {

using FBB = flatbuffers::FlatBufferBuilder;

flatbuffers::Offset<flatbuffers::String> str(FBB& b, const std::string& s) { return b.CreateString(s); }

flatbuffers::Offset<fb::Tensor> pack_tensor(FBB& b, const fb::TensorT& t) {
  auto sizes = b.CreateVector(t.sizes);
  auto dim_order = b.CreateVector(t.dim_order);
  flatbuffers::Offset<fb::AllocationDetails> alloc = 0;
  if (t.allocation_info) {
    const auto& a = *t.allocation_info;
    alloc = fb::CreateAllocationDetails(b, a.memory_id, a.memory_offset_low, a.memory_offset_high);
  }
  flatbuffers::Offset<fb::ExtraTensorInfo> extra = 0;
  if (t.extra_tensor_info) {
    const auto& e = *t.extra_tensor_info;
    auto fqn = e.fully_qualified_name.empty() ? 0 : str(b, e.fully_qualified_name);
    extra = fb::CreateExtraTensorInfo(b, e.mutable_data_segments_idx, fqn, e.location, e.device_type, e.device_index);
  }
  return fb::CreateTensor(b, t.scalar_type, t.storage_offset, sizes, dim_order, t.requires_grad, t.data_buffer_idx,
                          alloc, t.layout, t.shape_dynamism, extra);
}

flatbuffers::Offset<fb::EValue> pack_value(FBB& b, const fb::EValueT& v) {
  using K = fb::KernelTypes;
  const auto& u = v.val;
  flatbuffers::Offset<void> val = 0;
  switch (u.type) {
    case K::NONE: break;
    case K::Null: val = fb::CreateNull(b).Union(); break;
    case K::Int: val = fb::CreateInt(b, u.AsInt()->int_val).Union(); break;
    case K::Bool: val = fb::CreateBool(b, u.AsBool()->bool_val).Union(); break;
    case K::Double: val = fb::CreateDouble(b, u.AsDouble()->double_val).Union(); break;
    case K::String: val = fb::CreateString(b, str(b, u.AsString()->string_val)).Union(); break;
    case K::Tensor: val = pack_tensor(b, *u.AsTensor()).Union(); break;
    case K::IntList: val = fb::CreateIntList(b, b.CreateVector(u.AsIntList()->items)).Union(); break;
    case K::DoubleList: val = fb::CreateDoubleList(b, b.CreateVector(u.AsDoubleList()->items)).Union(); break;
    case K::BoolList: {
      const auto& items = u.AsBoolList()->items;
      std::vector<uint8_t> bytes(items.begin(), items.end());
      val = fb::CreateBoolList(b, b.CreateVector(bytes)).Union();
      break;
    }
    case K::TensorList: val = fb::CreateTensorList(b, b.CreateVector(u.AsTensorList()->items)).Union(); break;
    case K::OptionalTensorList:
      val = fb::CreateOptionalTensorList(b, b.CreateVector(u.AsOptionalTensorList()->items)).Union();
      break;
  }
  // A NONE union (no payload) is only written by tests that want a malformed value.
  return fb::CreateEValue(b, u.type, val);
}

flatbuffers::Offset<fb::Instruction> pack_instruction(FBB& b, const fb::InstructionT& in) {
  using I = fb::InstructionArguments;
  const auto& u = in.instr_args;
  flatbuffers::Offset<void> args = 0;
  switch (u.type) {
    case I::NONE: break;
    case I::KernelCall: {
      const auto* k = u.AsKernelCall();
      args = fb::CreateKernelCall(b, k->op_index, b.CreateVector(k->args)).Union();
      break;
    }
    case I::DelegateCall: {
      const auto* d = u.AsDelegateCall();
      args = fb::CreateDelegateCall(b, d->delegate_index, b.CreateVector(d->args)).Union();
      break;
    }
    case I::MoveCall: args = fb::CreateMoveCall(b, u.AsMoveCall()->move_from, u.AsMoveCall()->move_to).Union(); break;
    case I::JumpFalseCall: {
      const auto* j = u.AsJumpFalseCall();
      args = fb::CreateJumpFalseCall(b, j->cond_value_index, j->destination_instruction).Union();
      break;
    }
    case I::FreeCall: args = fb::CreateFreeCall(b, u.AsFreeCall()->value_index).Union(); break;
  }
  return fb::CreateInstruction(b, u.type, args);
}

template <typename T, typename F>
auto pack_all(FBB& b, const std::vector<std::unique_ptr<T>>& items, F&& pack) {
  std::vector<decltype(pack(b, *items.front()))> offsets;
  offsets.reserve(items.size());
  for (const auto& item : items) offsets.push_back(pack(b, *item));
  return b.CreateVector(offsets);
}

flatbuffers::Offset<fb::ExecutionPlan> pack_plan(FBB& b, const fb::ExecutionPlanT& p) {
  auto name = str(b, p.name);
  flatbuffers::Offset<fb::ContainerMetadata> meta = 0;
  if (p.container_meta_type) {
    meta = fb::CreateContainerMetadata(b, str(b, p.container_meta_type->encoded_inp_str),
                                       str(b, p.container_meta_type->encoded_out_str));
  }
  auto values = pack_all(b, p.values, pack_value);
  auto inputs = b.CreateVector(p.inputs);
  auto outputs = b.CreateVector(p.outputs);
  auto chains = pack_all(b, p.chains, [](FBB& bb, const fb::ChainT& c) {
    auto instructions = pack_all(bb, c.instructions, pack_instruction);
    return fb::CreateChain(bb, bb.CreateVector(c.inputs), bb.CreateVector(c.outputs), instructions);
  });
  auto operators = pack_all(b, p.operators, [](FBB& bb, const fb::OperatorT& o) {
    return fb::CreateOperator(bb, str(bb, o.name), str(bb, o.overload));
  });
  auto delegates = pack_all(b, p.delegates, [](FBB& bb, const fb::BackendDelegateT& d) {
    flatbuffers::Offset<fb::BackendDelegateDataReference> processed = 0;
    if (d.processed) processed = fb::CreateBackendDelegateDataReference(bb, d.processed->location, d.processed->index);
    auto specs = pack_all(bb, d.compile_specs, [](FBB& bbb, const fb::CompileSpecT& cs) {
      return fb::CreateCompileSpec(bbb, str(bbb, cs.key), bbb.CreateVector(cs.value));
    });
    return fb::CreateBackendDelegate(bb, str(bb, d.id), processed, specs);
  });
  auto sizes = b.CreateVector(p.non_const_buffer_sizes);
  return fb::CreateExecutionPlan(b, name, meta, values, inputs, outputs, chains, operators, delegates, sizes);
}

flatbuffers::Offset<fb::SubsegmentOffsets> pack_subsegments(FBB& b, const fb::SubsegmentOffsetsT& s) {
  return fb::CreateSubsegmentOffsets(b, s.segment_index, b.CreateVector(s.offsets));
}

}  // namespace

std::vector<uint8_t> pack_program(const fb::ProgramT& program) {
  FBB b(1 << 16);
  auto plans = pack_all(b, program.execution_plan, pack_plan);
  auto constant_buffer = pack_all(b, program.constant_buffer, [](FBB& bb, const fb::BufferT& buf) {
    bb.ForceVectorAlignment(buf.storage.size(), sizeof(uint8_t), 16);
    return fb::CreateBuffer(bb, bb.CreateVector(buf.storage));
  });
  auto inline_data = pack_all(b, program.backend_delegate_data, [](FBB& bb, const fb::BackendDelegateInlineDataT& d) {
    bb.ForceVectorAlignment(d.data.size(), sizeof(uint8_t), 16);
    return fb::CreateBackendDelegateInlineData(bb, bb.CreateVector(d.data));
  });
  auto segments = pack_all(b, program.segments, [](FBB& bb, const fb::DataSegmentT& s) {
    return fb::CreateDataSegment(bb, s.offset, s.size);
  });
  flatbuffers::Offset<fb::SubsegmentOffsets> constant_segment = 0;
  if (program.constant_segment) constant_segment = pack_subsegments(b, *program.constant_segment);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::SubsegmentOffsets>>> mutable_segments = 0;
  if (!program.mutable_data_segments.empty()) mutable_segments = pack_all(b, program.mutable_data_segments, pack_subsegments);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::NamedData>>> named = 0;
  if (!program.named_data.empty()) {
    named = pack_all(b, program.named_data, [](FBB& bb, const fb::NamedDataT& n) {
      return fb::CreateNamedData(bb, str(bb, n.key), n.segment_index);
    });
  }
  b.Finish(fb::CreateProgram(b, program.version, plans, constant_buffer, inline_data, segments, constant_segment,
                             mutable_segments, named),
           "ET12");
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------------

void write_file(const std::string& path, std::span<const uint8_t> bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot open '" + path + "' for writing: " + std::strerror(errno));
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = written == bytes.size() && std::fclose(f) == 0;
  if (!ok) fail("cannot write '" + path + "'");
}

// SHA-256 (FIPS 180-4).
std::string sha256_hex(std::span<const uint8_t> data) {
  static constexpr uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  auto block = [&](const uint8_t* p) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) | (uint32_t(p[4 * i + 2]) << 8) | p[4 * i + 3];
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const uint32_t ch = (e & f) ^ (~e & g);
      const uint32_t t1 = hh + s1 + ch + k[i] + w[i];
      const uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      const uint32_t t2 = s0 + maj;
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
  };
  const size_t full = data.size() / 64 * 64;
  for (size_t i = 0; i < full; i += 64) block(data.data() + i);
  uint8_t tail[128] = {};
  const size_t rest = data.size() - full;
  if (rest > 0) std::memcpy(tail, data.data() + full, rest);
  tail[rest] = 0x80;
  const size_t tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
  const uint64_t bits = static_cast<uint64_t>(data.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_len - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  block(tail);
  if (tail_len == 128) block(tail + 64);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t word : h) {
    for (int i = 3; i >= 0; --i) {
      const uint8_t byte = static_cast<uint8_t>(word >> (8 * i));
      out += hex[byte >> 4];
      out += hex[byte & 15];
    }
  }
  return out;
}

}  // namespace etnp::format
