// The load-time passes over a loaded method's instructions, decided on one UseAnalysis: constant layout
// folding and convolution fusion (fold_constants), copy elision of functionalized in-place updates
// (elide_copies) and the marking of instructions whose tensors can lack storage (mark_storage_checks).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include "etnp/program.h"
#include "compute/weight_cache.h"
#include "etnp/threadpool.h"
#include "runtime/method_impl.h"
#include "runtime/registry.h"
#include "runtime/use_analysis.h"

namespace etnp {

using runtime::bytes_of;
using runtime::Instruction;
using runtime::UseAnalysis;

void Method::Impl::fold_constants() {
  const UseAnalysis usage(instructions, values, tensors, *plan);
  FoldedConstants folded;
  std::vector<RehomedOutput> rehomed;
  for (size_t i = 0; i < instructions.size(); ++i) {
    fold_constant_layout(instructions[i], usage, folded);
    fold_convolution_epilogue(i, usage, rehomed);
    fold_silu(i, usage);
  }
  // After the loop: the chains read constants that a layout change (a dim-order copy) folded later on.
  for (size_t i = 0; i < instructions.size(); ++i) {
    fold_hard_activation(i, usage);
    fold_tanh_gelu(i, usage);
  }
}

namespace {

/// A number operand of an element-wise call: a Scalar, or a constant float32 tensor of one element.
std::optional<float> constant_number(const EValue* v) {
  if (v->is_scalar() && !v->is_bool()) return static_cast<float>(v->to_scalar().to_double());
  if (!v->is_tensor()) return std::nullopt;
  const Tensor& t = v->to_tensor();
  if (!t.is_constant() || t.dtype() != ScalarType::Float || t.numel() != 1 || t.data() == nullptr) return std::nullopt;
  return t.data_as<const float>()[0];
}

bool float_contiguous(const EValue* v) {
  return v->is_tensor() && v->to_tensor().dtype() == ScalarType::Float && v->to_tensor().is_contiguous_order();
}

/// Value `v`, a call's result, is not a method output and one call reads it, once, as an argument (its out slot
/// and returned value are the other two references); no tensor list holds it either (`uses` counts arguments only,
/// `by_value` follows lists): a fusion may fold its reader's read of it away.
bool read_once(const UseAnalysis& usage, size_t v) {
  return usage.tensor_lists_well_formed && !usage.io[v] && usage.uses[v] == 3 && usage.by_value(v).size() == 2;
}

/// A chain of element-wise calls over one input x, as the decompositions of activations make them: each call's
/// result has x's shape, is contiguous float32, is written by that call only (the last's may be a method output
/// too) and read by the next call that runs only, once. `at` lists the chain's calls.
struct ElementwiseChain {
  std::vector<Instruction>& instructions;
  std::vector<EValue>& values;
  const UseAnalysis& usage;
  const EValue* x;
  std::vector<size_t> at;

  bool in_values(const EValue* v) const { return v >= values.data() && v < values.data() + values.size(); }
  size_t index_of(const EValue* v) const { return static_cast<size_t>(v - values.data()); }

  /// The call's result (its out slot, also the returned value), or null where it is not as above.
  EValue* result_of(const Instruction& ins) const {
    EValue* out = ins.args.back();
    const Tensor& xt = x->to_tensor();
    if (ins.args.size() < 3 || ins.args[ins.args.size() - 2] != out || !in_values(out) || !float_contiguous(out) ||
        usage.writes[index_of(out)] != (usage.io[index_of(out)] ? 2u : 1u) ||
        !std::ranges::equal(out->to_tensor().sizes(), xt.sizes()) || out->to_tensor().dynamism() != xt.dynamism()) {
      return nullptr;
    }
    return out;
  }

  /// The call that runs next after the chain's last, when it is a kernel named `name` with `count` arguments that
  /// reads `v` once, at an input position; `v` (a result of the chain) read by nothing else. Appended to `at`.
  Instruction* next(const EValue* v, std::string_view name, size_t count, size_t* operand = nullptr) {
    if (!read_once(v)) return nullptr;
    const size_t pc = next_running();
    if (pc >= instructions.size()) return nullptr;
    Instruction& ins = instructions[pc];
    if (ins.kind != Instruction::Kind::Kernel || *ins.name != name || ins.args.size() != count) return nullptr;
    const auto first = std::find(ins.args.begin(), ins.args.end() - 2, v);
    if (first == ins.args.end() - 2 || std::count(ins.args.begin(), ins.args.end(), v) != 1) return nullptr;
    if (operand != nullptr) *operand = static_cast<size_t>(first - ins.args.begin());
    at.push_back(pc);
    return &ins;
  }

  bool read_once(const EValue* v) const { return in_values(v) && etnp::read_once(usage, index_of(v)); }

  /// The first instruction after the chain's last that runs (folded ones are skipped), or the end.
  size_t next_running() const {
    size_t pc = at.back() + 1;
    while (pc < instructions.size() && instructions[pc].kind == Instruction::Kind::Folded) ++pc;
    return pc;
  }

  /// A binary call's other operand than the one at `operand` (0 or 1).
  static const EValue* other(const Instruction& ins, size_t operand) { return ins.args[operand == 0 ? 1 : 0]; }

  /// The chain's last call runs `fused` on `args` (kept by the method); the others never run.
  void fuse(const KernelEntry& fused, std::span<EValue* const> args) {
    Instruction& last = instructions[at.back()];
    last.args = args;
    last.fn = fused.fn;
    last.prepare = fused.prepare;
    for (size_t i = 0; i + 1 < at.size(); ++i) instructions[at[i]].kind = Instruction::Kind::Folded;
  }

