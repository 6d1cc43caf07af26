// Loading a method: the value table (tensors pointed at arenas, constants, external data or storage the method
// keeps), the decoded instructions with their kernels resolved, the passes of method_passes.cpp, the kernels'
// prepare hooks and the delegates.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "etnp/program.h"
#include "compute/large_pages.h"
#include "compute/weight_cache.h"
#include "core/printable.h"
#include "etnp/threadpool.h"
#include "runtime/method_impl.h"
#include "runtime/registry.h"
#include "runtime/use_analysis.h"
#include "runtime/verdict.h"

namespace etnp {

namespace fb = format::fb;
using runtime::Instruction;
using runtime::list_string;

namespace {

/// Zero-filled storage the method keeps (compute::ZeroedBuffer: from 2 MiB on huge pages), or ProgramLoadError.
/// MethodWorkspace::kReadPastBytes more follow the `nbytes`, so that delegates read its tensors in place.
compute::ZeroedBuffer allocate_zeroed(size_t nbytes, const std::string& what) {
  try {
    return compute::ZeroedBuffer(nbytes + MethodWorkspace::kReadPastBytes);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::ProgramLoadError, "cannot allocate " + std::to_string(nbytes) + " bytes for " + what);
  }
}

}  // namespace

namespace runtime {

uint8_t* DelegateWorkspace::shared_scratch(size_t bytes) {
  if (bytes > scratch_bytes_ || !scratch_) {
    scratch_ = compute::ZeroedBuffer();  // the old one goes first: the two are never held together
    scratch_ = compute::ZeroedBuffer(bytes + kReadPastBytes);
    scratch_bytes_ = bytes;
  }
  return scratch_.data();
}

bool DelegateWorkspace::holds(const void* data, size_t bytes) const {
  const auto p = reinterpret_cast<uintptr_t>(data);
  auto within = [&](const compute::ZeroedBuffer& b) {
    const auto begin = reinterpret_cast<uintptr_t>(b.data());
    const uintptr_t limit = begin + b.size() - kReadPastBytes;  // every buffer here has kReadPastBytes after it
    return p >= begin && p <= limit && bytes <= limit - p;
  };
  return std::ranges::any_of(arenas_, within) || std::ranges::any_of(owned_, within) || (scratch_ && within(scratch_));
}

}  // namespace runtime

ErrorContext Method::Impl::context() const {
  ErrorContext c;
  c.method = meta.name;
  return c;
}

void Method::Impl::load() {
  try {
    build_values();
    build_instructions();  // resolves kernels first: a missing operator is reported before delegate work
    fold_constants();      // before the prepare hooks, so that they see what became constant
    {
      const runtime::UseAnalysis folded(instructions, values, tensors, *plan);
      elide_copies(folded);
      find_output_refusals(folded);
    }
    find_written_inputs();  // after elide_copies, which may rewrite the instructions
    refuse_writes_to_constants();
    refuse_overlapping_writes();
    prepare_kernels();
    pair_channels_last();
    check_memory_limit(0, "packing its kernels' weights");
    mark_storage_checks();
    build_delegates();
    check_memory_limit(0, "building its delegates");
    release_consumed_file_pages();
    compute::trim_large_pages();  // the packing is done: the last chunk's unwritten end need not stay resident
  } catch (const Error& e) {
    throw e.with_context(context());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::ProgramLoadError, "out of memory while loading the method", context());
  }
  input_set.assign(meta.inputs.size(), false);
  for (size_t i = 0; i < meta.inputs.size(); ++i) {
    if (meta.inputs[i].tag == Tag::None) input_set[i] = true;
  }
  kernel_context = KernelContext(&ThreadPool::global(), nullptr);
}

void Method::Impl::check_memory_limit(uint64_t more, const std::string& what) const {
  const uint64_t limit = program->options.limits.max_method_bytes;
  // What it holds alone, and the packings it shares through the weight cache, each once.
  uint64_t held = arena_bytes + load_time_bytes();
  std::set<const void*> shared;
  for (const auto& state : kernel_states) {
    const auto [packing, bytes] = state ? state->shared_packing() : std::pair<const void*, size_t>{};
    if (packing != nullptr && shared.insert(packing).second) held += bytes;
  }
  for (const auto& delegate : delegates) {
    if (!delegate) continue;
    for (const auto& [packing, bytes] : delegate->shared_packings()) {
      if (shared.insert(packing).second) held += bytes;
    }
  }
  if (limit == 0 || (more <= limit && held <= limit - more)) return;
  const std::string bound = "more than the limit max_method_bytes = " + std::to_string(limit);
  if (more == 0) {
    throw Error(ErrorKind::ProgramLoadError,
                "the method holds " + std::to_string(held) + " bytes after " + what + ", " + bound);
  }
  throw Error(ErrorKind::ProgramLoadError, what + " needs " + std::to_string(more) + " bytes, and the method holds " +
                                               std::to_string(held) + " already: " + bound);
}

