#include "etnp/scalar_type.h"

#include <array>

namespace etnp {
namespace {

enum class Category : uint8_t { Integral, Floating, Bool, Other };

struct TypeRow {
  int code;
  std::string_view enumerator;
  std::string_view name;
  size_t size;
  Category category;
};

// ETNP_SCALAR_TYPES, indexed by the ScalarType value.
constexpr std::array<TypeRow, kNumScalarTypes> kTypes = {{
#define ETNP_SCALAR_TYPE_ROW(enumerator, code, name, bytes, category) \
  {code, #enumerator, name, bytes, Category::category},
    ETNP_SCALAR_TYPES(ETNP_SCALAR_TYPE_ROW)
#undef ETNP_SCALAR_TYPE_ROW
}};

constexpr bool numbered_in_order() {
  for (int i = 0; i < kNumScalarTypes; ++i) {
    if (kTypes[i].code != i) return false;
  }
  return true;
}
static_assert(numbered_in_order(), "ETNP_SCALAR_TYPES must list the codes 0, 1, 2, ... in order");

const TypeRow* row_of(ScalarType type) {
  const int v = static_cast<int>(type);
  return is_valid_scalar_type(v) ? &kTypes[v] : nullptr;
}

}  // namespace

bool is_valid_scalar_type(int value) { return value >= 0 && value < kNumScalarTypes; }

size_t element_size(ScalarType type) {
  const TypeRow* row = row_of(type);
  return row != nullptr ? row->size : 0;
}

std::string_view scalar_type_name(ScalarType type) {
  const TypeRow* row = row_of(type);
  return row != nullptr ? row->name : std::string_view("invalid");
}

std::string_view scalar_type_enumerator_name(ScalarType type) {
  const TypeRow* row = row_of(type);
  return row != nullptr ? row->enumerator : std::string_view("invalid");
}

std::optional<ScalarType> scalar_type_from_name(std::string_view name) {
  for (const TypeRow& row : kTypes) {
    if (row.name == name) return static_cast<ScalarType>(row.code);
  }
  return std::nullopt;
}

bool is_floating_type(ScalarType t) {
  const TypeRow* row = row_of(t);
  return row != nullptr && row->category == Category::Floating;
}

bool is_integral_type(ScalarType t, bool include_bool) {
  const TypeRow* row = row_of(t);
  return row != nullptr && (row->category == Category::Integral || (include_bool && row->category == Category::Bool));
}

}  // namespace etnp
