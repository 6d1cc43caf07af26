// How a method's instructions reference its values: the one analysis the load-time passes (method_passes.cpp)
// and the output-binding checks (method_bind.cpp) decide on.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

#include "etnp/value.h"
#include "format/pte_file.h"
#include "runtime/method_impl.h"

namespace etnp::runtime {

/// The bytes a tensor's storage spans (its capacity, for a dynamic shape).
struct ByteRange {
  uintptr_t begin = 0, end = 0;
  bool overlaps(const ByteRange& o) const { return begin < o.end && o.begin < end; }
  bool contains(const ByteRange& o) const { return begin <= o.begin && o.end <= end; }
  std::span<const uint8_t> span() const { return {reinterpret_cast<const uint8_t*>(begin), end - begin}; }
};

ByteRange bytes_of(const Tensor& t);

/// A snapshot of the references, taken when it is constructed; passes that change instructions afterwards
/// (folding) decide on the snapshot. Arguments outside the value table (constants made at load) are ignored.
struct UseAnalysis {
  /// `tensors`: the array every tensor of `values` lies in (Method::Impl::tensors).
  UseAnalysis(const std::vector<Instruction>& instructions, const std::vector<EValue>& values,
              std::span<const Tensor> tensors, const format::fb::ExecutionPlan& plan);

  // By value slot. Method inputs and outputs count once in both `uses` and `writes`.
  std::vector<uint32_t> uses;    ///< References in any position: arguments, move, free and jump operands.
  /// As the out slot of a kernel call (its last argument), a delegate argument, a move target or a free.
  std::vector<uint32_t> writes;
  std::vector<bool> io;          ///< A method input or output.
  std::vector<bool> freed_or_moved;
  std::vector<int32_t> moved_into_by;  ///< The first move instruction whose target the value is, or -1.

  // By tensor, following tensor-list items too. Complete only when `tensor_lists_well_formed`.
  /// Value -> the instructions referencing its tensor, ascending.
  std::span<const uint32_t> by_value(size_t v) const {
    return {value_refs_.data() + value_begin_[v], value_begin_[v + 1] - value_begin_[v]};
  }
  /// Instruction -> the tensor values it references, in argument order (a value as often as it is referenced).
  std::span<const uint32_t> by_instr(size_t pc) const {
    return {instr_refs_.data() + instr_begin_[pc], instr_begin_[pc + 1] - instr_begin_[pc]};
  }
  /// The value's first reference is a kernel writing it whole: one of its out slots (the arguments before the
  /// return slot that the return slot repeats: the out tensor, or a returned list's items), held by none of the
  /// kernel's other arguments: what its bytes held before is never read.
  std::vector<bool> produced;
  bool has_jumps = false;
  /// False when some tensor-list argument holds a non-tensor (a malformed program, reported when it runs).
  bool tensor_lists_well_formed = true;

  /// Appends the values an argument holds to `into`: the argument itself, or a tensor list's items (tensors made at
  /// load, outside the value table, are left out).
  void values_at(const EValue* arg, std::vector<uint32_t>& into) const;

  /// Every tensor other than `except` that shares a byte with `range` and is referenced after instruction
  /// `pc` is first referenced after it, by a kernel that writes it whole: none reads what the range held at
  /// `pc` (an exporter's view planned on a tensor's bytes would).
  bool nothing_reads_after(const std::vector<EValue>& values, uint32_t pc, const ByteRange& range,
                           uint32_t except) const;
  /// No tensor other than `allowed` referenced by instructions [from, to] may share a byte with `range`, and
  /// every tensor they reference must have its storage now (a view's is only known when it runs).
  bool bytes_untouched(const std::vector<EValue>& values, uint32_t from, uint32_t to, const ByteRange& range,
                       std::initializer_list<uint32_t> allowed) const;
  /// Appends to `into` the bytes of every tensor other than `except` whose value may be live at some instruction
  /// of [from, to]: referenced there, or both before and after. Method inputs and outputs, values a free or move
  /// touches and values whose first reference reads what their bytes held (a mutable buffer) are live throughout.
  /// False when the method jumps or a tensor live then gets its storage only at run time (a view).
  bool live_bytes(const std::vector<EValue>& values, uint32_t from, uint32_t to,
                  std::initializer_list<uint32_t> except, std::vector<ByteRange>& into) const;

 private:
  static constexpr uint32_t kNoValue = UINT32_MAX;
  /// A value-table tensor's value slot (the first, where two hold one tensor), or kNoValue.
  uint32_t value_of(const Tensor* t) const;
  /// t's index in tensors_, or tensors_.size() where it lies outside.
  size_t index_in_tensors(const Tensor* t) const;

  // The references as flat arrays (one allocation each, not one per value and instruction: the small programs'
  // loads spent a third of their time building and freeing these): by_value(v) is value_refs_[value_begin_[v],
  // value_begin_[v + 1]), by_instr likewise.
  std::vector<uint32_t> value_begin_, value_refs_, instr_begin_, instr_refs_;
  std::span<const Tensor> tensors_;       ///< the constructor's `tensors`
  std::vector<uint32_t> value_of_tensor_;  ///< per tensor of tensors_: its value slot, or kNoValue
};

}  // namespace etnp::runtime