  /// Whether one pass may read x and write `y`: the same bytes, or apart.
  bool may_write(const EValue* y) const {
    const runtime::ByteRange xb = bytes_of(x->to_tensor()), yb = bytes_of(y->to_tensor());
    return !xb.overlaps(yb) || (xb.begin == yb.begin && xb.end == yb.end);
  }
};

}  // namespace

void Method::Impl::fold_tanh_gelu(size_t pc, const UseAnalysis& usage) {
  // GPT-2's GELU, 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3)))), written out in operators:
  // h = x * a, p = pow(x, 3), q = p * b, r = x + q, s = r * c, t = tanh(s), u = t + d, y = h * u. Eight passes
  // over memory become one etnp::tanh_gelu.out with the same bits (each multiply and add is commutative in
  // floating point, so the operands' order does not matter; the constants are taken as they are).
  Instruction& first = instructions[pc];
  if (first.kind != Instruction::Kind::Kernel || *first.name != "aten::mul.out" || first.args.size() != 4) return;
  size_t operand = 0;
  std::optional<float> a;
  for (operand = 0; operand < 2 && !a; ++operand) {
    if (float_contiguous(first.args[operand])) a = constant_number(first.args[operand == 0 ? 1 : 0]);
  }
  if (!a) return;
  EValue* x = first.args[operand - 1];
  ElementwiseChain chain{instructions, values, usage, x, {pc}};
  EValue* h = chain.result_of(first);
  if (h == nullptr || !chain.read_once(h)) return;
  // x is read by the first multiply, the power and the add: the power comes next.
  const size_t pc_pow = chain.next_running();
  if (pc_pow >= instructions.size()) return;
  Instruction& pow = instructions[pc_pow];
  if (pow.kind != Instruction::Kind::Kernel || *pow.name != "aten::pow.Tensor_Scalar_out" || pow.args.size() != 4 ||
      pow.args[0] != x || constant_number(pow.args[1]) != 3.0f) {
    return;
  }
  chain.at.push_back(pc_pow);
  EValue* v = chain.result_of(pow);
  // A multiply or add by a number: the number.
  auto by_number = [&](std::string_view name, size_t count) -> std::optional<float> {
    size_t at = 0;
    Instruction* ins = v == nullptr ? nullptr : chain.next(v, name, count, &at);
    if (ins == nullptr || (count == 5 && constant_number(ins->args[2]) != 1.0f)) return std::nullopt;
    const std::optional<float> k = constant_number(ElementwiseChain::other(*ins, at));
    v = k ? chain.result_of(*ins) : nullptr;
    return v != nullptr ? k : std::nullopt;
  };
  const std::optional<float> b = by_number("aten::mul.out", 4);
  if (!b) return;
  // r = x + q (alpha 1)
  size_t at = 0;
  Instruction* add = chain.next(v, "aten::add.out", 5, &at);
  if (add == nullptr || ElementwiseChain::other(*add, at) != x || constant_number(add->args[2]) != 1.0f ||
      (v = chain.result_of(*add)) == nullptr) {
    return;
  }
  const std::optional<float> c = by_number("aten::mul.out", 4);
  if (!c) return;
  Instruction* tanh = chain.next(v, "aten::tanh.out", 3);
  if (tanh == nullptr || (v = chain.result_of(*tanh)) == nullptr) return;
  const std::optional<float> d = by_number("aten::add.out", 5);
  if (!d) return;
  // y = h * u
  Instruction* last = chain.next(v, "aten::mul.out", 4, &at);
  if (last == nullptr || ElementwiseChain::other(*last, at) != h) return;
  EValue* y = chain.result_of(*last);
  if (y == nullptr || !chain.may_write(y)) return;
  const KernelEntry* fused = runtime::kernel_registry().find("etnp::tanh_gelu.out");
  if (fused == nullptr) return;
  auto number = [&](float k) { return &load_time_values.emplace_back(EValue::from_double(k)); };
  chain.fuse(*fused, load_time_args.emplace_back(
                         std::vector<EValue*>{x, number(*a), number(*b), number(*c), number(*d), y, y}));
}

void Method::Impl::fold_hard_activation(size_t pc, const UseAnalysis& usage) {
  // Exporters decompose hardswish (MobileNetV3's activation) into y = x * clamp(x + 3, 0, 6) / 6 as an add, one
  // or two clamps, a multiply and a divide (hardsigmoid, its squeeze-excitation gate: the same without the
  // multiply): four or five passes over memory where one does, with the same bits (each step rounds to float
  // as it did; aten::hardswish.out computes them in this order).
  Instruction& add = instructions[pc];
  if (add.kind != Instruction::Kind::Kernel || *add.name != "aten::add.out" || add.args.size() != 5) return;
  EValue* x = add.args[0];
  if (!float_contiguous(x) || constant_number(add.args[1]) != 3.0f || constant_number(add.args[2]) != 1.0f) return;
  ElementwiseChain chain{instructions, values, usage, x, {pc}};
  EValue* v = chain.result_of(add);
  // clamp(min 0) then clamp(max 6), or clamp(0, 6), or hardtanh(0, 6).
  bool low = false, high = false;
  while (v != nullptr && !(low && high)) {
    Instruction* c = chain.next(v, "aten::clamp.out", 5);
    if (c == nullptr) {
      c = chain.next(v, "aten::hardtanh.out", 5);
    }
    if (c == nullptr || c->args[0] != v) return;
    const bool lo = constant_number(c->args[1]) == 0.0f, hi = constant_number(c->args[2]) == 6.0f;
    if ((!lo && !c->args[1]->is_none()) || (!hi && !c->args[2]->is_none()) || (lo && low) || (hi && high) ||
        (!lo && !hi)) {
      return;
    }
    low = low || lo;
    high = high || hi;
    v = chain.result_of(*c);
  }
  if (v == nullptr) return;
  // Then hardsigmoid: div(c, 6); hardswish: mul(x, c) or mul(c, x), then div(m, 6).
  const char* fused_name = "aten::hardsigmoid.out";
  size_t operand = 0;
  Instruction* last = chain.next(v, "aten::mul.out", 4, &operand);
  if (last != nullptr) {
    if (ElementwiseChain::other(*last, operand) != x || (v = chain.result_of(*last)) == nullptr) return;
    fused_name = "aten::hardswish.out";
  }
  last = chain.next(v, "aten::div.out", 4, &operand);
  if (last == nullptr || operand != 0 || constant_number(last->args[1]) != 6.0f) return;
  EValue* y = chain.result_of(*last);
  if (y == nullptr || !chain.may_write(y)) return;
  const KernelEntry* fused = runtime::kernel_registry().find(fused_name);
  if (fused == nullptr) return;
  chain.fuse(*fused, load_time_args.emplace_back(std::vector<EValue*>{x, y, y}));
}

void Method::Impl::fold_silu(size_t pc, const UseAnalysis& usage) {
  // Exporters decompose SiLU (EfficientNet's activation, a Llama MLP's gate) into s = sigmoid(x) and y = x * s:
  // two passes over memory where one does, with the same bits (compute/vector_math.h's VectorOp::Silu).
  Instruction& sigmoid = instructions[pc];
  if (sigmoid.kind != Instruction::Kind::Kernel || *sigmoid.name != "aten::sigmoid.out" || sigmoid.args.size() != 3 ||
      pc + 1 >= instructions.size()) {
    return;
  }
  Instruction& mul = instructions[pc + 1];
  if (mul.kind != Instruction::Kind::Kernel || *mul.name != "aten::mul.out" || mul.args.size() != 4) return;
  const KernelEntry* silu = runtime::kernel_registry().find("aten::silu.out");
  if (silu == nullptr) return;
  EValue* x = sigmoid.args[0];
  EValue* s = sigmoid.args[1];
  EValue* y = mul.args[2];
  const bool operands = (mul.args[0] == x && mul.args[1] == s) || (mul.args[0] == s && mul.args[1] == x);
  const size_t s_index = static_cast<size_t>(s - values.data());
  // s: written by the sigmoid, read by the multiply only; y: the multiply's output, x's shape (no broadcast).
  if (!operands || x == s || sigmoid.args[2] != s || mul.args[3] != y || y == x || y == s ||
      !read_once(usage, s_index) || !float_contiguous(x) || !float_contiguous(s) || !float_contiguous(y) ||
      !std::ranges::equal(x->to_tensor().sizes(), y->to_tensor().sizes()) ||
      x->to_tensor().dynamism() != y->to_tensor().dynamism()) {
    return;
  }
  mul.args = load_time_args.emplace_back(std::vector<EValue*>{x, y, y});
  mul.fn = silu->fn;
  mul.prepare = silu->prepare;
  sigmoid.kind = Instruction::Kind::Folded;
}

namespace {

/// Operators whose result at an index depends only on their tensor operands at that index when every tensor
/// argument has one shape: the order of the bytes does not matter to them, so an NHWC group may run through them.
constexpr std::string_view kLayoutFreeOps[] = {
    "aten::relu.out",        "aten::hardtanh.out", "aten::clamp.out",      "aten::add.out",
    "aten::sub.out",         "aten::mul.out",      "aten::div.out",        "aten::sigmoid.out",
    "aten::tanh.out",        "aten::silu.out",     "aten::hardswish.out",  "aten::hardsigmoid.out",
    "aten::leaky_relu.out",  "aten::gelu.out",     "aten::neg.out",        "aten::abs.out",
    "aten::elu.out",         "aten::exp.out",      "aten::maximum.out",    "aten::minimum.out",
    "etnp::tanh_gelu.out"};

}  // namespace

void Method::Impl::pair_channels_last() {
  // A convolution on small maps transposes its input to NHWC and its result back (kernels/conv.cpp); between two
  // of them both transposes are wasted, and so they are across the operators that keep a layout between them:
  // max pooling, concatenation along channels, a batch norm, a squeeze-and-excitation gate's mean over the pixels
  // and product by one value per channel (KernelState::keeps_channels_last), and element-wise operators
  // whose tensor arguments all have one shape (kLayoutFreeOps: the bytes' order does not matter to them). The
  // values such an operator connects are NHWC all together or not at all: a group. A group is NHWC when every
  // reference to each of its values is an exchanging kernel's argument 0 or result, a layout-keeping kernel's
  // named argument, or an element-wise operand or result (nothing else may see the bytes: a view, a move, a
  // free, a method output, a jump), and an exchanging kernel reads or writes it (else nothing is saved).
  // Nothing to pair without a kernel that exchanges layouts (a recurrent or transformer network has none): the
  // analysis below is most of a small program's load otherwise.
  if (std::none_of(instructions.begin(), instructions.end(), [](const Instruction& ins) {
        return ins.kind == Instruction::Kind::Kernel && ins.state != nullptr && ins.state->exchanges_channels_last();
      })) {
    return;
  }
  const UseAnalysis usage(instructions, values, tensors, *plan);
  if (usage.has_jumps || !usage.tensor_lists_well_formed) return;
  const size_t count = values.size();

  // What each instruction may do with a value in NHWC order: read it (`reads`), write it (`writes`); any other
  // reference to the value pins it to its own order.
  struct Access {
    enum class Role : uint8_t { None, Exchanges, Keeps, LayoutFree } role = Role::None;
    std::vector<uint32_t> reads, writes, others;  // `others`: the tensors a layout-keeping call must find unread
    std::vector<uint32_t> held;  // every value its arguments before the return slot (which repeats the outputs) hold
  };
  std::vector<Access> access(instructions.size());
  for (size_t pc = 0; pc < instructions.size(); ++pc) {
    const Instruction& ins = instructions[pc];
    if (ins.kind != Instruction::Kind::Kernel || ins.args.size() < 3) continue;
    Access& a = access[pc];
    for (size_t at = 0; at + 1 < ins.args.size(); ++at) usage.values_at(ins.args[at], a.held);
    const EValue* result = ins.args.back();
    if (ins.state != nullptr && ins.state->exchanges_channels_last()) {
      a.role = Access::Role::Exchanges;
      const auto refs = [&](const EValue* v) { return std::count(ins.args.begin(), ins.args.end(), v); };
      if (ins.args[0]->is_tensor() && refs(ins.args[0]) == 1) usage.values_at(ins.args[0], a.reads);
      if (result->is_tensor() && ins.args[ins.args.size() - 2] == result && refs(result) == 2) {
        usage.values_at(result, a.writes);
      }
    } else if (ins.state != nullptr && !ins.state->keeps_channels_last().inputs.empty()) {
      a.role = Access::Role::Keeps;
      const KernelState::ChannelsLastArgs named = ins.state->keeps_channels_last();
      std::vector<bool> is_named(ins.args.size(), false);
      for (size_t at : named.inputs) {
        if (at < ins.args.size()) usage.values_at(ins.args[at], a.reads), is_named[at] = true;
      }
      for (size_t at : named.outputs) {
        if (at < ins.args.size()) usage.values_at(ins.args[at], a.writes), is_named[at] = true;
      }
      for (size_t at : named.neutral) {
        if (at < ins.args.size()) is_named[at] = true;  // the same bytes in either order: no group, no constraint
      }
      for (size_t at = 0; at + 1 < ins.args.size(); ++at) {
        if (!is_named[at]) usage.values_at(ins.args[at], a.others);
      }
    } else if (std::find(std::begin(kLayoutFreeOps), std::end(kLayoutFreeOps), *ins.name) != std::end(kLayoutFreeOps) &&
               result->is_tensor() && ins.args[ins.args.size() - 2] == result) {
      const Tensor& out = result->to_tensor();
      const bool one_shape = std::all_of(ins.args.begin(), ins.args.end(), [&](const EValue* arg) {
        return arg->is_tensor() ? std::ranges::equal(arg->to_tensor().sizes(), out.sizes())
                                : arg->tag() != Tag::ListTensor && arg->tag() != Tag::ListOptionalTensor;
      });
      if (!one_shape) continue;
      a.role = Access::Role::LayoutFree;
      for (size_t at = 0; at + 2 < ins.args.size(); ++at) usage.values_at(ins.args[at], a.reads);
      usage.values_at(result, a.writes);
    }
  }

  // A value may be NHWC when it is a planned, static, contiguous tensor that no method input or output, move or
  // free touches, and every instruction that references it (through lists too) does so only where it may.
  std::vector<bool> may(count, false), exchanged(count, false);
  for (size_t v = 0; v < count; ++v) {
    if (!values[v].is_tensor() || usage.io[v] || usage.freed_or_moved[v] || usage.by_value(v).empty()) continue;
    const Tensor& t = values[v].to_tensor();
    if (t.is_constant() || t.data() == nullptr || t.dynamism() != ShapeDynamism::Static || !t.is_contiguous_order()) {
      continue;
    }
    bool ok = true, written = false;
    for (const uint32_t pc : usage.by_value(v)) {
      if (instructions[pc].kind == Instruction::Kind::Folded) continue;  // an activation folded into the writer
      const Access& a = access[pc];
      const auto reads = std::count(a.reads.begin(), a.reads.end(), v);
      const auto writes = std::count(a.writes.begin(), a.writes.end(), v);
      // Held nowhere else in the call's arguments than where it reads or writes it.
      if (a.role == Access::Role::None || reads + writes == 0 ||
          std::count(a.held.begin(), a.held.end(), v) != reads + writes ||
          (a.role == Access::Role::Exchanges && reads > 0 && writes > 0)) {
        ok = false;
        break;
      }
      written = written || writes > 0;
      exchanged[v] = exchanged[v] || a.role == Access::Role::Exchanges;
    }
    may[v] = ok && written;
  }

  // Groups: the values one layout-keeping or element-wise call joins.
  std::vector<size_t> parent(count);
  for (size_t v = 0; v < count; ++v) parent[v] = v;
  const auto root = [&](size_t v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];  // halving the path on the way
    return v;
  };
  std::vector<bool> group_ok(count, true), group_exchanged(count, false);
  for (size_t pc = 0; pc < instructions.size(); ++pc) {
    const Access& a = access[pc];
    if (a.role != Access::Role::Keeps && a.role != Access::Role::LayoutFree) continue;
    std::vector<uint32_t> members = a.reads;
    members.insert(members.end(), a.writes.begin(), a.writes.end());
    if (members.empty()) continue;
    bool unread_others = true;
    for (const uint32_t o : a.others) {
      unread_others = unread_others && !usage.io[o] && usage.by_value(o).size() == 1 && usage.by_value(o)[0] == pc;
    }
    const size_t first = root(members[0]);
    if (!unread_others) group_ok[first] = false;
    for (const uint32_t m : members) {
      const size_t r = root(m);
      if (r == first) continue;
      parent[r] = first;
      group_ok[first] = group_ok[first] && group_ok[r];
    }
  }
  for (size_t v = 0; v < count; ++v) {
    const size_t r = root(v);
    group_ok[r] = group_ok[r] && may[v];
    group_exchanged[r] = group_exchanged[r] || exchanged[v];
  }
  // No other tensor may see a member's bytes: none that the plan puts there may be referenced while the member is,
  // and those referenced after it must be written whole first, themselves or through a tensor holding their bytes
  // written whole after the member's last reference (else they could be a view the exporter planned on them,
  // reading NHWC bytes; a detection head's reshaped outputs, which a cat reads, are such views of bytes their
  // convolutions wrote later). References by folded instructions do not count: those never run. (Checked last,
  // for the groups still in the running: it scans the method.)
  constexpr uint32_t kNever = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> first_run(count, kNever), last_run(count, 0);
  for (size_t w = 0; w < count; ++w) {
    for (const uint32_t pc : usage.by_value(w)) {
      if (instructions[pc].kind == Instruction::Kind::Folded) continue;
      first_run[w] = std::min(first_run[w], pc);
      last_run[w] = std::max(last_run[w], pc);
    }
  }
  auto written_whole_at_first_run = [&](size_t w) {
    return usage.by_value(w).front() == first_run[w] && usage.produced[w];
  };
  // The tensors that run, by where their bytes begin, with the running maximum of their ends, so that the checks
  // below visit only those overlapping a range (visiting every value for each candidate was 8% of EfficientNet-B0's
  // load); those whose storage is only known when they run, apart.
  struct Placed {
    runtime::ByteRange range;
    uint32_t value;
  };
  std::vector<Placed> placed;
  std::vector<uint32_t> unplaced;
  for (size_t w = 0; w < count; ++w) {
    if (first_run[w] == kNever || !values[w].is_tensor()) continue;
    const Tensor& t = values[w].to_tensor();
    if (t.data() != nullptr) {
      placed.push_back({bytes_of(t), static_cast<uint32_t>(w)});
    } else if (t.capacity_numel() > 0) {
      unplaced.push_back(static_cast<uint32_t>(w));
    }
  }
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) { return a.range.begin < b.range.begin; });
  std::vector<uintptr_t> max_end(placed.size());
  for (size_t i = 0; i < placed.size(); ++i) max_end[i] = std::max(i > 0 ? max_end[i - 1] : 0, placed[i].range.end);
  // Calls fn(w) for each placed tensor w overlapping `range` until it returns false; false then.
  auto each_overlapping = [&](const runtime::ByteRange& range, auto&& fn) {
    const auto past = std::lower_bound(placed.begin(), placed.end(), range.end,
                                       [](const Placed& p, uintptr_t end) { return p.range.begin < end; });
    for (auto i = static_cast<size_t>(past - placed.begin()); i-- > 0 && max_end[i] > range.begin;) {
      if (placed[i].range.overlaps(range) && !fn(static_cast<size_t>(placed[i].value))) return false;
    }
    return true;
  };
  // Whether another tensor holding all of w's bytes is written whole after `after` and by w's first reference.
  auto rewritten_after = [&](size_t w, uint32_t after) {
    const runtime::ByteRange range = bytes_of(values[w].to_tensor());
    return !each_overlapping(range, [&](size_t u) {
      const bool rewrites = u != w && first_run[u] > after && first_run[u] <= first_run[w] &&
                            written_whole_at_first_run(u) && bytes_of(values[u].to_tensor()).contains(range);
      return !rewrites;
    });
  };
  auto bytes_private = [&](size_t v) {
    const auto during = [&](size_t w) { return first_run[w] <= last_run[v] && last_run[w] >= first_run[v]; };
    for (const uint32_t w : unplaced) {
      if (w != v && during(w)) return false;
    }
    return each_overlapping(bytes_of(values[v].to_tensor()), [&](size_t w) {
      if (w == v || last_run[w] < first_run[v]) return true;
      return !during(w) && (written_whole_at_first_run(w) || rewritten_after(w, last_run[v]));
    });
  };
  for (size_t v = 0; v < count; ++v) {
    const size_t r = root(v);
    if (may[v] && group_ok[r] && group_exchanged[r]) group_ok[r] = bytes_private(v);
  }
  auto nhwc = [&](size_t v) { return group_ok[root(v)] && group_exchanged[root(v)]; };
  auto all_nhwc = [&](const std::vector<uint32_t>& list) {
    return !list.empty() && std::all_of(list.begin(), list.end(), nhwc);
  };
  for (size_t pc = 0; pc < instructions.size(); ++pc) {
    const Access& a = access[pc];
    if (a.role == Access::Role::Exchanges) {
      const bool in = all_nhwc(a.reads), out = all_nhwc(a.writes);
      if (in || out) instructions[pc].state->use_channels_last(in, out);
    } else if (a.role == Access::Role::Keeps && all_nhwc(a.reads) && (a.writes.empty() || all_nhwc(a.writes))) {
      instructions[pc].state->use_channels_last(true, true);
    }
  }
}

