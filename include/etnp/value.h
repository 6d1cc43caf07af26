// EValue: the tagged value a method's value table holds and kernels receive as arguments.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "etnp/tensor.h"

namespace etnp {

class EValue;

enum class Tag : uint8_t {
  None = 0,
  Tensor = 1,
  String = 2,
  Double = 3,
  Int = 4,
  Bool = 5,
  ListBool = 6,
  ListDouble = 7,
  ListInt = 8,
  ListTensor = 9,
  ListScalar = 10,
  ListOptionalTensor = 11,
};

const char* tag_name(Tag tag);

/// A PyTorch `Scalar`: an Int, Double or Bool argument.
struct Scalar {
  enum class Kind : uint8_t { Int, Double, Bool } kind = Kind::Int;
  int64_t i = 0;
  double d = 0.0;
  bool b = false;

  bool is_floating() const { return kind == Kind::Double; }
  bool is_integral() const { return kind == Kind::Int; }
  bool is_bool() const { return kind == Kind::Bool; }
  double to_double() const { return kind == Kind::Double ? d : kind == Kind::Int ? double(i) : double(b); }
  int64_t to_int() const { return kind == Kind::Int ? i : kind == Kind::Double ? int64_t(d) : int64_t(b); }
};

/// `int[]` arguments are boxed: each item is another Int value of the method, read at call time so that
/// symbolic sizes computed by earlier instructions are seen.
class IntListRef {
 public:
  IntListRef() = default;
  explicit IntListRef(std::span<EValue* const> items) : items_(items) {}
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  int64_t operator[](size_t i) const;
  /// Copies the current values into `out` (resized); avoids re-reading in loops.
  void copy_to(std::vector<int64_t>& out) const;
  std::vector<int64_t> to_vector() const;

 private:
  std::span<EValue* const> items_;
};

/// `Tensor[]` arguments: boxed like IntListRef.
class TensorListRef {
 public:
  TensorListRef() = default;
  explicit TensorListRef(std::span<EValue* const> items) : items_(items) {}
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  Tensor& operator[](size_t i) const;

 private:
  std::span<EValue* const> items_;
};

/// `Tensor?[]` arguments: a null item (or a None value) reads as absent.
class OptionalTensorListRef {
 public:
  OptionalTensorListRef() = default;
  explicit OptionalTensorListRef(std::span<EValue* const> items) : items_(items) {}
  size_t size() const { return items_.size(); }
  /// nullptr when the item is None.
  Tensor* operator[](size_t i) const;

 private:
  std::span<EValue* const> items_;
};

class EValue {
 public:
  EValue() = default;
  static EValue from_int(int64_t v) { EValue e; e.tag_ = Tag::Int; e.i_ = v; return e; }
  static EValue from_double(double v) { EValue e; e.tag_ = Tag::Double; e.d_ = v; return e; }
  static EValue from_bool(bool v) { EValue e; e.tag_ = Tag::Bool; e.b_ = v; return e; }
  static EValue from_tensor(Tensor* t) { EValue e; e.tag_ = Tag::Tensor; e.t_ = t; return e; }
  static EValue from_string(std::string_view s) { EValue e; e.tag_ = Tag::String; e.s_ = s; return e; }
  static EValue from_int_list(std::span<EValue* const> items) { EValue e; e.tag_ = Tag::ListInt; e.list_ = items; return e; }
  static EValue from_tensor_list(std::span<EValue* const> items) { EValue e; e.tag_ = Tag::ListTensor; e.list_ = items; return e; }
  static EValue from_optional_tensor_list(std::span<EValue* const> items) { EValue e; e.tag_ = Tag::ListOptionalTensor; e.list_ = items; return e; }
  static EValue from_double_list(std::span<const double> v) { EValue e; e.tag_ = Tag::ListDouble; e.doubles_ = v; return e; }
  /// Bool lists are stored one byte per item, as in the file.
  static EValue from_bool_list(std::span<const uint8_t> v) { EValue e; e.tag_ = Tag::ListBool; e.bools_ = v; return e; }

  Tag tag() const { return tag_; }
  bool is_none() const { return tag_ == Tag::None; }
  bool is_tensor() const { return tag_ == Tag::Tensor; }
  bool is_int() const { return tag_ == Tag::Int; }
  bool is_double() const { return tag_ == Tag::Double; }
  bool is_bool() const { return tag_ == Tag::Bool; }
  bool is_string() const { return tag_ == Tag::String; }
  bool is_scalar() const { return tag_ == Tag::Int || tag_ == Tag::Double || tag_ == Tag::Bool; }

  // Typed accessors throw etnp::Error(ExecutionError) naming the expected and actual tag.
  int64_t to_int() const;
  double to_double() const;
  bool to_bool() const;
  Tensor& to_tensor() const;
  std::string_view to_string() const;
  Scalar to_scalar() const;
  IntListRef to_int_list() const;
  TensorListRef to_tensor_list() const;
  OptionalTensorListRef to_optional_tensor_list() const;
  std::span<const double> to_double_list() const;
  std::span<const uint8_t> to_bool_list() const;

  /// nullptr when None; the tensor otherwise (for `Tensor?` arguments).
  Tensor* to_optional_tensor() const;

  /// Overwrites a scalar result slot (sym ops write their result into their return value).
  void set_int(int64_t v) { tag_ = Tag::Int; i_ = v; }
  void set_double(double v) { tag_ = Tag::Double; d_ = v; }
  void set_bool(bool v) { tag_ = Tag::Bool; b_ = v; }

 private:
  Tag tag_ = Tag::None;
  union {
    int64_t i_ = 0;
    double d_;
    bool b_;
    Tensor* t_;
  };
  std::string_view s_;
  std::span<EValue* const> list_;
  std::span<const double> doubles_;
  std::span<const uint8_t> bools_;
};

}  // namespace etnp