uint8_t* Method::Impl::own(size_t nbytes, const std::string& what) {
  check_memory_limit(nbytes, what);
  owned_buffers.push_back(allocate_zeroed(nbytes, what));
  owned_bytes += nbytes;
  return owned_buffers.back().data();
}

size_t Method::Impl::load_time_bytes() const {
  size_t total = owned_bytes;
  for (const auto& state : kernel_states) {
    if (state) total += state->bytes();
  }
  total += delegate_workspace.shared_scratch_bytes();
  for (const auto& delegate : delegates) {
    if (delegate) total += delegate->bytes();
  }
  return total;
}

void Method::Impl::build_values() {
  const auto* fvalues = plan->values();
  const size_t n = fvalues->size();
  values.assign(n, EValue());
  tensor_of_value.assign(n, -1);

  // Planned arenas, zero-filled: mutable buffers without initial data (e.g. a KV cache) start at zero. Their sum
  // is held to the memory limit before any is allocated.
  if (const auto* sizes = plan->non_const_buffer_sizes(); sizes != nullptr) {
    uint64_t planned = 0;
    for (size_t i = 1; i < sizes->size(); ++i) {
      if (__builtin_add_overflow(planned, static_cast<uint64_t>(sizes->Get(i)), &planned)) planned = UINT64_MAX;
    }
    check_memory_limit(planned, "its memory plan");
    arena_bytes = planned;
    for (size_t i = 1; i < sizes->size(); ++i) {
      arenas.push_back(allocate_zeroed(static_cast<size_t>(sizes->Get(i)), "planned buffer " + std::to_string(i)));
    }
  }

  // Outputs of et_view alias their input and need no storage of their own; nor do the inputs (the caller's).
  // (Indices were checked by PteFile::validate_plan.)
  std::vector<bool> bound_elsewhere(n, false);
  if (const auto* ops = plan->operators()) {
    for (const auto* chain : *plan->chains()) {
      for (const auto* instr : *chain->instructions()) {
        if (instr->instr_args_type() != fb::InstructionArguments::KernelCall) continue;
        const auto* k = instr->instr_args_as_KernelCall();
        const auto* op = ops->Get(k->op_index());
        if (runtime::is_view_operator(*op) && k->args()->size() >= 3) {
          bound_elsewhere[static_cast<size_t>(k->args()->Get(2))] = true;
        }
      }
    }
  }
  for (int32_t input : *plan->inputs()) bound_elsewhere[static_cast<size_t>(input)] = true;

  size_t num_tensors = 0, num_list_items = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto* v = fvalues->Get(i);
    if (v->val_type() == fb::KernelTypes::Tensor) ++num_tensors;
    if (v->val_type() == fb::KernelTypes::IntList) num_list_items += v->val_as_IntList()->items()->size();
    if (v->val_type() == fb::KernelTypes::TensorList) num_list_items += v->val_as_TensorList()->items()->size();
    if (v->val_type() == fb::KernelTypes::OptionalTensorList) num_list_items += v->val_as_OptionalTensorList()->items()->size();
  }
  tensors.reserve(num_tensors);
  list_items.reserve(num_list_items);

  const NamedDataMap* external = program->external_data.get();
  for (size_t i = 0; i < n; ++i) {
    const auto* v = fvalues->Get(i);
    const auto where = [i] { return "value " + std::to_string(i); };  // (made only for a message)
    switch (v->val_type()) {
      case fb::KernelTypes::Null: break;
      case fb::KernelTypes::Int: values[i] = EValue::from_int(v->val_as_Int()->int_val()); break;
      case fb::KernelTypes::Double: values[i] = EValue::from_double(v->val_as_Double()->double_val()); break;
      case fb::KernelTypes::Bool: values[i] = EValue::from_bool(v->val_as_Bool()->bool_val()); break;
      case fb::KernelTypes::String: values[i] = EValue::from_string(v->val_as_String()->string_val()->string_view()); break;
      case fb::KernelTypes::DoubleList: {
        const auto* items = v->val_as_DoubleList()->items();
        values[i] = EValue::from_double_list({items->data(), items->size()});
        break;
      }
      case fb::KernelTypes::BoolList: {
        const auto* items = v->val_as_BoolList()->items();
        values[i] = EValue::from_bool_list({reinterpret_cast<const uint8_t*>(items->data()), items->size()});
        break;
      }
      case fb::KernelTypes::IntList:
      case fb::KernelTypes::TensorList:
      case fb::KernelTypes::OptionalTensorList: {
        const size_t start = list_items.size();
        if (v->val_type() == fb::KernelTypes::IntList) {
          for (int64_t item : *v->val_as_IntList()->items()) list_items.push_back(&values[item]);
          values[i] = EValue::from_int_list(std::span<EValue* const>(list_items).subspan(start));
        } else if (v->val_type() == fb::KernelTypes::TensorList) {
          for (int32_t item : *v->val_as_TensorList()->items()) list_items.push_back(&values[item]);
          values[i] = EValue::from_tensor_list(std::span<EValue* const>(list_items).subspan(start));
        } else {
          for (int32_t item : *v->val_as_OptionalTensorList()->items()) {
            list_items.push_back(item < 0 ? nullptr : &values[item]);
          }
          values[i] = EValue::from_optional_tensor_list(std::span<EValue* const>(list_items).subspan(start));
        }
        break;
      }
      case fb::KernelTypes::Tensor: {
        const auto* t = v->val_as_Tensor();
        const size_t nbytes = format::serialized_tensor_nbytes(*t);
        if (const uint64_t bound = program->options.limits.max_tensor_bytes; bound != 0 && nbytes > bound) {
          throw Error(ErrorKind::ProgramLoadError, where() + " is a tensor of " + std::to_string(nbytes) +
                                                       " bytes, more than the limit max_tensor_bytes = " +
                                                       std::to_string(bound));
        }
        int64_t sizes_buffer[kMaxTensorRank];  // (the rank was checked by PteFile::validate_plan)
        const std::span<int64_t> sizes(sizes_buffer, t->sizes()->size());
        std::copy(t->sizes()->begin(), t->sizes()->end(), sizes.begin());
        std::span<const uint8_t> dim_order(t->dim_order()->data(), t->dim_order()->size());
        const auto dtype = static_cast<ScalarType>(t->scalar_type());
        tensors.emplace_back(dtype, sizes, dim_order, nullptr, static_cast<ShapeDynamism>(t->shape_dynamism()));
        Tensor& tensor = tensors.back();
        tensor_of_value[i] = static_cast<int32_t>(tensors.size() - 1);
        const auto* extra = t->extra_tensor_info();
        const bool is_external = extra != nullptr && extra->location() == fb::TensorDataLocation::EXTERNAL;
        std::span<const uint8_t> external_bytes;
        if (is_external) {
          const std::string key = extra->fully_qualified_name()->str();
          if (external == nullptr) {
            throw Error(ErrorKind::ProgramLoadError,
                        "tensor " + quoted_name(key) + " is stored in external data, but no external data (.ptd) was provided; "
                        "load the program with its .ptd file");
          }
          auto bytes = external->get(key);
          if (!bytes) {
            throw Error(ErrorKind::ProgramLoadError,
                        "tensor " + quoted_name(key) + " is not in the external data (" + external->describe() + ")");
          }
          if (auto layout = external->layout(key)) {
            const bool same_order = layout->dim_order.empty() ||
                                    std::equal(layout->dim_order.begin(), layout->dim_order.end(), dim_order.begin(),
                                               dim_order.end());
            if (layout->dtype != dtype || !std::ranges::equal(layout->sizes, sizes) || !same_order) {
              throw Error(ErrorKind::ProgramLoadError,
                          "external tensor " + quoted_name(key) + " is " + std::string(scalar_type_name(layout->dtype)) +
                              list_string(layout->sizes) + " in " + external->describe() + ", the program expects " +
                              std::string(scalar_type_name(dtype)) + list_string(sizes));
            }
          }
          if (bytes->size() < nbytes) {
            throw Error(ErrorKind::ProgramLoadError, "external tensor " + quoted_name(key) + " holds " +
                                                         std::to_string(bytes->size()) + " bytes, the program needs " +
                                                         std::to_string(nbytes));
          }
          external_bytes = bytes->first(nbytes);
        }
        if (const auto* a = t->allocation_info(); a != nullptr) {
          const uint64_t offset = uint64_t(a->memory_offset_low()) | (uint64_t(a->memory_offset_high()) << 32);
          uint8_t* data = arenas[a->memory_id() - 1].data() + offset;
          tensor.set_data(data);
          if (is_external) {
            std::memcpy(data, external_bytes.data(), nbytes);
          } else if (t->data_buffer_idx() > 0) {
            auto init = program->file->mutable_initial_data(t->data_buffer_idx(), nbytes);
            std::memcpy(data, init.data(), nbytes);
          }
        } else if (is_external || t->data_buffer_idx() > 0) {
          // Constants are read in place from the file; kernels never write their inputs. Data that a damaged
          // file places off its element alignment is copied once, so no kernel reads misaligned elements.
          const uint8_t* bytes = is_external ? external_bytes.data()
                                             : program->file->constant(t->data_buffer_idx(), nbytes).data();
          if (reinterpret_cast<uintptr_t>(bytes) % element_size(dtype) != 0) {
            uint8_t* copy = own(nbytes, where());
            std::memcpy(copy, bytes, nbytes);
            bytes = copy;
          }
          tensor.set_data(const_cast<uint8_t*>(bytes));
          tensor.set_constant(true);
        } else if (!bound_elsewhere[i]) {
          // Unplanned and not bound by the caller: the method keeps storage for it.
          tensor.set_data(own(nbytes, where()));
        }
        values[i] = EValue::from_tensor(&tensor);
        break;
      }
      default:
        throw Error(ErrorKind::ProgramLoadError, where() + " has an unsupported type");
    }
  }

  planned_input.assign(plan->inputs()->size(), false);
  for (size_t k = 0; k < plan->inputs()->size(); ++k) {
    const auto* v = fvalues->Get(plan->inputs()->Get(k));
    if (v->val_type() == fb::KernelTypes::Tensor) {
      const auto* t = v->val_as_Tensor();
      planned_input[k] = t->allocation_info() != nullptr || t->data_buffer_idx() != 0;
    }
  }
}