void Method::Impl::fold_constant_layout(Instruction& ins, const UseAnalysis& usage, FoldedConstants& folded) {
  // Exporters leave layout changes of weights in the graph (a linear's permute_copy before its mm), and dtype
  // changes of constant numbers (the 3 and 6 of a decomposed hardswish, as float tensors). Their inputs never
  // change, so they run once here, into memory the method keeps, and the run loop skips them; the kernels after
  // them see constants they can pre-pack.
  static constexpr std::string_view kFoldable[] = {"aten::permute_copy.out", "aten::transpose_copy.int_out",
                                                   "aten::t_copy.out", "dim_order_ops::_to_dim_order_copy.out",
                                                   "dim_order_ops::_clone_dim_order.out"};
  if (ins.kind != Instruction::Kind::Kernel ||
      std::find(std::begin(kFoldable), std::end(kFoldable), *ins.name) == std::end(kFoldable)) {
    return;
  }
  if (ins.args.size() < 2 || !ins.args.front()->is_tensor() || !ins.args.front()->to_tensor().is_constant()) return;
  EValue* out_value = ins.args.back();
  const size_t out_index = static_cast<size_t>(out_value - values.data());
  // Only this instruction writes the output.
  if (!out_value->is_tensor() || usage.writes[out_index] != 1) return;
  Tensor& out = out_value->to_tensor();
  if (out.is_constant() || out.dynamism() != ShapeDynamism::Static || out.data() == nullptr) return;
  for (size_t k = 1; k + 1 < ins.args.size(); ++k) {
    if (ins.args[k] != out_value && ins.args[k]->is_tensor()) return;
  }
  if (fold_transpose_as_view(ins, usage)) return;
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
  // Layers that share their weights fold the same permutation once each: equal results keep one buffer.
  const auto* bytes = static_cast<const uint8_t*>(out.data());
  const uint64_t hash = compute::hash_bytes(std::as_bytes(std::span<const uint8_t>(bytes, folded_bytes)));
  const auto [first, last] = folded.equal_range(hash);
  const auto same = std::find_if(first, last, [&](const auto& entry) {
    return entry.second.second == folded_bytes && std::memcmp(entry.second.first, bytes, folded_bytes) == 0;
  });
  if (same != last) {
    out.set_data(const_cast<uint8_t*>(same->second.first));
    owned_buffers.pop_back();
    owned_bytes -= folded_bytes;
  } else {
    folded.emplace(hash, std::make_pair(bytes, folded_bytes));
  }
  out.set_constant(true);
  ins.kind = Instruction::Kind::Folded;
  // The folded input is not read at run time (unless another instruction shares it: then it comes back from
  // the file): its file pages are released, as a delegate's are.
  release_file_pages(bytes_of(ins.args.front()->to_tensor()).span());
}

