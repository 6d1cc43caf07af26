#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <unordered_map>

#include "etnp/program.h"
#include "etnp/threadpool.h"
#include "core/profiling.h"
#include "runtime/registry.h"
#include "runtime/program_impl.h"

namespace etnp {

namespace fb = format::fb;

namespace detail {

std::string operator_name(const fb::Operator& op);  // program.cpp

namespace {

constexpr int64_t kMaxInstructionsPerRun = 10'000'000;

std::string shape_string(std::span<const int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string dims_string(std::span<const uint8_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(int(s[i]));
  return r + "]";
}

/// The bytes a tensor's storage spans (its capacity, for a dynamic shape).
struct ByteRange {
  uintptr_t begin = 0, end = 0;
  bool overlaps(const ByteRange& o) const { return begin < o.end && o.begin < end; }
};

ByteRange bytes_of(const Tensor& t) {
  const auto begin = reinterpret_cast<uintptr_t>(t.data());
  return {begin, begin + static_cast<uintptr_t>(t.capacity_numel()) * t.element_size()};
}

uint8_t* allocate_zeroed(size_t nbytes, const std::string& what) {
  void* p = std::calloc(nbytes == 0 ? 1 : nbytes, 1);
  if (p == nullptr) {
    throw Error(ErrorKind::ProgramLoadError, "cannot allocate " + std::to_string(nbytes) + " bytes for " + what);
  }
  return static_cast<uint8_t*>(p);
}

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
  if (std::holds_alternative<std::string>(v)) return "'" + std::get<std::string>(v) + "'";
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

ErrorContext MethodImpl::context() const {
  ErrorContext c;
  c.method = meta.name;
  return c;
}

void MethodImpl::load() {
  try {
    build_values();
    build_instructions();  // resolves kernels first: a missing operator is reported before delegate work
    fold_constants();      // before the prepare hooks, so that they see what became constant
    elide_copies();
    prepare_kernels();
    mark_storage_checks();
    build_delegates();
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

uint8_t* MethodImpl::own(size_t nbytes, const std::string& what) {
  owned_buffers.emplace_back(allocate_zeroed(nbytes, what));
  owned_bytes += nbytes;
  return owned_buffers.back().get();
}

size_t MethodImpl::load_time_bytes() const {
  size_t total = owned_bytes;
  for (const auto& state : kernel_states) {
    if (state) total += state->bytes();
  }
  for (const auto& delegate : delegates) {
    if (delegate) total += delegate->bytes();
  }
  return total;
}

void MethodImpl::build_values() {
  const auto* fvalues = plan->values();
  const size_t n = fvalues->size();
  values.assign(n, EValue());
  tensor_of_value.assign(n, -1);

  // Planned arenas, zero-filled: mutable buffers without initial data (e.g. a KV cache) start at zero.
  if (const auto* sizes = plan->non_const_buffer_sizes(); sizes != nullptr) {
    for (size_t i = 1; i < sizes->size(); ++i) {
      arenas.emplace_back(allocate_zeroed(static_cast<size_t>(sizes->Get(i)), "planned buffer " + std::to_string(i)));
    }
  }

  // Outputs of et_view alias their input and need no storage of their own.
  std::set<int32_t> view_outputs;
  if (const auto* ops = plan->operators()) {
    for (const auto* chain : *plan->chains()) {
      for (const auto* instr : *chain->instructions()) {
        if (instr->instr_args_type() != fb::InstructionArguments::KernelCall) continue;
        const auto* k = instr->instr_args_as_KernelCall();
        const auto* op = ops->Get(k->op_index());
        if (op->name()->string_view() == "executorch_prim::et_view" && k->args()->size() >= 3) {
          view_outputs.insert(k->args()->Get(2));
        }
      }
    }
  }
  std::set<int32_t> inputs(plan->inputs()->begin(), plan->inputs()->end());

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
    const std::string where = "value " + std::to_string(i);
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
        std::vector<int64_t> sizes(t->sizes()->begin(), t->sizes()->end());
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
                        "tensor '" + key + "' is stored in external data, but no external data (.ptd) was provided; "
                        "load the program with its .ptd file");
          }
          auto bytes = external->get(key);
          if (!bytes) {
            throw Error(ErrorKind::ProgramLoadError,
                        "tensor '" + key + "' is not in the external data (" + external->describe() + ")");
          }
          if (auto layout = external->layout(key)) {
            const bool same_order = layout->dim_order.empty() ||
                                    std::equal(layout->dim_order.begin(), layout->dim_order.end(), dim_order.begin(),
                                               dim_order.end());
            if (layout->dtype != dtype || layout->sizes != sizes || !same_order) {
              throw Error(ErrorKind::ProgramLoadError,
                          "external tensor '" + key + "' is " + std::string(scalar_type_name(layout->dtype)) +
                              shape_string(layout->sizes) + " in " + external->describe() + ", the program expects " +
                              std::string(scalar_type_name(dtype)) + shape_string(sizes));
            }
          }
          if (bytes->size() < nbytes) {
            throw Error(ErrorKind::ProgramLoadError, "external tensor '" + key + "' holds " +
                                                         std::to_string(bytes->size()) + " bytes, the program needs " +
                                                         std::to_string(nbytes));
          }
          external_bytes = bytes->first(nbytes);
        }
        if (const auto* a = t->allocation_info(); a != nullptr) {
          const uint64_t offset = uint64_t(a->memory_offset_low()) | (uint64_t(a->memory_offset_high()) << 32);
          uint8_t* data = arenas[a->memory_id() - 1].get() + offset;
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
            uint8_t* copy = own(nbytes, where);
            std::memcpy(copy, bytes, nbytes);
            bytes = copy;
          }
          tensor.set_data(const_cast<uint8_t*>(bytes));
          tensor.set_constant(true);
        } else if (!inputs.count(static_cast<int32_t>(i)) && !view_outputs.count(static_cast<int32_t>(i))) {
          // Unplanned and not bound by the caller: the method keeps storage for it.
          tensor.set_data(own(nbytes, where));
        }
        values[i] = EValue::from_tensor(&tensor);
        break;
      }
      default:
        throw Error(ErrorKind::ProgramLoadError, where + " has an unsupported type");
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

void MethodImpl::build_instructions() {
  const auto* chains = plan->chains();
  const auto* ops = plan->operators();
  const auto& registry = runtime::kernel_registry();

  // Resolve every operator once; report all missing ones together.
  std::vector<const KernelEntry*> entries;
  std::vector<std::string> op_names;
  std::vector<std::string> missing;
  if (ops != nullptr) {
    for (const auto* op : *ops) {
      op_names.push_back(operator_name(*op));
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
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
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
        where.op = *ins.name;
        if (entry->num_args >= 0 && static_cast<size_t>(entry->num_args) != ins.args.size()) {
          throw Error(ErrorKind::ProgramLoadError,
                      "the kernel takes " + std::to_string(entry->num_args) + " arguments, the instruction passes " +
                          std::to_string(ins.args.size()),
                      where);
        }
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

namespace {

/// How the instructions reference each value: in any position, and as the out slot of a kernel call (its last
/// argument), a delegate argument, a move target or a free. Method inputs and outputs count as both.
struct ValueUses {
  std::vector<uint32_t> uses, writes;

  ValueUses(const std::vector<Instruction>& instructions, const std::vector<EValue>& values,
            const format::fb::ExecutionPlan& plan)
      : uses(values.size(), 0), writes(values.size(), 0) {
    auto index = [&](const EValue* v) { return static_cast<size_t>(v - values.data()); };
    for (const auto& ins : instructions) {
      for (const EValue* v : ins.args) ++uses[index(v)];
      switch (ins.kind) {
        case Instruction::Kind::Kernel:
          if (!ins.args.empty()) ++writes[index(ins.args.back())];
          break;
        case Instruction::Kind::Delegate:
          for (const EValue* v : ins.args) ++writes[index(v)];
          break;
        case Instruction::Kind::Move:
          ++uses[ins.a];
          ++uses[ins.b];
          ++writes[ins.b];
          break;
        case Instruction::Kind::Free:
          ++uses[ins.a];
          ++writes[ins.a];
          break;
        case Instruction::Kind::JumpFalse: ++uses[ins.a]; break;
        case Instruction::Kind::Folded: break;
      }
    }
    for (const auto* list : {plan.inputs(), plan.outputs()}) {
      for (int32_t v : *list) {
        ++uses[v];
        ++writes[v];
      }
    }
  }
};

}  // namespace

void MethodImpl::fold_constants() {
  const ValueUses usage(instructions, values, *plan);
  for (size_t i = 0; i < instructions.size(); ++i) {
    fold_constant_layout(instructions[i], usage.writes);
    if (i + 1 < instructions.size()) fold_batch_norm(instructions[i], instructions[i + 1], usage.uses);
  }
}

void MethodImpl::prepare_kernels() {
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
  }
}

void MethodImpl::fold_constant_layout(Instruction& ins, const std::vector<uint32_t>& writes) {
  // Exporters leave layout changes of weights in the graph (a linear's permute_copy before its mm). Their
  // inputs never change, so they run once here, into memory the method keeps, and the run loop skips them;
  // the kernels after them see constants they can pre-pack.
  static constexpr std::string_view kFoldable[] = {"aten::permute_copy.out", "aten::transpose_copy.int_out",
                                                   "aten::t_copy.out"};
  if (ins.kind != Instruction::Kind::Kernel ||
      std::find(std::begin(kFoldable), std::end(kFoldable), *ins.name) == std::end(kFoldable)) {
    return;
  }
  if (ins.args.size() < 2 || !ins.args.front()->is_tensor() || !ins.args.front()->to_tensor().is_constant()) return;
  EValue* out_value = ins.args.back();
  const size_t out_index = static_cast<size_t>(out_value - values.data());
  // Only this instruction writes the output.
  if (!out_value->is_tensor() || writes[out_index] != 1) return;
  Tensor& out = out_value->to_tensor();
  if (out.is_constant() || out.dynamism() != ShapeDynamism::Static || out.data() == nullptr) return;
  for (size_t k = 1; k + 1 < ins.args.size(); ++k) {
    if (ins.args[k] != out_value && ins.args[k]->is_tensor()) return;
  }
  void* planned = out.data();
  const size_t folded_bytes = static_cast<size_t>(out.capacity_numel()) * out.element_size();
  out.set_data(own(folded_bytes, "a folded constant"));
  try {
    KernelContext ctx(&ThreadPool::global(), nullptr);  // the foldable kernels keep no state
    ins.fn(ctx, ins.args);
  } catch (const Error&) {
    // Left to run (and fail with its full context) at execution time.
    out.set_data(planned);
    owned_buffers.pop_back();
    owned_bytes -= folded_bytes;
    return;
  }
  out.set_constant(true);
  ins.kind = Instruction::Kind::Folded;
}

void MethodImpl::fold_batch_norm(Instruction& conv, Instruction& bn, const std::vector<uint32_t>& uses) {
  // A convolution followed by an inference batch norm, both on constants, is one convolution with scaled
  // weights and a shifted bias (what the XNNPACK exporter does before lowering): the batch norm's memory
  // pass disappears and the convolution writes the batch norm's output directly.
  constexpr std::string_view kConv = "aten::convolution.out";
  constexpr std::string_view kBatchNorm = "aten::_native_batch_norm_legit_no_training.out";
  auto index_of = [&](const EValue* v) { return static_cast<size_t>(v - values.data()); };
  auto constant_f32 = [](const EValue* v, int64_t numel) {
    if (!v->is_tensor()) return false;
    const Tensor& t = v->to_tensor();
    return t.is_constant() && t.dtype() == ScalarType::Float && t.numel() == numel && t.is_contiguous_order();
  };
  if (conv.kind != Instruction::Kind::Kernel || bn.kind != Instruction::Kind::Kernel || *conv.name != kConv ||
      *bn.name != kBatchNorm || conv.args.size() != 11 || bn.args.size() != 11) {
    return;
  }
  // conv(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out, ret)
  // bn(input, weight, bias, mean, var, momentum, eps, out, save_mean, save_invstd, ret)
  const EValue* conv_out = conv.args[9];
  if (conv.args[10] != conv_out || bn.args[0] != conv_out || !conv_out->is_tensor() ||
      uses[index_of(conv_out)] != 3) {  // out and ret of the convolution, input of the batch norm
    return;
  }
  if (!conv.args[0]->is_tensor() || !conv.args[6]->is_bool() || conv.args[6]->to_bool() || !conv.args[1]->is_tensor() ||
      !bn.args[6]->is_double()) {
    return;
  }
  const Tensor& w = conv.args[1]->to_tensor();
  if (w.dim() < 3 || !constant_f32(conv.args[1], w.numel())) return;
  const int64_t channels = w.size(0);
  const bool has_bias = !conv.args[2]->is_none();
  if (has_bias && !constant_f32(conv.args[2], channels)) return;
  if ((!bn.args[1]->is_none() && !constant_f32(bn.args[1], channels)) ||
      (!bn.args[2]->is_none() && !constant_f32(bn.args[2], channels)) || !constant_f32(bn.args[3], channels) ||
      !constant_f32(bn.args[4], channels)) {
    return;
  }
  // The convolution will write the batch norm's output: same shape and layout. The batch statistics outputs
  // (empty in inference) must be unused.
  if (!bn.args[7]->is_tensor() || bn.args[7]->to_tensor().dtype() != ScalarType::Float ||
      !std::ranges::equal(bn.args[7]->to_tensor().sizes(), conv_out->to_tensor().sizes()) ||
      !std::ranges::equal(bn.args[7]->to_tensor().dim_order(), conv_out->to_tensor().dim_order()) ||
      bn.args[7]->to_tensor().dynamism() != conv_out->to_tensor().dynamism() ||
      uses[index_of(bn.args[8])] != 1 || uses[index_of(bn.args[9])] != 1 ||
      (bn.args[10] != bn.args[7] && uses[index_of(bn.args[10])] != 1)) {
    return;
  }

  // The memory plan may have given the batch norm's output the bytes of the convolution's input (their
  // lifetimes did not meet before the fusion); then the convolution would overwrite what it still reads.
  const Tensor& conv_in = conv.args[0]->to_tensor();
  const Tensor& bn_out = bn.args[7]->to_tensor();
  if (conv_in.data() == nullptr || bn_out.data() == nullptr || bytes_of(conv_in).overlaps(bytes_of(bn_out))) return;

  const double eps = bn.args[6]->to_double();
  auto at = [](const EValue* v, int64_t c) { return static_cast<double>(v->to_tensor().data_as<const float>()[c]); };
  const int64_t per_channel = w.numel() / channels;
  auto* new_w = own(static_cast<size_t>(w.numel()) * sizeof(float), "a folded convolution weight");
  auto* new_b = own(static_cast<size_t>(channels) * sizeof(float), "a folded convolution bias");
  auto* wf = reinterpret_cast<float*>(new_w);
  auto* bf = reinterpret_cast<float*>(new_b);
  for (int64_t c = 0; c < channels; ++c) {
    const double gamma = bn.args[1]->is_none() ? 1.0 : at(bn.args[1], c);
    const double beta = bn.args[2]->is_none() ? 0.0 : at(bn.args[2], c);
    const double scale = gamma / std::sqrt(at(bn.args[4], c) + eps);
    const float* src = w.data_as<const float>() + c * per_channel;
    for (int64_t k = 0; k < per_channel; ++k) wf[c * per_channel + k] = static_cast<float>(src[k] * scale);
    bf[c] = static_cast<float>(((has_bias ? at(conv.args[2], c) : 0.0) - at(bn.args[3], c)) * scale + beta);
  }
  Tensor& wt = load_time_tensors.emplace_back(ScalarType::Float, w.sizes(), w.dim_order(), new_w);
  wt.set_constant(true);
  const int64_t bias_size[1] = {channels};
  Tensor& bt = load_time_tensors.emplace_back(ScalarType::Float, std::span<const int64_t>(bias_size, 1),
                                              std::span<const uint8_t>(), new_b);
  bt.set_constant(true);
  EValue* wv = &load_time_values.emplace_back(EValue::from_tensor(&wt));
  EValue* bv = &load_time_values.emplace_back(EValue::from_tensor(&bt));
  EValue** conv_args = arg_storage.data() + (conv.args.data() - arg_storage.data());
  conv_args[1] = wv;
  conv_args[2] = bv;
  conv_args[9] = conv_args[10] = bn.args[7];
  bn.kind = Instruction::Kind::Folded;
}

namespace {

/// Where each tensor value is referenced: by instruction (arguments and tensor-list items, move and free
/// operands), and whether it is a method input or output.
struct TensorRefs {
  std::vector<std::vector<uint32_t>> by_value;   // value -> instructions referencing it, ascending
  std::vector<std::vector<uint32_t>> by_instr;   // instruction -> tensor values it references
  std::vector<bool> io;                          // method input or output
  std::vector<bool> freed_or_moved;
  /// The value's first reference is a kernel writing it whole (its out slot, also the returned value, and
  /// not among the kernel's other arguments): what its bytes held before is never read.
  std::vector<bool> produced;
  bool has_jumps = false;

  TensorRefs(const std::vector<Instruction>& instructions, const std::vector<EValue>& values,
             const format::fb::ExecutionPlan& plan)
      : by_value(values.size()), by_instr(instructions.size()), io(values.size(), false),
        freed_or_moved(values.size(), false), produced(values.size(), false) {
    std::unordered_map<const Tensor*, uint32_t> value_of;
    for (size_t v = 0; v < values.size(); ++v) {
      if (values[v].is_tensor()) value_of.emplace(&values[v].to_tensor(), static_cast<uint32_t>(v));
    }
    for (uint32_t pc = 0; pc < instructions.size(); ++pc) {
      const Instruction& ins = instructions[pc];
      const bool writes_out = ins.kind == Instruction::Kind::Kernel && ins.args.size() >= 2 &&
                              ins.args[ins.args.size() - 2] == ins.args.back() && ins.args.back()->is_tensor();
      auto add = [&](const Tensor* t) {
        auto it = value_of.find(t);
        if (it == value_of.end()) return;  // a constant made at load
        auto& list = by_value[it->second];
        if (list.empty() && writes_out && &ins.args.back()->to_tensor() == t) {
          produced[it->second] = std::none_of(ins.args.begin(), ins.args.end() - 2, [t](const EValue* v) {
            return !v->is_tensor() ? v->tag() == Tag::ListTensor || v->tag() == Tag::ListOptionalTensor
                                   : &v->to_tensor() == t;
          });
        }
        if (list.empty() || list.back() != pc) list.push_back(pc);
        by_instr[pc].push_back(it->second);
      };
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
    }
    for (const auto* list : {plan.inputs(), plan.outputs()}) {
      for (int32_t v : *list) io[static_cast<size_t>(v)] = true;
    }
  }

  /// Every tensor other than `except` that shares a byte with `range` and is referenced after instruction
  /// `pc` is first referenced after it, by a kernel that writes it whole: none reads what the range held at
  /// `pc` (an exporter's view planned on a tensor's bytes would).
  bool nothing_reads_after(const std::vector<EValue>& values, uint32_t pc, const ByteRange& range,
                           uint32_t except) const {
    for (uint32_t v = 0; v < by_value.size(); ++v) {
      if (v == except || by_value[v].empty() || by_value[v].back() <= pc) continue;
      const Tensor& t = values[v].to_tensor();
      if (t.data() == nullptr || !bytes_of(t).overlaps(range)) continue;
      if (by_value[v].front() <= pc || !produced[v]) return false;
    }
    return true;
  }

  /// No tensor other than `allowed` referenced by instructions [from, to] may share a byte with `range`, and
  /// every tensor they reference must have its storage now (a view's is only known when it runs).
  bool bytes_untouched(const std::vector<EValue>& values, uint32_t from, uint32_t to, const ByteRange& range,
                       std::initializer_list<uint32_t> allowed) const {
    for (uint32_t pc = from; pc <= to; ++pc) {
      for (uint32_t v : by_instr[pc]) {
        if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) continue;
        const Tensor& t = values[v].to_tensor();
        if (t.data() == nullptr && t.capacity_numel() > 0) return false;
        if (bytes_of(t).overlaps(range)) return false;
      }
    }
    return true;
  }
};

/// Both tensors planned, static, and laid out alike: one can take the other's bytes.
bool same_layout(const Tensor& a, const Tensor& b) {
  return a.data() != nullptr && b.data() != nullptr && !a.is_constant() && !b.is_constant() &&
         a.dynamism() == ShapeDynamism::Static && b.dynamism() == ShapeDynamism::Static && a.dtype() == b.dtype() &&
         std::ranges::equal(a.sizes(), b.sizes()) && std::ranges::equal(a.dim_order(), b.dim_order());
}

}  // namespace

void MethodImpl::elide_copies() {
  // Exporters functionalize in-place updates: writing one row of a KV cache becomes `t = index_put(buf,
  // ...)`, a copy of the whole buffer with the row changed, and at the end `buf.copy_(t)`, a second copy.
  // Where nothing else touches the buffer in between, `t` can live in the buffer's own bytes: the update
  // is then made in place and both copies disappear (the kernels skip a copy onto itself). Decided on the
  // memory plan's addresses, before any run; a program with jumps is left as it is. (A plain copy whose
  // input looks dead afterwards is not elided: a mutable buffer read once also looks dead yet must keep its
  // value for the next call, and exporters plan views on a tensor's bytes that later instructions read.)
  static constexpr std::string_view kScatters[] = {"aten::index_put.out", "aten::slice_scatter.out",
                                                   "aten::select_scatter.out"};
  std::optional<TensorRefs> refs;
  try {
    refs.emplace(instructions, values, *plan);
  } catch (const Error&) {
    return;  // a malformed argument list: reported with its context when the instruction runs
  }
  if (refs->has_jumps) return;
  auto index_of = [&](const EValue* v) { return static_cast<uint32_t>(v - values.data()); };
  auto in_values = [&](const EValue* v) { return v >= values.data() && v < values.data() + values.size(); };
  auto movable = [&](uint32_t v) { return !refs->io[v] && !refs->freed_or_moved[v]; };

  for (uint32_t i = 0; i < instructions.size(); ++i) {
    const Instruction& ins = instructions[i];
    if (ins.kind != Instruction::Kind::Kernel || ins.args.size() < 3 ||
        std::ranges::find(kScatters, *ins.name) == std::end(kScatters)) {
      continue;
    }
    // t = scatter(buf, ..., out=t) with the out slot and the returned value one value.
    const EValue* buf_value = ins.args[0];
    const EValue* t_value = ins.args.back();
    if (ins.args[ins.args.size() - 2] != t_value || !in_values(t_value) || !in_values(buf_value) ||
        !t_value->is_tensor() || !buf_value->is_tensor()) {
      continue;
    }
    const uint32_t buf = index_of(buf_value), t = index_of(t_value);
    if (buf == t || !movable(buf) || !movable(t)) continue;
    Tensor& buf_tensor = values[buf].to_tensor();
    Tensor& t_tensor = values[t].to_tensor();
    if (!same_layout(buf_tensor, t_tensor)) continue;
    // The buffer's next and last reference is `buf.copy_(t)`; `t` lives from the scatter to that copy.
    const std::vector<uint32_t>& buf_refs = refs->by_value[buf];
    const std::vector<uint32_t>& t_refs = refs->by_value[t];
    auto next = std::ranges::upper_bound(buf_refs, i);
    if (next == buf_refs.end() || next + 1 != buf_refs.end()) continue;
    const uint32_t j = *next;
    const Instruction& copy = instructions[j];
    if (copy.kind != Instruction::Kind::Kernel || *copy.name != "aten::copy_" || copy.args.size() != 4 ||
        copy.args[0] != buf_value || copy.args[1] != t_value || copy.args[3] != buf_value || t_refs.front() != i ||
        t_refs.back() != j) {
      continue;
    }
    if (!refs->bytes_untouched(values, i, j, bytes_of(buf_tensor), {buf, t})) continue;
    // Nothing may still read t's own bytes expecting t (a view the exporter planned on them).
    if (!refs->nothing_reads_after(values, i, bytes_of(t_tensor), t)) continue;
    t_tensor.set_data(buf_tensor.data());
  }
}

void MethodImpl::mark_storage_checks() {
  // Tensors that can lack storage while the method runs: et_view outputs (until the view runs) and
  // targets of FreeCall. Well-formed programs never read them then; malformed ones must not crash.
  std::vector<bool> maybe_null(values.size(), false);
  for (const auto& ins : instructions) {
    if (ins.kind == Instruction::Kind::Free && !maybe_null[ins.a]) {
      maybe_null[ins.a] = true;
      Tensor& t = values[ins.a].to_tensor();
      freed_storage.emplace_back(&t, t.data());
    }
    if (ins.kind == Instruction::Kind::Kernel && *ins.name == "executorch_prim::et_view.default" && ins.args.size() >= 3) {
      maybe_null[ins.args[2] - values.data()] = true;
    }
  }
  for (auto& ins : instructions) {
    if (ins.kind != Instruction::Kind::Kernel && ins.kind != Instruction::Kind::Delegate) continue;
    if (ins.kind == Instruction::Kind::Kernel && *ins.name == "executorch_prim::et_view.default") ins.skip_check_arg = 2;
    for (size_t k = 0; k < ins.args.size(); ++k) {
      const EValue* v = ins.args[k];
      // Arguments outside the value table are constants made at load (fold_batch_norms): never null.
      const bool in_table = std::less_equal<const EValue*>()(values.data(), v) &&
                            std::less<const EValue*>()(v, values.data() + values.size());
      if (in_table && static_cast<int32_t>(k) != ins.skip_check_arg && maybe_null[static_cast<size_t>(v - values.data())]) {
        ins.check_storage = true;
      }
      if (v->tag() == Tag::ListTensor || v->tag() == Tag::ListOptionalTensor) {
        ins.check_storage = ins.check_storage || std::any_of(maybe_null.begin(), maybe_null.end(), [](bool b) { return b; });
      }
    }
  }
}

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

void MethodImpl::build_delegates() {
  const auto* fdelegates = plan->delegates();
  if (fdelegates == nullptr) return;
  for (size_t i = 0; i < fdelegates->size(); ++i) {
    const auto* d = fdelegates->Get(i);
    const std::string id = d->id()->str();
    ErrorContext where = context();
    where.backend = id;
    std::shared_ptr<Backend> backend = find_backend(id);
    if (!backend || !backend->is_available()) {
      std::string available;
      for (const auto& name : registered_backend_names()) {
        auto b = find_backend(name);
        if (b && b->is_available()) available += (available.empty() ? "" : ", ") + name;
      }
      throw Error(ErrorKind::BackendNotAvailable,
                  "the program delegates to backend '" + id + "', which is not available in this runtime (available: " +
                      (available.empty() ? "none" : available) + ")",
                  where);
    }
    std::vector<CompileSpec> specs;
    if (const auto* fs = d->compile_specs()) {
      for (const auto* s : *fs) {
        specs.push_back({s->key()->string_view(),
                         s->value() ? std::span<const uint8_t>(s->value()->data(), s->value()->size())
                                    : std::span<const uint8_t>()});
      }
    }
    BackendInitContext ctx;
    ctx.method_name = meta.name;
    ctx.delegate_index = static_cast<int>(i);
    ctx.named_data = program->delegate_data.get();
    auto opts = program->options.backend_options.find(id);
    if (opts != program->options.backend_options.end()) ctx.load_options = &opts->second;
    try {
      delegates.push_back(backend->init(ctx, program->file->delegate_payload(*d), specs));
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

void MethodImpl::set_input(size_t index, const Value& value) {
  ErrorContext where = context();
  where.input_index = static_cast<int64_t>(index);
  if (index >= meta.inputs.size()) {
    throw Error(ErrorKind::InvalidArgument,
                "the method takes " + std::to_string(meta.inputs.size()) + " inputs, there is no input " + std::to_string(index),
                context());
  }
  const ValueInfo& info = meta.inputs[index];
  EValue& slot = values[plan->inputs()->Get(index)];
  auto mismatch = [&](const std::string& what) { throw Error(ErrorKind::InvalidArgument, what, where); };
  switch (info.tag) {
    case Tag::None:
      if (!std::holds_alternative<std::monostate>(value)) mismatch(std::string("expected None, got ") + value_kind(value));
      break;
    case Tag::Int: {
      if (!std::holds_alternative<int64_t>(value)) mismatch(std::string("expected an Int, got ") + value_kind(value));
      if (std::get<int64_t>(value) != std::get<int64_t>(info.value)) {
        mismatch("the program was exported with the value " + value_string(info.value) + " for this input and only accepts it; got " +
                 value_string(value));
      }
      break;
    }
    case Tag::Bool: {
      if (!std::holds_alternative<bool>(value)) mismatch(std::string("expected a Bool, got ") + value_kind(value));
      if (std::get<bool>(value) != std::get<bool>(info.value)) {
        mismatch("the program was exported with the value " + value_string(info.value) + " for this input and only accepts it; got " +
                 value_string(value));
      }
      break;
    }
    case Tag::Double: {
      double given = 0;
      if (std::holds_alternative<double>(value)) given = std::get<double>(value);
      else if (std::holds_alternative<int64_t>(value)) given = static_cast<double>(std::get<int64_t>(value));
      else mismatch(std::string("expected a Double, got ") + value_kind(value));
      if (!doubles_match(std::get<double>(info.value), given)) {
        mismatch("the program was exported with the value " + value_string(info.value) + " for this input and only accepts it; got " +
                 value_string(Value(given)));
      }
      break;
    }
    case Tag::String:
      if (!std::holds_alternative<std::string>(value)) mismatch(std::string("expected a String, got ") + value_kind(value));
      if (std::get<std::string>(value) != std::get<std::string>(info.value)) {
        mismatch("the program only accepts " + value_string(info.value) + " for this input; got " + value_string(value));
      }
      break;
    case Tag::Tensor: {
      if (!std::holds_alternative<TensorRef>(value)) mismatch(std::string("expected a tensor, got ") + value_kind(value));
      const TensorRef& ref = std::get<TensorRef>(value);
      Tensor& t = slot.to_tensor();
      const TensorInfo& ti = info.tensor;
      if (ref.dtype != ti.dtype) {
        mismatch("expected dtype " + std::string(scalar_type_name(ti.dtype)) + ", got " + std::string(scalar_type_name(ref.dtype)));
      }
      if (ref.sizes.size() != ti.sizes.size()) {
        mismatch("expected a rank-" + std::to_string(ti.sizes.size()) + " tensor of shape " + shape_string(ti.sizes) +
                 ", got rank " + std::to_string(ref.sizes.size()) + " shape " + shape_string(ref.sizes));
      }
      for (size_t d = 0; d < ref.sizes.size(); ++d) {
        if (ref.sizes[d] < 0) mismatch("negative size in shape " + shape_string(ref.sizes));
        if (ti.dynamism == ShapeDynamism::Static && ref.sizes[d] != ti.sizes[d]) {
          mismatch("expected shape " + shape_string(ti.sizes) + ", got " + shape_string(ref.sizes) + " (dimension " +
                   std::to_string(d) + " is " + std::to_string(ref.sizes[d]) + ", the program needs exactly " +
                   std::to_string(ti.sizes[d]) + ")");
        }
        if (ti.dynamism != ShapeDynamism::Static && ref.sizes[d] > ti.sizes[d]) {
          mismatch("dimension " + std::to_string(d) + " is " + std::to_string(ref.sizes[d]) +
                   ", above its upper bound " + std::to_string(ti.sizes[d]) + " (shape " + shape_string(ref.sizes) +
                   ", bound " + shape_string(ti.sizes) + ")");
        }
      }
      if (!ref.dim_order.empty() && !same_physical_layout(ref.sizes, ref.dim_order, ti.dim_order)) {
        mismatch("expected memory order " + dims_string(ti.dim_order) + ", got " + dims_string(ref.dim_order));
      }
      if (ref.dim_order.empty() && !same_physical_layout(ref.sizes, std::vector<uint8_t>(), ti.dim_order) &&
          !t.is_contiguous_order()) {
        std::vector<uint8_t> contiguous(ref.sizes.size());
        for (size_t d = 0; d < contiguous.size(); ++d) contiguous[d] = static_cast<uint8_t>(d);
        if (!same_physical_layout(ref.sizes, contiguous, ti.dim_order)) {
          mismatch("expected memory order " + dims_string(ti.dim_order) + " (e.g. channels-last), got a contiguous tensor");
        }
      }
      if (!t.try_resize(ref.sizes)) mismatch("cannot take shape " + shape_string(ref.sizes));
      const size_t nbytes = t.nbytes();
      if (ref.data == nullptr && nbytes != 0) mismatch("tensor data is null");
      if (planned_input[index]) {
        if (nbytes != 0 && t.data() != ref.data) std::memmove(t.data(), ref.data, nbytes);
      } else {
        t.set_data(const_cast<void*>(ref.data));
      }
      break;
    }
    default:
      mismatch(std::string("inputs of type ") + tag_name(info.tag) + " are not supported");
  }
  input_set[index] = true;
}

void MethodImpl::run() {
  for (size_t i = 0; i < input_set.size(); ++i) {
    if (!input_set[i]) {
      ErrorContext c = context();
      c.input_index = static_cast<int64_t>(i);
      throw Error(ErrorKind::InvalidArgument, "input " + std::to_string(i) + " was not set", c);
    }
  }
  const size_t n = instructions.size();
  size_t pc = 0;
  int64_t executed = 0;
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
      if (++executed > kMaxInstructionsPerRun) {
        throw Error(ErrorKind::ExecutionError, "more than 10,000,000 instructions executed; the program loops");
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
          ins.backend->execute(*ins.delegate, ins.args);
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

Value MethodImpl::output(size_t index) const {
  if (index >= meta.outputs.size()) {
    throw Error(ErrorKind::InvalidArgument,
                "the method has " + std::to_string(meta.outputs.size()) + " outputs, there is no output " + std::to_string(index),
                context());
  }
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

}  // namespace detail

Method::Method(std::unique_ptr<detail::MethodImpl> impl) : impl_(std::move(impl)) {}
Method::~Method() = default;
const MethodMeta& Method::meta() const { return impl_->meta; }
const std::string& Method::name() const { return impl_->meta.name; }
size_t Method::num_inputs() const { return impl_->meta.inputs.size(); }
size_t Method::num_outputs() const { return impl_->meta.outputs.size(); }

std::vector<Value> Method::execute(std::span<const Value> inputs) {
  if (inputs.size() != impl_->meta.inputs.size()) {
    ErrorContext c;
    c.method = impl_->meta.name;
    throw Error(ErrorKind::InvalidArgument,
                "expected " + std::to_string(impl_->meta.inputs.size()) + " inputs, got " + std::to_string(inputs.size()), c);
  }
  for (size_t i = 0; i < inputs.size(); ++i) impl_->set_input(i, inputs[i]);
  impl_->run();
  std::vector<Value> outputs;
  outputs.reserve(impl_->meta.outputs.size());
  for (size_t i = 0; i < impl_->meta.outputs.size(); ++i) outputs.push_back(impl_->output(i));
  return outputs;
}

void Method::set_input(size_t index, const Value& value) { impl_->set_input(index, value); }
void Method::run() { impl_->run(); }
Value Method::output(size_t index) const { return impl_->output(index); }

void Method::set_output_buffer(size_t index, void* data, size_t nbytes) {
  ErrorContext c;
  c.method = impl_->meta.name;
  if (index >= impl_->meta.outputs.size()) throw Error(ErrorKind::InvalidArgument, "no output " + std::to_string(index), c);
  const ValueInfo& info = impl_->meta.outputs[index];
  if (info.tag != Tag::Tensor) throw Error(ErrorKind::InvalidArgument, "output " + std::to_string(index) + " is not a tensor", c);
  if (info.tensor.memory_planned) {
    throw Error(ErrorKind::InvalidArgument,
                "output " + std::to_string(index) + " is memory-planned; only unplanned outputs can be bound to caller memory", c);
  }
  if (nbytes < info.tensor.nbytes) {
    throw Error(ErrorKind::InvalidArgument, "output " + std::to_string(index) + " needs " + std::to_string(info.tensor.nbytes) +
                                                " bytes, the buffer has " + std::to_string(nbytes), c);
  }
  impl_->values[impl_->plan->outputs()->Get(index)].to_tensor().set_data(data);
}

const std::vector<ProfileEvent>& Method::profile_events() const { return impl_->events; }
size_t Method::load_time_bytes() const { return impl_->load_time_bytes(); }
void Method::clear_profile_events() { impl_->events.clear(); }

}  // namespace etnp
