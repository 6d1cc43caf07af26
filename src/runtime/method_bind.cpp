// Binding a method's inputs (checked against what the program was exported with) and outputs (read back, or
// redirected to caller memory where nothing aliases them).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>

#include "etnp/program.h"
#include "core/printable.h"
#include "runtime/method_impl.h"
#include "runtime/use_analysis.h"

namespace etnp {

using runtime::Instruction;

namespace runtime {

std::string list_string(std::span<const int64_t> values) {
  std::string r = "[";
  for (size_t i = 0; i < values.size(); ++i) r += (i ? ", " : "") + std::to_string(values[i]);
  return r + "]";
}

std::string list_string(std::span<const uint8_t> values) {
  std::string r = "[";
  for (size_t i = 0; i < values.size(); ++i) r += (i ? ", " : "") + std::to_string(int(values[i]));
  return r + "]";
}

}  // namespace runtime

using runtime::list_string;

namespace {

/// Two memory orders describe the same bytes when every dimension of size > 1 gets the same stride.
bool same_physical_layout(std::span<const int64_t> sizes, std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  int64_t sa[kMaxTensorRank], sb[kMaxTensorRank];
  strides_from_dim_order(sizes, a, std::span<int64_t>(sa, sizes.size()));
  strides_from_dim_order(sizes, b, std::span<int64_t>(sb, sizes.size()));
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > 1 && sa[i] != sb[i]) return false;
  }
  return true;
}

bool doubles_match(double expected, double given) {
  if (std::isnan(expected) && std::isnan(given)) return true;
  if (std::isinf(expected) || std::isinf(given)) return expected == given;
  return std::fabs(expected - given) <= 1e-4 + 1e-5 * std::fabs(expected);
}

std::string value_string(const Value& v) {
  if (std::holds_alternative<int64_t>(v)) return std::to_string(std::get<int64_t>(v));
  if (std::holds_alternative<double>(v)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", std::get<double>(v));
    return buf;
  }
  if (std::holds_alternative<bool>(v)) return std::get<bool>(v) ? "true" : "false";
  if (std::holds_alternative<std::string>(v)) return quoted_name(std::get<std::string>(v));
  if (std::holds_alternative<TensorRef>(v)) return "a tensor";
  return "None";
}

const char* value_kind(const Value& v) {
  switch (v.index()) {
    case 0: return "None";
    case 1: return "Tensor";
    case 2: return "Int";
    case 3: return "Double";
    case 4: return "Bool";
    default: return "String";
  }
}

}  // namespace

namespace {

/// The kind of value an input tag stands for, as "expected ..." says it.
const char* expected_kind(Tag tag) {
  switch (tag) {
    case Tag::None: return "None";
    case Tag::Int: return "an Int";
    case Tag::Bool: return "a Bool";
    case Tag::Double: return "a Double";
    case Tag::String: return "a String";
    case Tag::Tensor: return "a tensor";
    default: return tag_name(tag);
  }
}

}  // namespace

void Method::Impl::check_input_index(size_t index) const {
  if (index >= meta.inputs.size()) {
    throw Error(ErrorKind::InvalidArgument,
                "the method takes " + std::to_string(meta.inputs.size()) + " inputs, there is no input " + std::to_string(index),
                context());
  }
}

void Method::Impl::reject_input(size_t index, const std::string& what) const {
  ErrorContext where = context();
  where.input_index = static_cast<int64_t>(index);
  throw Error(ErrorKind::InvalidArgument, what, where);
}