bool Method::Impl::fold_transpose_as_view(Instruction& ins, const UseAnalysis& usage) {
  // A linear layer's weight, transposed for its mm: the matrix packing of mm and addmm reads either layout,
  // so the transpose becomes a dim order over the constant's own bytes. No copy is made (nor kept beside
  // the packing), and the file's bytes are read once, by the packing.
  const Tensor& in = ins.args.front()->to_tensor();
  EValue* out_value = ins.args.back();
  const auto out_index = static_cast<uint32_t>(out_value - values.data());
  const Tensor& out = out_value->to_tensor();
  if (in.dtype() != ScalarType::Float || out.dtype() != ScalarType::Float || in.dim() != 2 ||
      !in.is_contiguous_order() || !out.is_contiguous_order() || out.size(0) != in.size(1) ||
      out.size(1) != in.size(0) || usage.io[out_index] || !usage.tensor_lists_well_formed) {
    return false;
  }
  // The operator swaps the two dimensions (a permutation [1, 0], a transpose of 0 and 1, t).
  const auto dim = [](int64_t d) { return d < 0 ? d + 2 : d; };
  if (*ins.name == "aten::permute_copy.out") {
    if (ins.args.size() != 4 || ins.args[1]->tag() != Tag::ListInt) return false;
    const auto dims = ins.args[1]->to_int_list();
    if (dims.size() != 2 || dim(dims[0]) != 1 || dim(dims[1]) != 0) return false;
  } else if (*ins.name == "aten::transpose_copy.int_out") {
    if (ins.args.size() != 5 || !ins.args[1]->is_int() || !ins.args[2]->is_int() ||
        dim(ins.args[1]->to_int()) == dim(ins.args[2]->to_int())) {
      return false;
    }
  } else if (*ins.name != "aten::t_copy.out" || ins.args.size() != 3) {
    return false;
  }
  // Every other reference is the weight operand of mm (mat2) or addmm (mat2), and nothing else of theirs.
  const auto this_pc = static_cast<uint32_t>(&ins - instructions.data());
  std::vector<std::pair<uint32_t, size_t>> readers;  // (instruction, argument)
  for (const uint32_t pc : usage.by_value(out_index)) {
    if (pc == this_pc) continue;
    const Instruction& reader = instructions[pc];
    if (reader.kind != Instruction::Kind::Kernel) return false;
    const size_t weight_arg = *reader.name == "aten::mm.out" ? 1 : *reader.name == "aten::addmm.out" ? 2 : 0;
    if (weight_arg == 0 || weight_arg >= reader.args.size()) return false;
    for (size_t k = 0; k < reader.args.size(); ++k) {
      if ((reader.args[k] == out_value) != (k == weight_arg)) return false;
    }
    readers.emplace_back(pc, weight_arg);
  }
  if (readers.empty()) return false;

  const uint8_t transposed[2] = {1, 0};
  Tensor& view = load_time_tensors.emplace_back(ScalarType::Float, out.sizes(), std::span<const uint8_t>(transposed, 2),
                                                const_cast<void*>(in.data()));
  view.set_constant(true);
  EValue* view_value = &load_time_values.emplace_back(EValue::from_tensor(&view));
  for (const auto& [pc, arg] : readers) {
    EValue** reader_args = arg_storage.data() + (instructions[pc].args.data() - arg_storage.data());
    reader_args[arg] = view_value;
  }
  ins.kind = Instruction::Kind::Folded;
  // Packed at load, the constant is not read at run time (unless a reader could not pack it: then its pages
  // come back from the file).
  release_file_pages(bytes_of(in).span());
  return true;
}

