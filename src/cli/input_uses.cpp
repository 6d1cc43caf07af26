// What each integer input of a method feeds, read from the program's instructions, so that --fill random draws
// indices that stay inside the tables they index (docs/cli.md, "How --fill fills inputs").
#include <algorithm>
#include <set>
#include <string_view>

#include "cli/cli.h"
#include "format/bundled_program.h"
#include "format/byte_source.h"
#include "format/pte_file.h"

namespace etnp::cli {
namespace {

namespace fb = ::executorch_flatbuffer;

// Operators whose output holds the same integers as their first argument (views, copies, reshapes).
constexpr std::string_view kSameValues[] = {
    "aten::view_copy",      "aten::_unsafe_view",    "aten::reshape",        "aten::squeeze_copy",
    "aten::unsqueeze_copy", "aten::clone",           "aten::expand_copy",    "aten::slice_copy",
    "aten::select_copy",    "aten::permute_copy",    "aten::t_copy",         "aten::transpose_copy",
    "aten::alias_copy",     "aten::detach_copy",     "aten::flatten",        "aten::contiguous",
    "dim_order_ops::_clone_dim_order", "dim_order_ops::_to_dim_order_copy", "aten::_to_copy",
};

struct IndexUse {
  int arg;   // the argument holding the indices (-1: an item of the OptionalTensorList at `list_arg`)
  int table;  // the argument indexed
  int dim_arg;  // the argument holding the dimension indexed (-1: dimension 0, or the list position)
  int list_arg = -1;
};

// Operators that index a table with an integer tensor argument, and which dimension it indexes.
bool index_use(std::string_view op, IndexUse* use) {
  if (op == "aten::embedding") { *use = {1, 0, -1}; return true; }
  if (op.rfind("quantized_decomposed::embedding_", 0) == 0) { *use = {5, 0, -1}; return true; }  // byte, 2bit, 4bit
  if (op == "aten::index_select" || op == "aten::gather" || op == "aten::scatter" || op == "aten::scatter_add") {
    *use = {2, 0, 1};
    return true;
  }
  if (op == "aten::index" || op == "aten::index_put" || op == "aten::index_put_") { *use = {-1, 0, -1, 1}; return true; }
  return false;
}

bool is_integer(ScalarType t) {
  return t == ScalarType::Long || t == ScalarType::Int || t == ScalarType::Short || t == ScalarType::Char ||
         t == ScalarType::Byte || t == ScalarType::UInt16 || t == ScalarType::UInt32 || t == ScalarType::UInt64;
}

class Plan {
 public:
  explicit Plan(const fb::ExecutionPlan& plan) : plan_(plan) {}
  size_t num_values() const { return plan_.values() ? plan_.values()->size() : 0; }
  const fb::Tensor* tensor(int64_t index) const {
    if (index < 0 || static_cast<size_t>(index) >= num_values()) return nullptr;
    const auto* v = plan_.values()->Get(static_cast<flatbuffers::uoffset_t>(index));
    return v != nullptr ? v->val_as_Tensor() : nullptr;
  }
  std::optional<int64_t> int_value(int64_t index) const {
    if (index < 0 || static_cast<size_t>(index) >= num_values()) return std::nullopt;
    const auto* v = plan_.values()->Get(static_cast<flatbuffers::uoffset_t>(index));
    const auto* i = v != nullptr ? v->val_as_Int() : nullptr;
    if (i == nullptr) return std::nullopt;
    return i->int_val();
  }
  std::vector<int32_t> list_items(int64_t index) const {
    std::vector<int32_t> out;
    if (index < 0 || static_cast<size_t>(index) >= num_values()) return out;
    const auto* v = plan_.values()->Get(static_cast<flatbuffers::uoffset_t>(index));
    if (v == nullptr) return out;
    const flatbuffers::Vector<int32_t>* items = nullptr;
    if (const auto* l = v->val_as_OptionalTensorList()) items = l->items();
    if (const auto* l = v->val_as_TensorList()) items = l->items();
    if (items != nullptr) out.assign(items->begin(), items->end());
    return out;
  }
  // The size of dimension `dim` (negative counts from the end) of tensor `index`, or nullopt.
  std::optional<int64_t> dim_size(int64_t index, int64_t dim) const {
    const fb::Tensor* t = tensor(index);
    if (t == nullptr || t->sizes() == nullptr) return std::nullopt;
    const auto rank = static_cast<int64_t>(t->sizes()->size());
    if (dim < 0) dim += rank;
    if (dim < 0 || dim >= rank) return std::nullopt;
    return t->sizes()->Get(static_cast<flatbuffers::uoffset_t>(dim));
  }
  std::string op_name(int32_t op_index) const {
    const auto* ops = plan_.operators();
    if (ops == nullptr || op_index < 0 || static_cast<size_t>(op_index) >= ops->size()) return {};
    const auto* op = ops->Get(static_cast<flatbuffers::uoffset_t>(op_index));
    return op->name() != nullptr ? op->name()->str() : std::string();
  }
  const fb::ExecutionPlan& fb() const { return plan_; }