void Method::Impl::set_input(size_t index, const Value& value) {
  check_input_index(index);
  const ValueInfo& info = meta.inputs[index];
  if (const auto* tensor = std::get_if<TensorRef>(&value); tensor != nullptr && info.tag == Tag::Tensor) {
    set_input(index, tensor->view());
    return;
  }
  auto mismatch = [&](const std::string& what) { reject_input(index, what); };
  auto only_exported_value = [&](const Value& given) {
    mismatch("the program was exported with the value " + value_string(info.value) +
             " for this input and only accepts it; got " + value_string(given));
  };
  auto expect = [&](bool holds) {
    if (!holds) mismatch(std::string("expected ") + expected_kind(info.tag) + ", got " + value_kind(value));
  };
  switch (info.tag) {
    case Tag::None:
      expect(std::holds_alternative<std::monostate>(value));
      break;
    case Tag::Int:
      expect(std::holds_alternative<int64_t>(value));
      if (std::get<int64_t>(value) != std::get<int64_t>(info.value)) only_exported_value(value);
      break;
    case Tag::Bool:
      expect(std::holds_alternative<bool>(value));
      if (std::get<bool>(value) != std::get<bool>(info.value)) only_exported_value(value);
      break;
    case Tag::Double: {
      expect(std::holds_alternative<double>(value) || std::holds_alternative<int64_t>(value));
      const double given = std::holds_alternative<double>(value) ? std::get<double>(value)
                                                                 : static_cast<double>(std::get<int64_t>(value));
      if (!doubles_match(std::get<double>(info.value), given)) only_exported_value(Value(given));
      break;
    }
    case Tag::String:
      expect(std::holds_alternative<std::string>(value));
      if (std::get<std::string>(value) != std::get<std::string>(info.value)) {
        mismatch("the program only accepts " + value_string(info.value) + " for this input; got " + value_string(value));
      }
      break;
    case Tag::Tensor:
      expect(false);  // not a TensorRef
      break;
    default:
      mismatch(std::string("inputs of type ") + tag_name(info.tag) + " are not supported");
  }
  input_set[index] = true;
}

void Method::Impl::set_input(size_t index, const TensorView& ref) {
  check_input_index(index);
  const ValueInfo& info = meta.inputs[index];
  auto mismatch = [&](const std::string& what) { reject_input(index, what); };
  if (info.tag != Tag::Tensor) mismatch(std::string("expected ") + expected_kind(info.tag) + ", got Tensor");
  Tensor& t = values[plan->inputs()->Get(index)].to_tensor();
  const TensorInfo& ti = info.tensor;
  if (ref.dtype != ti.dtype) {
    mismatch("expected dtype " + std::string(scalar_type_name(ti.dtype)) + ", got " + std::string(scalar_type_name(ref.dtype)));
  }
  if (ref.sizes.size() != ti.sizes.size()) {
    mismatch("expected a rank-" + std::to_string(ti.sizes.size()) + " tensor of shape " + list_string(ti.sizes) +
             ", got rank " + std::to_string(ref.sizes.size()) + " shape " + list_string(ref.sizes));
  }
  for (size_t d = 0; d < ref.sizes.size(); ++d) {
    if (ref.sizes[d] < 0) mismatch("negative size in shape " + list_string(ref.sizes));
    if (ti.dynamism == ShapeDynamism::Static && ref.sizes[d] != ti.sizes[d]) {
      mismatch("expected shape " + list_string(ti.sizes) + ", got " + list_string(ref.sizes) + " (dimension " +
               std::to_string(d) + " is " + std::to_string(ref.sizes[d]) + ", the program needs exactly " +
               std::to_string(ti.sizes[d]) + ")");
    }
    if (ti.dynamism != ShapeDynamism::Static && ref.sizes[d] > ti.sizes[d]) {
      mismatch("dimension " + std::to_string(d) + " is " + std::to_string(ref.sizes[d]) +
               ", above its upper bound " + std::to_string(ti.sizes[d]) + " (shape " + list_string(ref.sizes) +
               ", bound " + list_string(ti.sizes) + ")");
    }
  }
  if (!ref.dim_order.empty() && !same_physical_layout(ref.sizes, ref.dim_order, ti.dim_order)) {
    mismatch("expected memory order " + list_string(ti.dim_order) + ", got " + list_string(ref.dim_order));
  }
  if (ref.dim_order.empty() && !t.is_contiguous_order()) {
    // A contiguous tensor where the method wants another order: fine when both give the same strides (a
    // channels-last [N, 1, H, W]). Checked without allocating: this runs on every call of such a method.
    uint8_t contiguous[kMaxTensorRank];
    std::iota(contiguous, contiguous + ref.sizes.size(), uint8_t{0});
    if (!same_physical_layout(ref.sizes, {contiguous, ref.sizes.size()}, ti.dim_order)) {
      mismatch("expected memory order " + list_string(ti.dim_order) + " (e.g. channels-last), got a contiguous tensor");
    }
  }
  if (!t.try_resize(ref.sizes)) mismatch("cannot take shape " + list_string(ref.sizes));
  const size_t nbytes = t.nbytes();
  if (ref.data == nullptr && nbytes != 0) mismatch("tensor data is null");
  if (planned_input[index]) {
    if (nbytes != 0 && t.data() != ref.data) std::memmove(t.data(), ref.data, nbytes);
  } else {
    // Bound in place: kernels would load elements through a misaligned pointer (undefined behaviour), and a
    // copy would hide the method's writes of the input from the caller. Refused instead.
    const size_t element = std::min<size_t>(element_size(ref.dtype), 8);
    if (nbytes != 0 && element > 1 && reinterpret_cast<uintptr_t>(ref.data) % element != 0) {
      mismatch("tensor data is not aligned to its " + std::to_string(element) + "-byte elements (" +
               std::string(scalar_type_name(ref.dtype)) + "); this input is not memory-planned and is used in "
               "place: pass memory aligned to " + std::to_string(element) + " bytes");
    }
    t.set_data(const_cast<void*>(ref.data));
  }
  input_set[index] = true;
}