namespace {

/// The clamp an activation applies, [lo, hi] (an open end infinite), when `act` is one the fused convolution
/// can apply: relu, hardtanh and clamp with number bounds (a NaN bound, or none at all, stays a kernel call).
bool activation_bounds(const Instruction& act, float& lo, float& hi) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  auto bound = [](const EValue* v, float none, float& b) {
    if (v->is_none()) {
      b = none;
      return true;
    }
    if (!v->is_scalar() || v->is_bool()) return false;
    b = static_cast<float>(v->to_scalar().to_double());
    return !std::isnan(b);
  };
  if (*act.name == "aten::relu.out" && act.args.size() == 3) {
    lo = 0.0f;
    hi = kInf;
    return true;
  }
  if ((*act.name == "aten::hardtanh.out" || *act.name == "aten::clamp.out") && act.args.size() == 5) {
    if (*act.name == "aten::hardtanh.out" && (act.args[1]->is_none() || act.args[2]->is_none())) return false;
    if (act.args[1]->is_none() && act.args[2]->is_none()) return false;
    return bound(act.args[1], -kInf, lo) && bound(act.args[2], kInf, hi);
  }
  return false;
}

}  // namespace

bool Method::Impl::rehome_chain_output(size_t pc, size_t chain_end, EValue* target, EValue* last,
                                       const UseAnalysis& usage, std::vector<RehomedOutput>& rehomed_outputs) {
  // `last`, the output of the chain [pc, chain_end] a fusion folds, shares bytes with the convolution's input; the
  // convolution's own output `target` does not (both are live at pc). The readers of `last` may read `target`
  // instead when: `last` is no method input or output, no move or free touches it, and kernels read it as
  // arguments only (no tensor list holds it), all after the chain; and nothing else touches `target`'s bytes
  // until its last new reader (the snapshot's references of the instructions that still run, and the outputs
  // this pass re-homed before, over their new lifetimes).
  auto index_of = [&](const EValue* v) { return static_cast<size_t>(v - values.data()); };
  auto in_table = [&](const EValue* v) { return v >= values.data() && v < values.data() + values.size(); };
  if (!in_table(target) || !in_table(last) || target == last) return false;
  const size_t l = index_of(last), t = index_of(target);
  if (usage.io[l] || usage.freed_or_moved[l] || usage.io[t] || !usage.tensor_lists_well_formed) return false;
  std::vector<size_t> readers;
  uint32_t direct = 2;  // the chain's last call: its out slot and returned value
  for (const uint32_t at : usage.by_value(l)) {
    if (at <= chain_end) {
      if (at != chain_end) return false;
      continue;
    }
    const Instruction& reader = instructions[at];
    if (reader.kind != Instruction::Kind::Kernel || std::find(reader.args.begin(), reader.args.end(), last) == reader.args.end() ||
        reader.args.back() == last) {
      return false;
    }
    direct += static_cast<uint32_t>(std::count(reader.args.begin(), reader.args.end(), last));
    readers.push_back(at);
  }
  if (readers.empty() || usage.uses[l] != direct) return false;  // a tensor list (or a jump) references it too
  const size_t until = readers.back();
  Tensor& target_tensor = target->to_tensor();
  runtime::ByteRange range = bytes_of(target_tensor);
  auto untouched = [&] {
    const Tensor* chain_values[] = {&last->to_tensor(), &target_tensor};
    for (size_t at = pc; at <= until; ++at) {
      if (instructions[at].kind == Instruction::Kind::Folded || (at > pc && at <= chain_end)) continue;
      for (const uint32_t v : usage.by_instr(at)) {
        const Tensor& other = values[v].to_tensor();
        if (&other == chain_values[0] || &other == chain_values[1]) continue;
        if (other.data() == nullptr && other.capacity_numel() > 0) return false;  // storage known only at run
        if (bytes_of(other).overlaps(range)) return false;
      }
    }
    for (const RehomedOutput& r : rehomed_outputs) {
      if (r.from <= until && r.until >= pc && runtime::ByteRange{r.begin, r.end}.overlaps(range)) return false;
    }
    return true;
  };
  if (!untouched()) {
    // The plan's two-buffer ping-pong (MobileNetV2's) leaves the convolution's own bytes to the readers' outputs:
    // the output moves to planned bytes nothing live uses over its new lifetime, when there are such.
    if (target_tensor.dynamism() != ShapeDynamism::Static) return false;
    const uintptr_t home = free_planned_bytes(range.end - range.begin, pc, until, usage, rehomed_outputs,
                                              {static_cast<uint32_t>(l), static_cast<uint32_t>(t)});
    if (home == 0) return false;
    target_tensor.set_data(reinterpret_cast<void*>(home));
    range = bytes_of(target_tensor);
  }
  for (const size_t at : readers) {
    Instruction& reader = instructions[at];
    std::vector<EValue*> args(reader.args.begin(), reader.args.end());
    std::replace(args.begin(), args.end(), last, target);
    reader.args = load_time_args.emplace_back(std::move(args));
  }
  rehomed_outputs.push_back({range.begin, range.end, pc, until});
  return true;
}

