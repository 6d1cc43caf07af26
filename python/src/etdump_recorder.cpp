// ETDump recording for programs loaded with enable_etdump=True, and ETDump decoding into Python objects.
//
// The blocks follow the official runtime's layout so existing tools read them: a "Default" block with a
// "Method::init" and a "Program::load_method" event per method load (etnp's load is the method's
// initialization throughout, so both span it), and per execute call an "Execute" block holding, for each
// instruction, an "OPERATOR_CALL" event (plus a "native_call_<op>" event for kernels) or a "DELEGATE_CALL" event
// followed by one event per node the delegate ran (its debug handle as delegate_debug_id_int), then a
// "Method::execute" event spanning the call. With a debug buffer the method outputs of each call are
// logged as debug events whose tensor bytes are in the debug buffer.
#include <cstdint>
#include <cstring>

#include "binding.h"

namespace etnp::python {

namespace {

constexpr size_t kDebugAlignment = 64;

format::EtdumpProfileEvent profile_event(std::string name, int32_t chain, int32_t instruction, uint64_t start,
                                         uint64_t end) {
  format::EtdumpProfileEvent e;
  e.name = std::move(name);
  e.chain_index = chain;
  e.instruction_id = instruction;
  e.start_time = start;
  e.end_time = end;
  return e;
}

/// "aten::add.out" -> "native_call_add.out", the official runtime's name for the kernel call itself.
std::string native_call_name(const std::string& op) {
  const size_t colon = op.rfind("::");
  return "native_call_" + (colon == std::string::npos ? op : op.substr(colon + 2));
}

}  // namespace

void EtdumpRecorder::record_load(uint64_t start_ns, uint64_t end_ns) {
  format::RunBlock block;
  block.name = "Default";
  block.profile_events.push_back(profile_event("Method::init", -1, 0, start_ns, end_ns));
  block.profile_events.push_back(profile_event("Program::load_method", -1, 0, start_ns, end_ns));
  std::lock_guard lock(mutex_);
  blocks_.push_back(std::move(block));
}

void EtdumpRecorder::record_execute(const std::vector<ProfileEvent>& events, uint64_t start_ns, uint64_t end_ns,
                                    const std::vector<Value>& outputs) {
  format::RunBlock block;
  block.name = "Execute";
  for (const ProfileEvent& ev : events) {
    const auto chain = static_cast<int32_t>(ev.chain);
    const auto instruction = static_cast<int32_t>(ev.instruction);
    if (ev.delegate_part) {
      // A node the delegate reported: named, and identified by its debug handle as the official delegates do.
      format::EtdumpProfileEvent part = profile_event(ev.name, chain, instruction, ev.start_ns, ev.end_ns);
      if (ev.debug_handle >= 0 && ev.debug_handle <= INT32_MAX) {
        part.delegate_debug_id_int = static_cast<int32_t>(ev.debug_handle);
      }
      block.profile_events.push_back(std::move(part));
    } else if (ev.name.rfind("DELEGATE_CALL", 0) == 0) {
      block.profile_events.push_back(profile_event("DELEGATE_CALL", chain, instruction, ev.start_ns, ev.end_ns));
    } else if (ev.name.find("::") != std::string::npos) {
      block.profile_events.push_back(profile_event(native_call_name(ev.name), chain, instruction, ev.start_ns, ev.end_ns));
      block.profile_events.push_back(profile_event("OPERATOR_CALL", chain, instruction, ev.start_ns, ev.end_ns));
    } else {
      block.profile_events.push_back(profile_event(ev.name, chain, instruction, ev.start_ns, ev.end_ns));
    }
  }
  block.profile_events.push_back(profile_event("Method::execute", -1, 0, start_ns, end_ns));

  std::lock_guard lock(mutex_);
  if (debug_capacity_ > 0) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      format::EtdumpDebugEvent d;
      d.chain_index = 0;
      d.name = "output_" + std::to_string(i);
      d.is_output = true;
      const Value& v = outputs[i];
      if (const auto* t = std::get_if<TensorRef>(&v)) {
        d.kind = format::EtdumpDebugEvent::Kind::Tensor;
        format::EtdumpTensor tensor;
        tensor.dtype = t->dtype;
        tensor.sizes = t->sizes;
        std::vector<int64_t> strides(t->sizes.size());
        std::vector<uint8_t> order = t->dim_order;
        if (order.empty()) {
          for (size_t k = 0; k < t->sizes.size(); ++k) order.push_back(static_cast<uint8_t>(k));
        }
        strides_from_dim_order(t->sizes, order, strides);
        tensor.strides = strides;
        const size_t nbytes = t->nbytes();
        const size_t offset = (debug_.size() + kDebugAlignment - 1) / kDebugAlignment * kDebugAlignment;
        if (offset + nbytes <= debug_capacity_ && (nbytes == 0 || t->data != nullptr)) {
          debug_.resize(offset + nbytes);
          if (nbytes != 0) std::memcpy(debug_.data() + offset, t->data, nbytes);
          tensor.offset = static_cast<int64_t>(offset);
        }
        d.tensors.push_back(std::move(tensor));
      } else if (const auto* n = std::get_if<int64_t>(&v)) {
        d.kind = format::EtdumpDebugEvent::Kind::Int;
        d.int_value = *n;
      } else if (const auto* x = std::get_if<double>(&v)) {
        d.kind = format::EtdumpDebugEvent::Kind::Double;
        d.double_value = *x;
      } else if (const auto* b = std::get_if<bool>(&v)) {
        d.kind = format::EtdumpDebugEvent::Kind::Bool;
        d.bool_value = *b;
      } else if (std::holds_alternative<std::string>(v)) {
        d.kind = format::EtdumpDebugEvent::Kind::String;
      }
      block.debug_events.push_back(std::move(d));
    }
  }
  blocks_.push_back(std::move(block));
}