 private:
  const fb::ExecutionPlan& plan_;
};

InputUse analyse(const Plan& plan, int32_t input_value) {
  InputUse use;
  std::set<int32_t> same{input_value};  // values holding the input's integers
  std::set<int32_t> derived;             // integer values computed from them
  auto tainted = [&](int32_t v) { return same.count(v) || derived.count(v); };
  bool direct_index = false, unknown = false;
  int64_t bound = std::numeric_limits<int64_t>::max();
  const auto* chains = plan.fb().chains();
  if (chains == nullptr) return use;
  for (const auto* chain : *chains) {
    if (chain == nullptr || chain->instructions() == nullptr) continue;
    for (const auto* instruction : *chain->instructions()) {
      if (instruction == nullptr) continue;
      if (const auto* move = instruction->instr_args_as_MoveCall()) {
        if (same.count(move->move_from())) same.insert(move->move_to());
        else if (derived.count(move->move_from())) derived.insert(move->move_to());
        continue;
      }
      if (const auto* call = instruction->instr_args_as_DelegateCall()) {
        if (call->args() == nullptr) continue;
        for (int32_t a : *call->args()) unknown = unknown || tainted(a);
        continue;
      }
      const auto* call = instruction->instr_args_as_KernelCall();
      if (call == nullptr || call->args() == nullptr || call->args()->size() == 0) continue;
      const std::vector<int32_t> args(call->args()->begin(), call->args()->end());
      const std::string op = plan.op_name(call->op_index());
      IndexUse iu{};
      if (index_use(op, &iu)) {
        auto check = [&](int32_t indices, int64_t dim) {
          if (!tainted(indices)) return;
          const auto size = static_cast<size_t>(iu.table) < args.size() ? plan.dim_size(args[iu.table], dim)
                                                                          : std::nullopt;
          if (!same.count(indices) || !size || *size <= 0) {
            unknown = true;
            return;
          }
          direct_index = true;
          bound = std::min(bound, *size);
        };
        if (iu.list_arg >= 0) {
          if (static_cast<size_t>(iu.list_arg) < args.size()) {
            const auto items = plan.list_items(args[iu.list_arg]);
            for (size_t k = 0; k < items.size(); ++k) check(items[k], static_cast<int64_t>(k));
          }
        } else if (static_cast<size_t>(iu.arg) < args.size()) {
          int64_t dim = 0;
          if (iu.dim_arg >= 0) {
            const auto d = static_cast<size_t>(iu.dim_arg) < args.size() ? plan.int_value(args[iu.dim_arg])
                                                                         : std::nullopt;
            if (!d) {
              unknown = unknown || tainted(args[iu.arg]);
              continue;
            }
            dim = *d;
          }
          check(args[iu.arg], dim);
        }
        continue;
      }
      const bool same_values =
          std::find(std::begin(kSameValues), std::end(kSameValues), op) != std::end(kSameValues);
      const int32_t out = args.back();
      if (same_values && same.count(args[0])) {
        const fb::Tensor* t = plan.tensor(out);
        if (t != nullptr && is_integer(static_cast<ScalarType>(t->scalar_type()))) same.insert(out);
        else unknown = true;  // converted to floats: what it feeds is not followed
        continue;
      }
      bool reads = false;
      for (size_t i = 0; i + 1 < args.size(); ++i) reads = reads || tainted(args[i]);
      if (!reads) continue;
      if (op.find("local_scalar_dense") != std::string::npos || op.rfind("executorch_prim::", 0) == 0) {
        unknown = true;  // becomes a size or a position
        continue;
      }
      const fb::Tensor* t = plan.tensor(out);
      if (t != nullptr && is_integer(static_cast<ScalarType>(t->scalar_type()))) derived.insert(out);
    }
  }
  if (unknown) {
    use.kind = InputUse::Kind::Unknown;
  } else if (direct_index) {
    use.kind = InputUse::Kind::Index;
    use.bound = bound;
  }
  return use;
}

}  // namespace

std::vector<InputUse> integer_input_uses(const std::string& path, const std::string& method) {
  try {
    auto source = format::ByteSource::map_file(path);
    if (format::BundledProgram::is_bundled_program(source->bytes())) {
      auto bundled = std::make_shared<format::BundledProgram>(format::BundledProgram::parse(source->bytes(), source));
      const auto program = bundled->program();
      source = format::ByteSource::from_buffer(program, bundled, source->name());
    }
    const auto file = format::PteFile::parse(source, Verification::InternalConsistency);
    const auto index = file->find_plan(method);
    if (!index) return {};
    const Plan plan(file->plan(*index));
    std::vector<InputUse> uses;
    const auto* inputs = plan.fb().inputs();
    if (inputs == nullptr) return {};
    for (int32_t v : *inputs) {
      const fb::Tensor* t = plan.tensor(v);
      if (t == nullptr || !is_integer(static_cast<ScalarType>(t->scalar_type()))) {
        uses.emplace_back();
        continue;
      }
      uses.push_back(analyse(plan, v));
    }
    return uses;
  } catch (const std::exception&) {
    return {};  // the load itself reports what is wrong with the file
  }
}

}  // namespace etnp::cli