void Method::Impl::check_output_index(size_t index) const {
  if (index >= meta.outputs.size()) {
    throw Error(ErrorKind::InvalidArgument,
                "the method has " + std::to_string(meta.outputs.size()) + " outputs, there is no output " + std::to_string(index),
                context());
  }
}

Value Method::Impl::output(size_t index) const {
  check_output_index(index);
  const EValue& v = values[plan->outputs()->Get(index)];
  switch (v.tag()) {
    case Tag::None: return std::monostate{};
    case Tag::Int: return v.to_int();
    case Tag::Double: return v.to_double();
    case Tag::Bool: return v.to_bool();
    case Tag::String: return std::string(v.to_string());
    case Tag::Tensor: {
      const Tensor& t = v.to_tensor();
      TensorRef r;
      r.dtype = t.dtype();
      r.sizes.assign(t.sizes().begin(), t.sizes().end());
      r.dim_order.assign(t.dim_order().begin(), t.dim_order().end());
      r.data = t.data();
      return r;
    }
    default:
      throw Error(ErrorKind::ExecutionError,
                  std::string("output ") + std::to_string(index) + " is a " + tag_name(v.tag()) + ", which cannot be returned",
                  context());
  }
}

TensorView Method::Impl::output_view(size_t index) const {
  check_output_index(index);
  const EValue& v = values[plan->outputs()->Get(index)];
  if (v.tag() != Tag::Tensor) {
    throw Error(ErrorKind::InvalidArgument,
                "output " + std::to_string(index) + " is " + expected_kind(v.tag()) + ", not a tensor (Method::output returns it)",
                context());
  }
  const Tensor& t = v.to_tensor();
  return TensorView{t.dtype(), t.sizes(), t.dim_order(), t.data()};
}

template <typename Fn>
void Method::Impl::for_each_written(const Instruction& ins, Fn&& fn) const {
  // A kernel writes its out argument (the last two slots: out and the returned value) and the arguments it
  // declares mutated, a move its target; the delegates write only their own outputs.
  if (ins.kind == Instruction::Kind::Kernel && !ins.args.empty()) {
    fn(ins.args.back());
    if (ins.args.size() >= 2) fn(ins.args[ins.args.size() - 2]);
    for (int m : ins.mutated_args) fn(ins.args[static_cast<size_t>(m)]);
  } else if (ins.kind == Instruction::Kind::Move) {
    fn(&values[static_cast<size_t>(ins.b)]);
  }
}

void Method::Impl::find_written_inputs() {
  // An unplanned input is bound to the caller's memory: is any instruction writing it?
  const auto* inputs = plan->inputs();
  written_inputs.assign(inputs->size(), false);
  for (size_t k = 0; k < inputs->size(); ++k) {
    const EValue* input = &values[static_cast<size_t>(inputs->Get(k))];
    if (!input->is_tensor() || planned_input[k]) continue;  // a planned input is a copy of the caller's
    for (const Instruction& ins : instructions) {
      bool writes = false;
      for_each_written(ins, [&](const EValue* v) { writes = writes || v == input; });
      if (writes) {
        written_inputs[k] = true;
        break;
      }
    }
  }
}