std::pair<std::vector<uint8_t>, std::vector<uint8_t>> EtdumpRecorder::take() {
  std::lock_guard lock(mutex_);
  std::vector<uint8_t> etdump = format::write_etdump(blocks_);
  std::vector<uint8_t> debug = std::move(debug_);
  blocks_.clear();
  debug_.clear();
  return {std::move(etdump), std::move(debug)};
}

namespace {

const char* debug_kind_name(format::EtdumpDebugEvent::Kind kind) {
  using K = format::EtdumpDebugEvent::Kind;
  switch (kind) {
    case K::Null: return "Null";
    case K::Int: return "Int";
    case K::Bool: return "Bool";
    case K::Float: return "Float";
    case K::Double: return "Double";
    case K::Tensor: return "Tensor";
    case K::TensorList: return "TensorList";
    case K::String: return "String";
  }
  return "Null";
}

}  // namespace

py::list etdump_to_python(const std::vector<format::RunBlock>& blocks) {
  py::list out;
  for (const auto& block : blocks) {
    py::dict b;
    b["name"] = block.name;
    b["bundled_input_index"] = block.bundled_input_index;
    b["allocators"] = py::cast(block.allocators);
    py::list profile;
    for (const auto& e : block.profile_events) {
      py::dict d;
      d["name"] = e.name;
      d["chain_index"] = e.chain_index;
      d["instruction_id"] = e.instruction_id;
      d["delegate_debug_id_int"] = e.delegate_debug_id_int;
      d["delegate_debug_id_str"] = e.delegate_debug_id_str;
      d["delegate_debug_metadata"] = py::bytes(reinterpret_cast<const char*>(e.delegate_debug_metadata.data()),
                                               e.delegate_debug_metadata.size());
      d["start_time"] = e.start_time;
      d["end_time"] = e.end_time;
      profile.append(d);
    }
    b["profile_events"] = profile;
    py::list allocations;
    for (const auto& e : block.allocation_events) {
      py::dict d;
      d["allocator_id"] = e.allocator_id;
      d["allocation_size"] = e.allocation_size;
      allocations.append(d);
    }
    b["allocation_events"] = allocations;
    py::list debug;
    for (const auto& e : block.debug_events) {
      py::dict d;
      d["chain_index"] = e.chain_index;
      d["instruction_id"] = e.instruction_id;
      d["delegate_debug_id_int"] = e.delegate_debug_id_int;
      d["delegate_debug_id_str"] = e.delegate_debug_id_str;
      d["name"] = e.name;
      d["kind"] = debug_kind_name(e.kind);
      d["int_value"] = e.int_value;
      d["bool_value"] = e.bool_value;
      d["double_value"] = e.double_value;
      d["is_output"] = e.is_output;
      py::list tensors;
      for (const auto& t : e.tensors) {
        py::dict td;
        td["dtype"] = std::string(scalar_type_name(t.dtype));
        td["sizes"] = py::cast(t.sizes);
        td["strides"] = py::cast(t.strides);
        td["offset"] = t.offset;
        tensors.append(td);
      }
      d["tensors"] = tensors;
      debug.append(d);
    }
    b["debug_events"] = debug;
    out.append(b);
  }
  return out;
}

}  // namespace etnp::python
