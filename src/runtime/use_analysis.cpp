#include "runtime/use_analysis.h"

#include <algorithm>

namespace etnp::runtime {

ByteRange bytes_of(const Tensor& t) {
  const auto begin = reinterpret_cast<uintptr_t>(t.data());
  return {begin, begin + static_cast<uintptr_t>(t.capacity_numel()) * t.element_size()};
}

UseAnalysis::UseAnalysis(const std::vector<Instruction>& instructions, const std::vector<EValue>& values,
                         std::span<const Tensor> tensors, const format::fb::ExecutionPlan& plan)
    : uses(values.size(), 0), writes(values.size(), 0), io(values.size(), false),
      freed_or_moved(values.size(), false), moved_into_by(values.size(), -1), produced(values.size(), false),
      tensors_(tensors), value_of_tensor_(tensors.size(), kNoValue) {
  auto in_table = [&](const EValue* v) { return v >= values.data() && v < values.data() + values.size(); };
  auto index = [&](const EValue* v) { return static_cast<size_t>(v - values.data()); };
  // Each tensor's value slot (the first, where two values hold one tensor).
  for (size_t v = 0; v < values.size(); ++v) {
    if (!values[v].is_tensor()) continue;
    const size_t at = index_in_tensors(&values[v].to_tensor());
    if (at < tensors_.size() && value_of_tensor_[at] == kNoValue) value_of_tensor_[at] = static_cast<uint32_t>(v);
  }
  // by_instr is filled in order; by_value's (value, instruction) pairs are counted, then placed.
  std::vector<uint32_t> last_pc(values.size(), kNoValue), value_counts(values.size(), 0);
  std::vector<std::pair<uint32_t, uint32_t>> value_pcs;
  instr_begin_.assign(instructions.size() + 1, 0);
  for (uint32_t pc = 0; pc < instructions.size(); ++pc) {
    const Instruction& ins = instructions[pc];
    for (const EValue* v : ins.args) {
      if (in_table(v)) ++uses[index(v)];
    }
    switch (ins.kind) {
      case Instruction::Kind::Kernel:
        if (!ins.args.empty() && in_table(ins.args.back())) ++writes[index(ins.args.back())];
        for (int m : ins.mutated_args) {
          if (in_table(ins.args[static_cast<size_t>(m)])) ++writes[index(ins.args[static_cast<size_t>(m)])];
        }
        break;
      case Instruction::Kind::Delegate:
        for (const EValue* v : ins.args) {
          if (in_table(v)) ++writes[index(v)];
        }
        break;
      case Instruction::Kind::Move:
        ++uses[ins.a];
        ++uses[ins.b];
        ++writes[ins.b];
        if (moved_into_by[ins.b] < 0) moved_into_by[ins.b] = static_cast<int32_t>(pc);
        break;
      case Instruction::Kind::Free:
        ++uses[ins.a];
        ++writes[ins.a];
        break;
      case Instruction::Kind::JumpFalse: ++uses[ins.a]; break;
      case Instruction::Kind::Folded: break;
    }

    // The kernel's out slots: the arguments before the return slot that it repeats, one tensor (out, out) or the
    // items of a returned tensor list (out0, out1, [out0, out1]: max pooling's values and indices).
    size_t outs = 0;
    if (ins.kind == Instruction::Kind::Kernel && ins.args.size() >= 2) {
      const EValue* ret = ins.args.back();
      if (ret->is_tensor() && ins.args[ins.args.size() - 2] == ret) {
        outs = 1;
      } else if (ret->tag() == Tag::ListTensor) {
        try {
          const TensorListRef items = ret->to_tensor_list();
          const size_t k = items.size();
          bool repeats = k > 0 && k + 1 < ins.args.size();
          for (size_t i = 0; repeats && i < k; ++i) {
            const EValue* slot = ins.args[ins.args.size() - 1 - k + i];
            repeats = slot->is_tensor() && &slot->to_tensor() == &items[i];
          }
          if (repeats) outs = k;
        } catch (const Error&) {
          // a list item that is not a tensor: reported below
        }
      }
    }
    auto add = [&](const Tensor* t) {
      const uint32_t v = value_of(t);
      if (v == kNoValue) return;  // a constant made at load
      if (last_pc[v] == kNoValue && outs > 0) {
        // Written whole when it is one of the out slots and no other argument (an input) holds it.
        const auto first_out = ins.args.end() - 1 - static_cast<std::ptrdiff_t>(outs);
        const auto holds = [t](const EValue* v) {
          if (v->is_tensor()) return &v->to_tensor() == t;
          if (v->tag() == Tag::ListTensor) {
            const TensorListRef items = v->to_tensor_list();
            for (size_t k = 0; k < items.size(); ++k) {
              if (&items[k] == t) return true;
            }
          } else if (v->tag() == Tag::ListOptionalTensor) {
            const OptionalTensorListRef items = v->to_optional_tensor_list();
            for (size_t k = 0; k < items.size(); ++k) {
              if (items[k] == t) return true;
            }
          }
          return false;
        };
        const auto in_outs = std::count_if(first_out, ins.args.end() - 1, [t](const EValue* v) {
          return v->is_tensor() && &v->to_tensor() == t;
        });
        produced[v] = in_outs == 1 && std::none_of(ins.args.begin(), first_out, holds);
      }
      if (last_pc[v] != pc) {
        last_pc[v] = pc;
        ++value_counts[v];
        value_pcs.emplace_back(v, pc);
      }
      instr_refs_.push_back(v);
    };
    try {
      switch (ins.kind) {
        case Instruction::Kind::Move:
        case Instruction::Kind::Free:
          for (int32_t v : {ins.a, ins.kind == Instruction::Kind::Move ? ins.b : ins.a}) {
            if (values[static_cast<size_t>(v)].is_tensor()) {
              freed_or_moved[static_cast<size_t>(v)] = true;
              add(&values[static_cast<size_t>(v)].to_tensor());
            }
          }
          break;
        case Instruction::Kind::JumpFalse: has_jumps = true; break;
        default:
          for (const EValue* v : ins.args) {
            if (v->is_tensor()) {
              add(&v->to_tensor());
            } else if (v->tag() == Tag::ListTensor) {
              const TensorListRef list = v->to_tensor_list();
              for (size_t k = 0; k < list.size(); ++k) add(&list[k]);
            } else if (v->tag() == Tag::ListOptionalTensor) {
              const OptionalTensorListRef list = v->to_optional_tensor_list();
              for (size_t k = 0; k < list.size(); ++k) {
                if (Tensor* t = list[k]) add(t);
              }
            }
          }
      }
    } catch (const Error&) {
      tensor_lists_well_formed = false;  // a list item that is not a tensor
    }
    instr_begin_[pc + 1] = static_cast<uint32_t>(instr_refs_.size());
  }
  value_begin_.assign(values.size() + 1, 0);
  for (size_t v = 0; v < values.size(); ++v) value_begin_[v + 1] = value_begin_[v] + value_counts[v];
  value_refs_.resize(value_pcs.size());
  for (const auto& [v, pc] : value_pcs) value_refs_[value_begin_[v + 1] - value_counts[v]--] = pc;
  for (const auto* list : {plan.inputs(), plan.outputs()}) {
    for (int32_t v : *list) {
      ++uses[v];
      ++writes[v];
      io[static_cast<size_t>(v)] = true;
    }
  }
}

size_t UseAnalysis::index_in_tensors(const Tensor* t) const {
  const std::less<const Tensor*> before;
  if (before(t, tensors_.data()) || !before(t, tensors_.data() + tensors_.size())) return tensors_.size();
  return static_cast<size_t>(t - tensors_.data());
}

uint32_t UseAnalysis::value_of(const Tensor* t) const {
  // Outside the array: a tensor made at load (folded constants, views), in no value slot.
  const size_t at = index_in_tensors(t);
  return at < tensors_.size() ? value_of_tensor_[at] : kNoValue;
}

void UseAnalysis::values_at(const EValue* arg, std::vector<uint32_t>& into) const {
  auto add = [&](const Tensor& t) {
    if (const uint32_t v = value_of(&t); v != kNoValue) into.push_back(v);
  };
  if (arg->is_tensor()) {
    add(arg->to_tensor());
  } else if (arg->tag() == Tag::ListTensor) {
    const TensorListRef list = arg->to_tensor_list();
    for (size_t k = 0; k < list.size(); ++k) add(list[k]);
  }
}

bool UseAnalysis::nothing_reads_after(const std::vector<EValue>& values, uint32_t pc, const ByteRange& range,
                                      uint32_t except) const {
  for (uint32_t v = 0; v + 1 < value_begin_.size(); ++v) {
    const std::span<const uint32_t> refs = by_value(v);
    if (v == except || refs.empty() || refs.back() <= pc) continue;
    const Tensor& t = values[v].to_tensor();
    if (t.data() == nullptr || !bytes_of(t).overlaps(range)) continue;
    if (refs.front() <= pc || !produced[v]) return false;
  }
  return true;
}

bool UseAnalysis::bytes_untouched(const std::vector<EValue>& values, uint32_t from, uint32_t to,
                                  const ByteRange& range, std::initializer_list<uint32_t> allowed) const {
  for (uint32_t pc = from; pc <= to; ++pc) {
    for (uint32_t v : by_instr(pc)) {
      if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) continue;
      const Tensor& t = values[v].to_tensor();
      if (t.data() == nullptr && t.capacity_numel() > 0) return false;
      if (bytes_of(t).overlaps(range)) return false;
    }
  }
  return true;
}

bool UseAnalysis::live_bytes(const std::vector<EValue>& values, uint32_t from, uint32_t to,
                             std::initializer_list<uint32_t> except, std::vector<ByteRange>& into) const {
  if (has_jumps || !tensor_lists_well_formed) return false;
  for (uint32_t v = 0; v + 1 < value_begin_.size(); ++v) {
    if (!values[v].is_tensor() || std::find(except.begin(), except.end(), v) != except.end()) continue;
    const std::span<const uint32_t> refs = by_value(v);
    const bool throughout = io[v] || freed_or_moved[v] || (!refs.empty() && !produced[v]);
    if (!throughout && (refs.empty() || refs.front() > to || refs.back() < from)) continue;
    const Tensor& t = values[v].to_tensor();
    if (t.data() == nullptr) {
      if (t.capacity_numel() > 0) return false;
      continue;
    }
    into.push_back(bytes_of(t));
  }
  return true;
}

}  // namespace etnp::runtime