uintptr_t Method::Impl::free_planned_bytes(size_t bytes, size_t from, size_t until, const UseAnalysis& usage,
                                           const std::vector<RehomedOutput>& rehomed_outputs,
                                           std::initializer_list<uint32_t> except) const {
  constexpr uintptr_t kAlign = 64;  // from the buffer's start, as planners align offsets
  std::vector<runtime::ByteRange> taken;
  if (bytes == 0 || !usage.live_bytes(values, static_cast<uint32_t>(from), static_cast<uint32_t>(until), except,
                                      taken)) {
    return 0;
  }
  for (const RehomedOutput& r : rehomed_outputs) {
    if (r.from <= until && r.until >= from) taken.push_back({r.begin, r.end});
  }
  std::ranges::sort(taken, {}, &runtime::ByteRange::begin);
  const auto* sizes = plan->non_const_buffer_sizes();
  for (size_t a = 0; a < arenas.size(); ++a) {
    const auto base = reinterpret_cast<uintptr_t>(arenas[a].data());
    const uintptr_t end = base + static_cast<uintptr_t>(sizes->Get(static_cast<flatbuffers::uoffset_t>(a + 1)));
    auto aligned = [&](uintptr_t p) { return base + ((p - base + kAlign - 1) & ~(kAlign - 1)); };
    uintptr_t at = base;
    for (const runtime::ByteRange& r : taken) {
      if (r.end <= at || r.begin >= end) continue;
      if (r.begin >= at + bytes) break;  // the gap before r holds it
      at = aligned(r.end);
    }
    if (at + bytes <= end) return at;
  }
  return 0;
}

