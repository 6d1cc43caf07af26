#include "format/etdump.h"

#include <cstring>
#include <memory>

#include "etdump_generated.h"
#include "core/printable.h"
#include "etnp/error.h"

namespace etnp::format {

namespace ed = ::etdump;

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, "invalid ETDump: " + what);
}

std::string str_or_empty(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

// ---- writing ----------------------------------------------------------------------------------------------

flatbuffers::Offset<ed::Tensor> build_tensor(flatbuffers::FlatBufferBuilder& b, const EtdumpTensor& t) {
  return ed::CreateTensorDirect(b, static_cast<executorch_flatbuffer::ScalarType>(t.dtype), &t.sizes, &t.strides,
                                t.offset);
}

flatbuffers::Offset<ed::Value> build_value(flatbuffers::FlatBufferBuilder& b, const EtdumpDebugEvent& e) {
  using K = EtdumpDebugEvent::Kind;
  flatbuffers::Offset<ed::Tensor> tensor;
  flatbuffers::Offset<ed::TensorList> tensor_list;
  flatbuffers::Offset<ed::Int> int_value;
  flatbuffers::Offset<ed::Float> float_value;
  flatbuffers::Offset<ed::Double> double_value;
  flatbuffers::Offset<ed::Bool> bool_value;
  switch (e.kind) {
    case K::Tensor:
      if (e.tensors.size() != 1)
        throw Error(ErrorKind::InvalidArgument, "ETDump: a Tensor debug event needs exactly one tensor");
      tensor = build_tensor(b, e.tensors[0]);
      break;
    case K::TensorList: {
      std::vector<flatbuffers::Offset<ed::Tensor>> items;
      for (const auto& t : e.tensors) items.push_back(build_tensor(b, t));
      tensor_list = ed::CreateTensorListDirect(b, &items);
      break;
    }
    case K::Int: int_value = ed::CreateInt(b, e.int_value); break;
    case K::Float: float_value = ed::CreateFloat(b, static_cast<float>(e.double_value)); break;
    case K::Double: double_value = ed::CreateDouble(b, e.double_value); break;
    case K::Bool: bool_value = ed::CreateBool(b, e.bool_value); break;
    case K::Null:
    case K::String: break;  // the schema has no member for a string value
  }
  flatbuffers::Offset<ed::Bool> output;
  if (e.is_output) output = ed::CreateBool(b, true);
  return ed::CreateValue(b, static_cast<ed::ValueType>(e.kind), tensor, tensor_list, int_value, float_value,
                         double_value, bool_value, output);
}

// ---- reading ----------------------------------------------------------------------------------------------

/// The verifier checks a vector's length prefix for 4-byte alignment only, so 8-byte elements may sit at
/// a 4-byte boundary in a crafted file: copy them out bytewise instead of loading them in place.
std::vector<int64_t> read_longs(const flatbuffers::Vector<int64_t>* v) {
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  out.resize(v->size());
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(int64_t));  // little-endian host
  return out;
}

EtdumpTensor read_tensor(const ed::Tensor* t, const std::string& where) {
  if (t == nullptr) fail(where + ": missing tensor");
  EtdumpTensor out;
  const int dtype = static_cast<int>(t->scalar_type());
  if (!is_valid_scalar_type(dtype)) fail(where + ": invalid scalar type " + std::to_string(dtype));
  out.dtype = static_cast<ScalarType>(dtype);
  out.sizes = read_longs(t->sizes());
  out.strides = read_longs(t->strides());
  out.offset = t->offset();
  return out;
}