void Method::Impl::refuse_writes_to_constants() const {
  // Constants are read in place from the program's bytes (a read-only mapping of the file, or the caller's
  // buffer): an instruction that writes one would fault there, or change the caller's memory. Exporters never
  // make such a program; a corrupted one is refused here (found by fuzz_execute: an input that is a constant
  // had its data copied over the program's bytes). Views write nothing.
  auto refuse = [&](uint32_t pc, const Instruction& ins, const EValue* value) {
    ErrorContext c;
    c.instruction = pc;
    if (ins.name != nullptr) c.op = *ins.name;
    throw Error(ErrorKind::ProgramLoadError,
                "corrupt program: the instruction writes value " + std::to_string(value - values.data()) +
                    ", a constant tensor (constants are read-only)",
                c);
  };
  auto constant = [](const EValue* v) { return v->is_tensor() && v->to_tensor().is_constant(); };
  // An input is written by every execute (its data copied in).
  const auto* inputs = plan->inputs();
  for (size_t k = 0; k < inputs->size(); ++k) {
    const EValue* input = &values[static_cast<size_t>(inputs->Get(k))];
    if (!constant(input)) continue;
    ErrorContext c;
    c.input_index = static_cast<int64_t>(k);
    throw Error(ErrorKind::ProgramLoadError,
                "corrupt program: input " + std::to_string(k) + " is value " + std::to_string(inputs->Get(k)) +
                    ", a constant tensor (constants are read-only)",
                c);
  }
  for (uint32_t pc = 0; pc < instructions.size(); ++pc) {
    const Instruction& ins = instructions[pc];
    if (ins.kind == Instruction::Kind::Kernel && ins.view) continue;
    for_each_written(ins, [&](const EValue* v) {
      if (constant(v)) refuse(pc, ins, v);
    });
  }
}

void Method::Impl::refuse_overlapping_writes() const {
  // Every tensor argument of an instruction is live while it runs, so a memory plan never places two of them
  // in overlapping storage; a kernel's output shares storage with an argument only when the two are the same
  // storage (a tensor updated in place starts where it is read). A written tensor that overlaps an argument at
  // another address comes from a corrupt plan, and would make the kernel's copies overlap (found by
  // fuzz_execute: a memcpy between overlapping ranges); it is refused here, before anything runs.
  struct Range {
    const uint8_t* begin;
    const uint8_t* end;
    size_t value;
  };
  auto range_of = [&](const EValue* v, std::vector<Range>& out) {
    auto add = [&](const Tensor& t, size_t value) {
      if (t.data() == nullptr || t.capacity_numel() <= 0) return;
      const auto* b = static_cast<const uint8_t*>(t.data());
      out.push_back({b, b + static_cast<size_t>(t.capacity_numel()) * t.element_size(), value});
    };
    // Arguments outside the value table are constants made at load (fold_batch_norms), never written.
    if (!std::less_equal<const EValue*>()(values.data(), v) ||
        !std::less<const EValue*>()(v, values.data() + values.size())) {
      return;
    }
    const auto index = static_cast<size_t>(v - values.data());
    if (v->is_tensor()) {
      add(v->to_tensor(), index);
    } else if (v->tag() == Tag::ListTensor) {
      const TensorListRef list = v->to_tensor_list();
      for (size_t i = 0; i < list.size(); ++i) add(list[i], index);
    } else if (v->tag() == Tag::ListOptionalTensor) {
      const OptionalTensorListRef list = v->to_optional_tensor_list();
      for (size_t i = 0; i < list.size(); ++i) {
        if (const Tensor* t = list[i]) add(*t, index);
      }
    }
  };
  std::vector<Range> written;
  std::vector<Range> read;
  for (uint32_t pc = 0; pc < instructions.size(); ++pc) {
    const Instruction& ins = instructions[pc];
    if (ins.kind != Instruction::Kind::Kernel || ins.view) continue;
    written.clear();
    read.clear();
    for_each_written(ins, [&](const EValue* v) { range_of(v, written); });
    for (const EValue* v : ins.args) range_of(v, read);
    for (const Range& w : written) {
      for (const Range& r : read) {
        if (w.begin == r.begin || w.end <= r.begin || r.end <= w.begin) continue;
        ErrorContext c;
        c.instruction = pc;
        if (ins.name != nullptr) c.op = *ins.name;
        throw Error(ErrorKind::ProgramLoadError,
                    "corrupt memory plan: the instruction writes value " + std::to_string(w.value) + " (" +
                        std::to_string(w.end - w.begin) + " bytes), whose storage overlaps value " +
                        std::to_string(r.value) + "'s (" + std::to_string(r.end - r.begin) + " bytes) at " +
                        std::to_string(r.begin > w.begin ? r.begin - w.begin : w.begin - r.begin) +
                        " bytes from its start",
                    c);
      }
    }
  }
}