void Method::Impl::fold_convolution_epilogue(size_t pc, const UseAnalysis& usage,
                                             std::vector<RehomedOutput>& rehomed_outputs) {
  // A float convolution followed by an inference batch norm on constants, an activation (relu, hardtanh,
  // clamp), or both, becomes one etnp::convolution_affine_clamp.out: the batch norm as a scale per channel
  // and a shifted bias, applied with the activation's clamp as each output tile leaves the convolution (what
  // the XNNPACK exporter does before lowering, done at load). Their memory passes disappear, the convolution
  // writes the last one's output, and its weights stay where they are: no scaled copy is made.
  constexpr std::string_view kConv = "aten::convolution.out";
  constexpr std::string_view kBatchNorm = "aten::_native_batch_norm_legit_no_training.out";
  Instruction& conv = instructions[pc];
  if (conv.kind != Instruction::Kind::Kernel || *conv.name != kConv || conv.args.size() != 11) return;
  const KernelEntry* fused = runtime::kernel_registry().find("etnp::convolution_affine_clamp.out");
  if (fused == nullptr) return;
  auto index_of = [&](const EValue* v) { return static_cast<size_t>(v - values.data()); };
  auto constant_f32 = [&](const EValue* v, int64_t numel) {
    return float_contiguous(v) && v->to_tensor().is_constant() && v->to_tensor().numel() == numel;
  };
  // conv(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out, ret)
  EValue* out = conv.args[9];  // then the output of the last call fused
  if (conv.args[10] != out || !float_contiguous(out) || !float_contiguous(conv.args[0]) ||
      !conv.args[1]->is_tensor() || !conv.args[6]->is_bool() || conv.args[6]->to_bool()) {
    return;
  }
  const Tensor& w = conv.args[1]->to_tensor();
  if (w.dim() < 3 || !constant_f32(conv.args[1], w.numel())) return;
  const int64_t channels = w.size(0);
  const bool has_bias = !conv.args[2]->is_none();
  if (has_bias && !constant_f32(conv.args[2], channels)) return;
  const Tensor& conv_in = conv.args[0]->to_tensor();
  if (conv_in.data() == nullptr) return;

  // The kernel call at `at` that reads `value` (its first argument) and is its only reader: `value` is the out
  // value of the call before (`refs` references there: out, and the returned value when the same), read once.
  auto sole_reader = [&](const EValue* value, size_t at, uint32_t refs) -> Instruction* {
    if (at >= instructions.size() || usage.uses[index_of(value)] != refs + 1) return nullptr;
    Instruction& next = instructions[at];
    if (next.kind != Instruction::Kind::Kernel || next.args.size() < 2 || next.args[0] != value) return nullptr;
    for (size_t k = 1; k < next.args.size(); ++k) {
      if (next.args[k] == value) return nullptr;
    }
    return &next;
  };
  // `candidate` takes the place of `current`: same shape and dynamism, contiguous float32, with storage.
  auto same_kind = [&](const EValue* candidate, const EValue* current) {
    if (!float_contiguous(candidate)) return false;
    const Tensor& o = candidate->to_tensor();
    const Tensor& c = current->to_tensor();
    return std::ranges::equal(o.sizes(), c.sizes()) && o.dynamism() == c.dynamism() && o.data() != nullptr;
  };
  // The convolution can write `candidate`: bytes apart from its input (the memory plan may have given them the
  // input's bytes, whose lifetime ended there before the fusion).
  auto apart_from_input = [&](const EValue* candidate) {
    return !bytes_of(conv_in).overlaps(bytes_of(candidate->to_tensor()));
  };

  size_t next = pc + 1;
  // bn(input, weight, bias, mean, var, momentum, eps, out, save_mean, save_invstd, ret): the batch statistics
  // outputs (empty in inference) unused.
  Instruction* bn = sole_reader(out, next, 2);
  if (bn != nullptr &&
      (*bn->name != kBatchNorm || bn->args.size() != 11 || !bn->args[6]->is_double() ||
       (bn->args[10] != bn->args[7] && usage.uses[index_of(bn->args[10])] != 1) ||
       (!bn->args[1]->is_none() && !constant_f32(bn->args[1], channels)) ||
       (!bn->args[2]->is_none() && !constant_f32(bn->args[2], channels)) || !constant_f32(bn->args[3], channels) ||
       !constant_f32(bn->args[4], channels) || usage.uses[index_of(bn->args[8])] != 1 ||
       usage.uses[index_of(bn->args[9])] != 1 || !same_kind(bn->args[7], out))) {
    bn = nullptr;
  }
  uint32_t refs = 2;  // the convolution's out and returned value
  if (bn != nullptr) {
    out = bn->args[7];
    refs = bn->args[10] == bn->args[7] ? 2 : 1;  // or the batch norm's returned tuple, apart
    ++next;
  }
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float lo = -kInf, hi = kInf, act_lo = 0.0f, act_hi = 0.0f;  // no activation: no clamp
  Instruction* act = sole_reader(out, next, refs);
  if (act != nullptr && (!activation_bounds(*act, act_lo, act_hi) ||
                         act->args.back() != act->args[act->args.size() - 2] || !same_kind(act->args.back(), out))) {
    act = nullptr;
  }
  // The convolution writes the last output only (the ones between are not written at all): that one must be
  // apart from its input. Where the plan gave it the input's bytes (their lifetimes met at the chain), the
  // convolution writes its own output instead and the last output's readers read that (rehome_chain_output);
  // else one fewer.
  EValue* const last = act != nullptr ? act->args.back() : (bn != nullptr ? bn->args[7] : nullptr);
  bool rehomed = false;
  if (last != nullptr && !apart_from_input(last)) {
    const size_t chain_end = static_cast<size_t>((act != nullptr ? act : bn) - instructions.data());
    rehomed = rehome_chain_output(pc, chain_end, conv.args[9], last, usage, rehomed_outputs);
    if (!rehomed) act = nullptr;
    if (!rehomed && bn != nullptr && !apart_from_input(bn->args[7])) bn = nullptr;
  }
  if (bn == nullptr && act == nullptr) return;
  if (act != nullptr) {
    lo = act_lo;
    hi = act_hi;
  }
  // The chain's output is now written here, before its own call. No output re-homed before can be live here on
  // its bytes: one still live here is read by this convolution (its input, which that output is apart from) or by
  // the batch norm, which reads only the convolution's output and constants.
  out = rehomed ? conv.args[9] : (act != nullptr ? act->args.back() : bn->args[7]);

  std::vector<EValue*> args(conv.args.begin(), conv.args.begin() + 9);
  EValue* scale = &load_time_values.emplace_back();  // None: no batch norm
  if (bn != nullptr) {
    auto at = [](const EValue* v, int64_t c) { return static_cast<double>(v->to_tensor().data_as<const float>()[c]); };
    const double eps = bn->args[6]->to_double();
    const size_t bytes = static_cast<size_t>(channels) * sizeof(float);
    auto* scale_data = reinterpret_cast<float*>(own(bytes, "a batch norm's scale"));
    auto* bias_data = reinterpret_cast<float*>(own(bytes, "a folded convolution bias"));
    for (int64_t c = 0; c < channels; ++c) {
      const double gamma = bn->args[1]->is_none() ? 1.0 : at(bn->args[1], c);
      const double beta = bn->args[2]->is_none() ? 0.0 : at(bn->args[2], c);
      const double k = gamma / std::sqrt(at(bn->args[4], c) + eps);
      scale_data[c] = static_cast<float>(k);
      bias_data[c] = static_cast<float>(((has_bias ? at(conv.args[2], c) : 0.0) - at(bn->args[3], c)) * k + beta);
    }
    const int64_t size[1] = {channels};
    auto per_channel_constant = [&](float* data) {
      Tensor& t = load_time_tensors.emplace_back(ScalarType::Float, std::span<const int64_t>(size, 1),
                                                 std::span<const uint8_t>(), data);
      t.set_constant(true);
      return &load_time_values.emplace_back(EValue::from_tensor(&t));
    };
    scale = per_channel_constant(scale_data);
    args[2] = per_channel_constant(bias_data);
    // The batch norm's constants (and the bias it shifted) are not read at run time: their file pages are
    // released, as a delegate's are.
    for (const EValue* v : {conv.args[2], bn->args[1], bn->args[2], bn->args[3], bn->args[4]}) {
      if (v->is_tensor()) release_file_pages(bytes_of(v->to_tensor()).span());
    }
    bn->kind = Instruction::Kind::Folded;
  }
  args.push_back(scale);
  args.push_back(&load_time_values.emplace_back(EValue::from_double(lo)));
  args.push_back(&load_time_values.emplace_back(EValue::from_double(hi)));
  args.push_back(out);
  args.push_back(out);
  if (act != nullptr) act->kind = Instruction::Kind::Folded;
  conv.args = load_time_args.emplace_back(std::move(args));
  conv.fn = fused->fn;
  conv.prepare = fused->prepare;
}