void Method::Impl::build_instructions() {
  const auto* chains = plan->chains();
  const auto* ops = plan->operators();
  const auto& registry = runtime::kernel_registry();

  // Resolve every operator once; report all missing ones together.
  std::vector<const KernelEntry*> entries;
  std::vector<std::string> op_names;
  std::vector<std::string> missing;
  if (ops != nullptr) {
    for (const auto* op : *ops) {
      op_names.push_back(runtime::operator_name(*op));
      entries.push_back(registry.find(op_names.back()));
    }
  }
  // Only operators that instructions call count as missing.
  std::vector<bool> used(entries.size(), false);
  size_t num_args = 0;
  for (const auto* chain : *chains) {
    for (const auto* instr : *chain->instructions()) {
      if (instr->instr_args_type() == fb::InstructionArguments::KernelCall) {
        used[instr->instr_args_as_KernelCall()->op_index()] = true;
        num_args += instr->instr_args_as_KernelCall()->args()->size();
      } else if (instr->instr_args_type() == fb::InstructionArguments::DelegateCall) {
        num_args += instr->instr_args_as_DelegateCall()->args()->size();
      }
    }
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (used[i] && entries[i] == nullptr &&
        std::find(missing.begin(), missing.end(), op_names[i]) == missing.end()) {
      missing.push_back(op_names[i]);
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + printable(m);
    ErrorContext c = context();
    c.op = missing.front();
    throw Error(ErrorKind::OperatorNotFound,
                std::to_string(missing.size()) + " operator" + (missing.size() == 1 ? " is" : "s are") +
                    " not available in this runtime: " + list,
                c);
  }
  for (const auto& name : op_names) names.push_back(name);

  if (chains->size() != 1) {
    throw Error(ErrorKind::ProgramLoadError,
                "the method has " + std::to_string(chains->size()) + " chains; only single-chain methods are supported");
  }
  arg_storage.reserve(num_args);
  const auto* fdelegates = plan->delegates();
  int64_t pc = 0;
  for (const auto* instr : *chains->Get(0)->instructions()) {
    Instruction ins;
    ErrorContext where = context();
    where.instruction = pc;
    auto bind_args = [&](const flatbuffers::Vector<int32_t>* args) {
      const size_t start = arg_storage.size();
      for (int32_t a : *args) arg_storage.push_back(&values[a]);
      return std::span<EValue* const>(arg_storage).subspan(start, args->size());
    };
    switch (instr->instr_args_type()) {
      case fb::InstructionArguments::KernelCall: {
        const auto* k = instr->instr_args_as_KernelCall();
        const KernelEntry* entry = entries[k->op_index()];
        ins.kind = Instruction::Kind::Kernel;
        ins.fn = entry->fn;
        ins.name = &names[k->op_index()];
        ins.args = bind_args(k->args());
        ins.view = runtime::is_view_operator(*plan->operators()->Get(k->op_index())) && ins.args.size() >= 3;
        where.op = *ins.name;
        if (entry->num_args >= 0 && static_cast<size_t>(entry->num_args) != ins.args.size()) {
          throw Error(ErrorKind::ProgramLoadError,
                      "the kernel takes " + std::to_string(entry->num_args) + " arguments, the instruction passes " +
                          std::to_string(ins.args.size()),
                      where);
        }
        for (int m : entry->mutated_args) {
          if (m < 0 || static_cast<size_t>(m) >= ins.args.size()) {
            throw Error(ErrorKind::ProgramLoadError,
                        "the kernel declares argument " + std::to_string(m) + " as written in place, but the instruction passes " +
                            std::to_string(ins.args.size()) + " arguments",
                        where);
          }
        }
        ins.mutated_args = entry->mutated_args;
        ins.prepare = entry->prepare;
        break;
      }
      case fb::InstructionArguments::DelegateCall: {
        const auto* d = instr->instr_args_as_DelegateCall();
        ins.kind = Instruction::Kind::Delegate;
        ins.a = d->delegate_index();
        ins.args = bind_args(d->args());
        names.push_back(fdelegates->Get(d->delegate_index())->id()->str());
        ins.name = &names.back();
        break;
      }
      case fb::InstructionArguments::MoveCall: {
        const auto* m = instr->instr_args_as_MoveCall();
        ins.kind = Instruction::Kind::Move;
        ins.a = m->move_from();
        ins.b = m->move_to();
        break;
      }
      case fb::InstructionArguments::JumpFalseCall: {
        const auto* j = instr->instr_args_as_JumpFalseCall();
        ins.kind = Instruction::Kind::JumpFalse;
        ins.a = j->cond_value_index();
        ins.b = j->destination_instruction();
        break;
      }
      case fb::InstructionArguments::FreeCall: {
        ins.kind = Instruction::Kind::Free;
        ins.a = instr->instr_args_as_FreeCall()->value_index();
        break;
      }
      default:
        throw Error(ErrorKind::ProgramLoadError, "unknown instruction type", where);
    }
    instructions.push_back(ins);
    ++pc;
  }
}

void Method::Impl::prepare_kernels() {
  // Instructions that pack the same constants with the same parameters (a model's repeated layers) pack once.
  const compute::LoadMemo memo;
  for (size_t pc = 0; pc < instructions.size(); ++pc) {
    Instruction& ins = instructions[pc];
    if (ins.kind != Instruction::Kind::Kernel || ins.prepare == nullptr) continue;
    try {
      kernel_states.push_back(ins.prepare(ins.args));
    } catch (const Error& e) {
      ErrorContext where = context();
      where.instruction = static_cast<int64_t>(pc);
      where.op = *ins.name;
      throw Error(ErrorKind::ProgramLoadError, e.detail(), where);
    }
    ins.state = kernel_states.back().get();
    if (ins.state == nullptr) continue;
    for (size_t arg : ins.state->packed_constant_args()) {
      if (arg < ins.args.size() && ins.args[arg]->is_tensor() && ins.args[arg]->to_tensor().is_constant()) {
        release_file_pages(runtime::bytes_of(ins.args[arg]->to_tensor()).span());
      }
    }
  }
}

namespace {

/// The named data a delegate reads while it is built (its weights, which it packs or copies), so that their
/// file pages can leave the process's resident memory once it is built.
class RecordingDataMap final : public NamedDataMap {
 public:
  explicit RecordingDataMap(const NamedDataMap& inner) : inner_(inner) {}
  std::optional<std::span<const uint8_t>> get(std::string_view key) const override {
    auto bytes = inner_.get(key);
    if (bytes) read_.push_back(*bytes);
    return bytes;
  }
  std::optional<TensorLayout> layout(std::string_view key) const override { return inner_.layout(key); }
  size_t num_keys() const override { return inner_.num_keys(); }
  std::string_view key(size_t index) const override { return inner_.key(index); }
  std::string describe() const override { return inner_.describe(); }
  const std::vector<std::span<const uint8_t>>& read() const { return read_; }

 private:
  const NamedDataMap& inner_;
  mutable std::vector<std::span<const uint8_t>> read_;
};

}  // namespace

void Method::Impl::release_file_pages(std::span<const uint8_t> range) {
  // Now, so that the file's pages and what the load makes of them (folded copies) are not resident together,
  // and again at the end of the load (release_consumed_file_pages).
  if (range.empty()) return;
  program->file->source().release(range);
  for (const auto& data_file : program->data_files) data_file->source().release(range);
  consumed_file_bytes.push_back(range);
}

void Method::Impl::release_consumed_file_pages() {
  // Again at the end of the load: a later read near a released range (the next layer's weights) maps the
  // file's cached pages around it again (the kernel's fault-around), released ones included. Per source,
  // ranges apart by no more than the exporters' alignment padding are one range, so that a page two
  // neighbouring constants share is released too.
  constexpr uintptr_t kPadding = 64;
  auto address = [](const uint8_t* p) { return reinterpret_cast<uintptr_t>(p); };
  std::sort(consumed_file_bytes.begin(), consumed_file_bytes.end(),
            [](auto a, auto b) { return a.data() < b.data(); });
  auto release_within = [&](const format::ByteSource& source) {
    const std::span<const uint8_t> all = source.bytes();
    const uintptr_t lo = address(all.data()), hi = lo + all.size();
    uintptr_t begin = 0, end = 0;
    for (const std::span<const uint8_t> r : consumed_file_bytes) {
      const uintptr_t b = address(r.data()), e = b + r.size();
      if (b < lo || e > hi) continue;
      if (end != 0 && b <= end + kPadding) {
        end = std::max(end, e);
        continue;
      }
      if (end != 0) source.release(all.subspan(begin - lo, end - begin));
      begin = b;
      end = e;
    }
    if (end != 0) source.release(all.subspan(begin - lo, end - begin));
  };
  release_within(program->file->source());
  for (const auto& data_file : program->data_files) release_within(data_file->source());
  consumed_file_bytes = {};
}

void Method::Impl::build_delegates() {
  const auto* fdelegates = plan->delegates();
  if (fdelegates == nullptr) return;
  for (size_t i = 0; i < fdelegates->size(); ++i) {
    const auto* d = fdelegates->Get(i);
    const std::string id = d->id()->str();
    ErrorContext where = context();
    where.backend = id;
    std::shared_ptr<Backend> backend = find_backend(id);
    // Program::load_method asked load_verdict first, which names every missing backend with the available
    // ones; this only keeps a registry changed since then from being dereferenced.
    if (!backend || !backend->is_available()) {
      throw Error(ErrorKind::BackendNotAvailable, "backend " + quoted_name(id) + " is not available in this runtime", where);
    }
    // The same context, specs and supports() question as Program::load_verdict (runtime/verdict.h).
    const std::vector<CompileSpec> specs = runtime::delegate_compile_specs(*d);
    BackendInitContext ctx = runtime::delegate_init_context(meta.name, static_cast<int>(i), id,
                                                            program->delegate_data.get(), program->options);
    std::optional<RecordingDataMap> recorded;
    if (ctx.named_data != nullptr) ctx.named_data = &recorded.emplace(*ctx.named_data);
    ctx.release_file_pages = [this](std::span<const uint8_t> bytes) { release_file_pages(bytes); };
    ctx.workspace = &delegate_workspace;
    const std::span<const uint8_t> payload = program->file->delegate_payload(*d);
    try {
      delegates.push_back(runtime::init_delegate(*backend, ctx, payload, specs));
      // Built: what it packed or copied (its payload, the weights it read) is not read at run time (the
      // official runtime's XNNPACK delegate frees its payload after init). Their file pages are released; read
      // again (another method's delegate), they come back from the file.
      release_file_pages(payload);
      if (recorded) {
        for (std::span<const uint8_t> bytes : recorded->read()) release_file_pages(bytes);
      }
    } catch (const Error& e) {
      throw Error(e.kind(), "delegate " + std::to_string(i) + ": " + e.detail(), e.context()).with_context(where);
    } catch (const std::bad_alloc&) {
      throw Error(ErrorKind::ProgramLoadError, "delegate " + std::to_string(i) + ": out of memory", where);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::ProgramLoadError, "delegate " + std::to_string(i) + ": " + e.what(), where);
    }
    backends.push_back(std::move(backend));
  }
  for (auto& ins : instructions) {
    if (ins.kind == Instruction::Kind::Delegate) {
      ins.backend = backends[ins.a].get();
      ins.delegate = delegates[ins.a].get();
    }
  }
}

}  // namespace etnp