void Method::Impl::find_output_refusals(const runtime::UseAnalysis& refs) {
  // An output can take caller memory only when it is a tensor the method writes into storage of its own at
  // run time: planned memory and constants belong to the program, and redirecting a tensor another value
  // shares (an input, a second output, a view, a move target) would not redirect what the method writes.
  std::vector<bool> view_output(values.size(), false);
  for (const Instruction& ins : instructions) {
    if (ins.kind == Instruction::Kind::Kernel && ins.view && ins.args[2] >= values.data() &&
        ins.args[2] < values.data() + values.size()) {
      view_output[static_cast<size_t>(ins.args[2] - values.data())] = true;
    }
  }
  const auto* outputs = plan->outputs();
  const auto* inputs = plan->inputs();
  output_refusals.assign(outputs->size(), std::string());
  for (size_t i = 0; i < outputs->size(); ++i) {
    const auto v = static_cast<size_t>(outputs->Get(i));
    std::string& why = output_refusals[i];
    if (!values[v].is_tensor()) {
      why = std::string("is ") + tag_name(values[v].tag()) + ", not a tensor";
      continue;
    }
    if (values[v].to_tensor().is_constant()) {
      why = "is a constant of the program, which the method never writes";
      continue;
    }
    if (meta.outputs[i].tensor.memory_planned) {
      why = "is memory-planned: the method writes it into its own planned memory";
      continue;
    }
    for (size_t k = 0; k < inputs->size() && why.empty(); ++k) {
      if (static_cast<size_t>(inputs->Get(k)) == v) why = "is method input " + std::to_string(k) + " returned as is (aliased)";
    }
    for (size_t k = 0; k < outputs->size() && why.empty(); ++k) {
      if (k != i && static_cast<size_t>(outputs->Get(k)) == v) {
        why = "is the same tensor as output " + std::to_string(k) + " (aliased)";
      }
    }
    if (!why.empty()) continue;
    if (view_output[v]) {
      why = "is a view of another tensor of the method (aliased)";
    } else if (refs.moved_into_by[v] >= 0) {
      why = "is the target of the move at instruction " + std::to_string(refs.moved_into_by[v]) +
            " (aliased: it holds another value when the method runs)";
    } else if (refs.tensor_lists_well_formed && refs.by_value(v).empty()) {
      why = "is used by no instruction (nothing would write the caller's memory)";
    }
  }
}

void Method::Impl::set_output_buffer(size_t index, void* data, size_t nbytes) {
  if (index >= meta.outputs.size()) {
    throw Error(ErrorKind::InvalidArgument,
                "the method has " + std::to_string(meta.outputs.size()) + " outputs, there is no output " + std::to_string(index),
                context());
  }
  const std::string which = "output " + std::to_string(index);
  if (!output_refusals[index].empty()) {
    throw Error(ErrorKind::InvalidArgument,
                which + " " + output_refusals[index] + ", so it cannot be bound to caller memory", context());
  }
  const size_t needed = meta.outputs[index].tensor.nbytes;
  if (nbytes < needed) {
    throw Error(ErrorKind::InvalidArgument,
                which + " needs " + std::to_string(needed) + " bytes, the buffer has " + std::to_string(nbytes), context());
  }
  if (data == nullptr && needed != 0) throw Error(ErrorKind::InvalidArgument, which + ": the buffer is null", context());
  values[plan->outputs()->Get(index)].to_tensor().set_data(data);
}

}  // namespace etnp