EtdumpDebugEvent read_debug_event(const ed::DebugEvent& d, const std::string& where) {
  using K = EtdumpDebugEvent::Kind;
  EtdumpDebugEvent out;
  out.chain_index = d.chain_index();
  out.instruction_id = d.instruction_id();
  out.delegate_debug_id_int = d.delegate_debug_id_int();
  out.delegate_debug_id_str = str_or_empty(d.delegate_debug_id_str());
  out.name = str_or_empty(d.name());
  const ed::Value* v = d.debug_entry();
  if (v == nullptr) return out;
  const int kind = static_cast<int>(v->val());
  if (kind < 0 || kind > static_cast<int>(K::String)) fail(where + ": unknown value type " + std::to_string(kind));
  out.kind = static_cast<K>(kind);
  out.is_output = v->output() && v->output()->bool_val();
  switch (out.kind) {
    case K::Tensor: out.tensors.push_back(read_tensor(v->tensor(), where)); break;
    case K::TensorList:
      if (v->tensor_list() == nullptr) fail(where + ": missing tensor list");
      if (const auto* items = v->tensor_list()->tensors())
        for (flatbuffers::uoffset_t i = 0; i < items->size(); ++i)
          out.tensors.push_back(read_tensor(items->Get(i), where));
      break;
    case K::Int:
      if (v->int_value() == nullptr) fail(where + ": missing int value");
      out.int_value = v->int_value()->int_val();
      break;
    case K::Float:
      if (v->float_value() == nullptr) fail(where + ": missing float value");
      out.double_value = v->float_value()->float_val();
      break;
    case K::Double:
      if (v->double_value() == nullptr) fail(where + ": missing double value");
      out.double_value = v->double_value()->double_val();
      break;
    case K::Bool:
      if (v->bool_value() == nullptr) fail(where + ": missing bool value");
      out.bool_value = v->bool_value()->bool_val();
      break;
    case K::Null:
    case K::String: break;
  }
  return out;
}

}  // namespace