namespace {

/// Both tensors planned, static, and laid out alike: one can take the other's bytes.
bool same_layout(const Tensor& a, const Tensor& b) {
  return a.data() != nullptr && b.data() != nullptr && !a.is_constant() && !b.is_constant() &&
         a.dynamism() == ShapeDynamism::Static && b.dynamism() == ShapeDynamism::Static && a.dtype() == b.dtype() &&
         std::ranges::equal(a.sizes(), b.sizes()) && std::ranges::equal(a.dim_order(), b.dim_order());
}

}  // namespace

void Method::Impl::elide_copies(const UseAnalysis& refs) {
  // Exporters functionalize in-place updates: writing one row of a KV cache becomes `t = index_put(buf,
  // ...)`, a copy of the whole buffer with the row changed, and at the end `buf.copy_(t)`, a second copy.
  // Where nothing else touches the buffer in between, `t` can live in the buffer's own bytes: the update
  // is then made in place and both copies disappear (the kernels skip a copy onto itself). Decided on the
  // memory plan's addresses, before any run; a program with jumps is left as it is. (A plain copy whose
  // input looks dead afterwards is not elided: a mutable buffer read once also looks dead yet must keep its
  // value for the next call, and exporters plan views on a tensor's bytes that later instructions read.)
  static constexpr std::string_view kScatters[] = {"aten::index_put.out", "aten::slice_scatter.out",
                                                   "aten::select_scatter.out"};
  // A malformed argument list is reported with its context when the instruction runs.
  if (!refs.tensor_lists_well_formed || refs.has_jumps) return;
  auto index_of = [&](const EValue* v) { return static_cast<uint32_t>(v - values.data()); };
  auto in_values = [&](const EValue* v) { return v >= values.data() && v < values.data() + values.size(); };
  auto movable = [&](uint32_t v) { return !refs.io[v] && !refs.freed_or_moved[v]; };

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
    const std::span<const uint32_t> buf_refs = refs.by_value(buf);
    const std::span<const uint32_t> t_refs = refs.by_value(t);
    auto next = std::ranges::upper_bound(buf_refs, i);
    if (next == buf_refs.end() || next + 1 != buf_refs.end()) continue;
    const uint32_t j = *next;
    const Instruction& copy = instructions[j];
    if (copy.kind != Instruction::Kind::Kernel || *copy.name != "aten::copy_" || copy.args.size() != 4 ||
        copy.args[0] != buf_value || copy.args[1] != t_value || copy.args[3] != buf_value || t_refs.front() != i ||
        t_refs.back() != j) {
      continue;
    }
    if (!refs.bytes_untouched(values, i, j, bytes_of(buf_tensor), {buf, t})) continue;
    // Nothing may still read t's own bytes expecting t (a view the exporter planned on them).
    if (!refs.nothing_reads_after(values, i, bytes_of(t_tensor), t)) continue;
    t_tensor.set_data(buf_tensor.data());
  }
}

void Method::Impl::mark_storage_checks() {
  // Tensors that can lack storage while the method runs: et_view outputs (until the view runs) and
  // targets of FreeCall. Well-formed programs never read them then; malformed ones must not crash.
  std::vector<bool> maybe_null(values.size(), false);
  bool any_maybe_null = false;  // (a list argument's items are not followed: any such tensor marks it)
  for (const auto& ins : instructions) {
    if (ins.kind == Instruction::Kind::Free && !maybe_null[ins.a]) {
      maybe_null[ins.a] = any_maybe_null = true;
      Tensor& t = values[ins.a].to_tensor();
      freed_storage.emplace_back(&t, t.data());
    }
    if (ins.kind == Instruction::Kind::Kernel && ins.view) {
      maybe_null[ins.args[2] - values.data()] = any_maybe_null = true;
    }
  }
  for (auto& ins : instructions) {
    if (ins.kind != Instruction::Kind::Kernel && ins.kind != Instruction::Kind::Delegate) continue;
    if (ins.kind == Instruction::Kind::Kernel && ins.view) ins.skip_check_arg = 2;
    for (size_t k = 0; k < ins.args.size(); ++k) {
      const EValue* v = ins.args[k];
      // Arguments outside the value table are constants made at load (fold_batch_norms): never null.
      const bool in_table = std::less_equal<const EValue*>()(values.data(), v) &&
                            std::less<const EValue*>()(v, values.data() + values.size());
      if (in_table && static_cast<int32_t>(k) != ins.skip_check_arg && maybe_null[static_cast<size_t>(v - values.data())]) {
        ins.check_storage = true;
      }
      if (v->tag() == Tag::ListTensor || v->tag() == Tag::ListOptionalTensor) {
        ins.check_storage = ins.check_storage || any_maybe_null;
      }
    }
  }
}

}  // namespace etnp
