// The instruction loop: everything was decided at load, so each step is a switch on a decoded instruction.
#include "core/profiling.h"
#include "etnp/program.h"
#include "runtime/method_impl.h"
#include "runtime/probes.h"

namespace etnp {

using runtime::Instruction;

namespace {

void check_tensor_storage(const Instruction& ins) {
  auto check = [](const EValue* v) {
    if (v == nullptr || !v->is_tensor()) return;
    const Tensor& t = v->to_tensor();
    if (t.data() == nullptr && t.numel() > 0) {
      throw Error(ErrorKind::ExecutionError, "a tensor argument has no storage (it was freed, or is a view that was never "
                                             "created): the program is malformed");
    }
  };
  for (size_t k = 0; k < ins.args.size(); ++k) {
    if (static_cast<int32_t>(k) == ins.skip_check_arg) continue;
    const EValue* v = ins.args[k];
    check(v);
    if (v->tag() == Tag::ListTensor) {
      const auto list = v->to_tensor_list();
      for (size_t i = 0; i < list.size(); ++i) {
        if (list[i].data() == nullptr && list[i].numel() > 0) {
          throw Error(ErrorKind::ExecutionError, "a tensor in a list argument has no storage: the program is malformed");
        }
      }
    }
  }
}

}  // namespace

void Method::Impl::run() {
  ETNP_PROBE(execute_begin, meta.name.c_str());
  try {
    run_instructions();
  } catch (const Error& e) {
    ETNP_PROBE(execute_end, meta.name.c_str(), error_kind_name(e.kind()));
    throw;
  }
  ETNP_PROBE(execute_end, meta.name.c_str(), "");
}

void Method::Impl::run_instructions() {
  for (size_t i = 0; i < input_set.size(); ++i) {
    if (!input_set[i]) {
      ErrorContext c = context();
      c.input_index = static_cast<int64_t>(i);
      throw Error(ErrorKind::InvalidArgument, "input " + std::to_string(i) + " was not set", c);
    }
  }
  const size_t n = instructions.size();
  size_t pc = 0;
  // ResourceLimits::max_instructions_per_execute (0: none); counted down so that the check is one compare.
  const uint64_t budget = program->options.limits.max_instructions_per_execute;
  uint64_t left = budget == 0 ? UINT64_MAX : budget;
  struct RestoreFreed {
    std::vector<std::pair<Tensor*, void*>>& freed;
    ~RestoreFreed() {
      for (auto& [t, data] : freed) t->set_data(data);
    }
  } restore_freed{freed_storage};
  std::vector<ProfileEvent> delegate_parts;  // of the delegate call running, when profiling
  struct StopDelegateParts {
    ~StopDelegateParts() { core::set_delegate_part_sink(nullptr); }  // a delegate that threw leaves it set
  } stop_delegate_parts;
  try {
    while (pc < n) {
      if (left-- == 0) {  // the catch below names the method and instruction
        throw Error(ErrorKind::ExecutionError, "the execute ran " + std::to_string(budget) +
                                                   " instructions, the limit max_instructions_per_execute, and had "
                                                   "not finished (do its jumps loop?)");
      }
      const Instruction& ins = instructions[pc];
      const uint64_t start = profiling ? profile_clock_ns() : 0;
      size_t next = pc + 1;
      switch (ins.kind) {
        case Instruction::Kind::Kernel:
          if (ins.check_storage) check_tensor_storage(ins);
          kernel_context.set_state(ins.state);
          ins.fn(kernel_context, ins.args);
          break;
        case Instruction::Kind::Delegate:
          if (ins.check_storage) check_tensor_storage(ins);
          if (profiling) {
            delegate_parts.clear();
            core::set_delegate_part_sink(&delegate_parts);
          }
          ETNP_PROBE(delegate_begin, ins.name->c_str(), ins.a, meta.name.c_str());
          ins.backend->execute(*ins.delegate, ins.args);
          ETNP_PROBE(delegate_end, ins.name->c_str(), ins.a, meta.name.c_str());
          core::set_delegate_part_sink(nullptr);
          break;
        case Instruction::Kind::Move:
          values[ins.b] = values[ins.a];
          break;
        case Instruction::Kind::JumpFalse: {
          const EValue& cond = values[ins.a];
          bool truth = false;
          if (cond.is_bool()) {
            truth = cond.to_bool();
          } else if (cond.is_tensor()) {
            const Tensor& t = cond.to_tensor();
            if (t.dtype() != ScalarType::Bool) {
              throw Error(ErrorKind::ExecutionError, "jump condition is a " +
                                                         std::string(scalar_type_name(t.dtype())) + " tensor, not bool");
            }
            truth = true;
            if (t.data() == nullptr && t.numel() > 0) throw Error(ErrorKind::ExecutionError, "jump condition tensor has no storage");
            const auto* p = t.data_as<const uint8_t>();
            for (int64_t k = 0; k < t.numel() && truth; ++k) truth = p[k] != 0;
          } else {
            throw Error(ErrorKind::ExecutionError, std::string("jump condition is a ") + tag_name(cond.tag()));
          }
          if (!truth) next = static_cast<size_t>(ins.b);
          break;
        }
        case Instruction::Kind::Free:
          values[ins.a].to_tensor().set_data(nullptr);
          break;
        case Instruction::Kind::Folded:
          break;
      }
      if (profiling) {
        ProfileEvent ev;
        switch (ins.kind) {
          case Instruction::Kind::Kernel:
          case Instruction::Kind::Folded:
            ev.name = *ins.name;
            ev.folded = ins.kind == Instruction::Kind::Folded;
            break;
          case Instruction::Kind::Delegate: ev.name = "DELEGATE_CALL " + *ins.name; break;
          case Instruction::Kind::Move: ev.name = "MOVE_CALL"; break;
          case Instruction::Kind::JumpFalse: ev.name = "JF_CALL"; break;
          case Instruction::Kind::Free: ev.name = "FREE_CALL"; break;
        }
        ev.instruction = static_cast<int64_t>(pc);
        ev.start_ns = start;
        ev.end_ns = profile_clock_ns();
        events.push_back(std::move(ev));
        if (ins.kind == Instruction::Kind::Delegate) {
          for (ProfileEvent& part : delegate_parts) {
            part.instruction = static_cast<int64_t>(pc);
            events.push_back(std::move(part));
          }
        }
      }
      pc = next;
    }
  } catch (const Error& e) {
    ErrorContext c = context();
    c.instruction = static_cast<int64_t>(pc);
    if (pc < n) {
      const Instruction& ins = instructions[pc];
      if (ins.kind == Instruction::Kind::Kernel) c.op = *ins.name;
      if (ins.kind == Instruction::Kind::Delegate) c.backend = *ins.name;
    }
    throw Error(ErrorKind::ExecutionError, e.detail(), e.context()).with_context(c);
  } catch (const std::bad_alloc&) {
    ErrorContext c = context();
    c.instruction = static_cast<int64_t>(pc);
    throw Error(ErrorKind::ExecutionError, "out of memory", c);
  }
}

}  // namespace etnp