std::vector<uint8_t> write_etdump(const std::vector<RunBlock>& blocks) {
  flatbuffers::FlatBufferBuilder b(1024);
  std::vector<flatbuffers::Offset<ed::RunData>> run_data;
  for (const RunBlock& block : blocks) {
    std::vector<flatbuffers::Offset<ed::Allocator>> allocators;
    for (const auto& name : block.allocators) allocators.push_back(ed::CreateAllocatorDirect(b, name.c_str()));

    std::vector<flatbuffers::Offset<ed::Event>> events;
    for (const auto& p : block.profile_events) {
      auto ev = ed::CreateProfileEventDirect(
          b, p.name.empty() ? nullptr : p.name.c_str(), p.chain_index, p.instruction_id, p.delegate_debug_id_int,
          p.delegate_debug_id_str.empty() ? nullptr : p.delegate_debug_id_str.c_str(), &p.delegate_debug_metadata,
          p.start_time, p.end_time);
      events.push_back(ed::CreateEvent(b, ev, 0, 0));
    }
    for (const auto& a : block.allocation_events)
      events.push_back(ed::CreateEvent(b, 0, ed::CreateAllocationEvent(b, a.allocator_id, a.allocation_size), 0));
    for (const auto& d : block.debug_events) {
      auto value = build_value(b, d);
      auto ev = ed::CreateDebugEventDirect(
          b, d.chain_index, d.instruction_id, value, d.delegate_debug_id_int,
          d.delegate_debug_id_str.empty() ? nullptr : d.delegate_debug_id_str.c_str(),
          d.name.empty() ? nullptr : d.name.c_str());
      events.push_back(ed::CreateEvent(b, 0, 0, ev));
    }
    run_data.push_back(ed::CreateRunDataDirect(b, block.name.c_str(), block.bundled_input_index,
                                               block.allocators.empty() ? nullptr : &allocators, &events));
  }
  auto root = ed::CreateETDumpDirect(b, /*version=*/0, &run_data);
  ed::FinishSizePrefixedETDumpBuffer(b, root);
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

bool is_etdump(std::span<const uint8_t> bytes) {
  return bytes.size() >= 12 && std::memcmp(bytes.data() + 8, ed::ETDumpIdentifier(), 4) == 0;
}

std::vector<RunBlock> parse_etdump(std::span<const uint8_t> bytes) {
  if (bytes.size() < 12) fail(std::to_string(bytes.size()) + " bytes, too short");
  if (!is_etdump(bytes)) {
    fail("identifier at bytes 8..12 is '" + printable(bytes.subspan(8, 4)) +
         "', expected 'ED00'");
  }
  uint32_t prefix;
  std::memcpy(&prefix, bytes.data(), 4);  // little-endian hosts only, like the rest of etnp
  if (uint64_t(prefix) + 4 > bytes.size())
    fail("size prefix says " + std::to_string(prefix) + " bytes follow, the data has " +
         std::to_string(bytes.size() - 4));
  const size_t size = size_t(prefix) + 4;
  if (size >= FLATBUFFERS_MAX_BUFFER_SIZE) fail("buffer too large");

  // Verified reads need aligned scalars, and the verifier checks alignment relative to the start of the
  // buffer it is given. Writers differ in where they align to: flatcc aligns relative to byte 0 (the size
  // prefix), other builders relative to byte 4 (the FlatBuffer proper). Try both, each on a 16-byte-aligned
  // copy when the bytes are not already placed that way, so every accepted read is in bounds and aligned.
  std::unique_ptr<uint64_t[]> copy;
  auto aligned = [&](const uint8_t* p, size_t n) {
    if (reinterpret_cast<uintptr_t>(p) % 16 == 0) return p;
    copy.reset(new uint64_t[(n + 7) / 8 + 1]);
    std::memcpy(copy.get(), p, n);
    return reinterpret_cast<const uint8_t*>(copy.get());
  };
  const ed::ETDump* root = nullptr;
  {
    const uint8_t* data = aligned(bytes.data(), size);
    flatbuffers::Verifier verifier(data, size);
    if (ed::VerifySizePrefixedETDumpBuffer(verifier)) root = ed::GetSizePrefixedETDump(data);
  }
  if (root == nullptr) {
    const uint8_t* inner = aligned(bytes.data() + 4, size - 4);
    flatbuffers::Verifier verifier(inner, size - 4);
    if (ed::VerifyETDumpBuffer(verifier)) root = ed::GetETDump(inner);
  }
  if (root == nullptr) fail("FlatBuffer verification failed (truncated or corrupt)");

  std::vector<RunBlock> blocks;
  const auto* run_data = root->run_data();
  if (run_data == nullptr) return blocks;
  for (flatbuffers::uoffset_t r = 0; r < run_data->size(); ++r) {
    const ed::RunData* rd = run_data->Get(r);
    if (rd == nullptr) fail("run_data " + std::to_string(r) + " is missing");
    RunBlock block;
    block.name = str_or_empty(rd->name());
    block.bundled_input_index = rd->bundled_input_index();
    if (const auto* allocs = rd->allocators())
      for (flatbuffers::uoffset_t a = 0; a < allocs->size(); ++a)
        block.allocators.push_back(allocs->Get(a) ? str_or_empty(allocs->Get(a)->name()) : std::string());
    if (const auto* events = rd->events()) {
      for (flatbuffers::uoffset_t i = 0; i < events->size(); ++i) {
        const ed::Event* ev = events->Get(i);
        const std::string where = "run_data " + std::to_string(r) + " event " + std::to_string(i);
        if (ev == nullptr) fail(where + " is missing");
        if (const ed::ProfileEvent* p = ev->profile_event()) {
          EtdumpProfileEvent out;
          out.name = str_or_empty(p->name());
          out.chain_index = p->chain_index();
          out.instruction_id = p->instruction_id();
          out.delegate_debug_id_int = p->delegate_debug_id_int();
          out.delegate_debug_id_str = str_or_empty(p->delegate_debug_id_str());
          if (const auto* meta = p->delegate_debug_metadata())
            out.delegate_debug_metadata.assign(meta->begin(), meta->end());
          out.start_time = p->start_time();
          out.end_time = p->end_time();
          block.profile_events.push_back(std::move(out));
        } else if (const ed::AllocationEvent* a = ev->allocation_event()) {
          block.allocation_events.push_back({a->allocator_id(), a->allocation_size()});
        } else if (const ed::DebugEvent* d = ev->debug_event()) {
          block.debug_events.push_back(read_debug_event(*d, where));
        } else {
          fail(where + " has no member set");
        }
      }
    }
    blocks.push_back(std::move(block));
  }
  return blocks;
}

}  // namespace etnp::format
