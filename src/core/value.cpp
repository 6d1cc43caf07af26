#include "etnp/value.h"

#include <string>

#include "etnp/error.h"

namespace etnp {
namespace {

[[noreturn]] void wrong_tag(Tag expected, Tag actual) {
  throw Error(ErrorKind::ExecutionError,
              std::string("expected a value of type ") + tag_name(expected) + ", got " + tag_name(actual));
}

}  // namespace

const char* tag_name(Tag tag) {
  switch (tag) {
    case Tag::None: return "None";
    case Tag::Tensor: return "Tensor";
    case Tag::String: return "String";
    case Tag::Double: return "Double";
    case Tag::Int: return "Int";
    case Tag::Bool: return "Bool";
    case Tag::ListBool: return "BoolList";
    case Tag::ListDouble: return "DoubleList";
    case Tag::ListInt: return "IntList";
    case Tag::ListTensor: return "TensorList";
    case Tag::ListScalar: return "ScalarList";
    case Tag::ListOptionalTensor: return "OptionalTensorList";
  }
  return "Unknown";
}

int64_t IntListRef::operator[](size_t i) const { return items_[i]->to_int(); }

void IntListRef::copy_to(std::vector<int64_t>& out) const {
  out.resize(items_.size());
  for (size_t i = 0; i < items_.size(); ++i) out[i] = items_[i]->to_int();
}

std::vector<int64_t> IntListRef::to_vector() const {
  std::vector<int64_t> v;
  copy_to(v);
  return v;
}

Tensor& TensorListRef::operator[](size_t i) const { return items_[i]->to_tensor(); }

Tensor* OptionalTensorListRef::operator[](size_t i) const {
  const EValue* v = items_[i];
  return v == nullptr ? nullptr : v->to_optional_tensor();
}

int64_t EValue::to_int() const {
  if (tag_ != Tag::Int) wrong_tag(Tag::Int, tag_);
  return i_;
}
double EValue::to_double() const {
  if (tag_ != Tag::Double) wrong_tag(Tag::Double, tag_);
  return d_;
}
bool EValue::to_bool() const {
  if (tag_ != Tag::Bool) wrong_tag(Tag::Bool, tag_);
  return b_;
}
Tensor& EValue::to_tensor() const {
  if (tag_ != Tag::Tensor) wrong_tag(Tag::Tensor, tag_);
  return *t_;
}
std::string_view EValue::to_string() const {
  if (tag_ != Tag::String) wrong_tag(Tag::String, tag_);
  return s_;
}
Scalar EValue::to_scalar() const {
  Scalar s;
  switch (tag_) {
    case Tag::Int: s.kind = Scalar::Kind::Int; s.i = i_; return s;
    case Tag::Double: s.kind = Scalar::Kind::Double; s.d = d_; return s;
    case Tag::Bool: s.kind = Scalar::Kind::Bool; s.b = b_; return s;
    default:
      throw Error(ErrorKind::ExecutionError, std::string("expected a Scalar (Int, Double or Bool), got ") + tag_name(tag_));
  }
}
IntListRef EValue::to_int_list() const {
  if (tag_ != Tag::ListInt) wrong_tag(Tag::ListInt, tag_);
  return IntListRef(list_);
}
TensorListRef EValue::to_tensor_list() const {
  if (tag_ != Tag::ListTensor) wrong_tag(Tag::ListTensor, tag_);
  return TensorListRef(list_);
}
OptionalTensorListRef EValue::to_optional_tensor_list() const {
  if (tag_ != Tag::ListOptionalTensor) wrong_tag(Tag::ListOptionalTensor, tag_);
  return OptionalTensorListRef(list_);
}
std::span<const double> EValue::to_double_list() const {
  if (tag_ != Tag::ListDouble) wrong_tag(Tag::ListDouble, tag_);
  return doubles_;
}
std::span<const uint8_t> EValue::to_bool_list() const {
  if (tag_ != Tag::ListBool) wrong_tag(Tag::ListBool, tag_);
  return bools_;
}
Tensor* EValue::to_optional_tensor() const {
  if (tag_ == Tag::None) return nullptr;
  return &to_tensor();
}

}  // namespace etnp
