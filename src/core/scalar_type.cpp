#include "etnp/scalar_type.h"

#include <array>

namespace etnp {
namespace {

struct TypeRow {
  std::string_view name;
  size_t size;
};

// Indexed by the ScalarType value.
constexpr std::array<TypeRow, kNumScalarTypes> kTypes = {{
    {"uint8", 1},         {"int8", 1},           {"int16", 2},         {"int32", 4},
    {"int64", 8},         {"float16", 2},        {"float32", 4},       {"float64", 8},
    {"complex32", 4},     {"complex64", 8},      {"complex128", 16},   {"bool", 1},
    {"qint8", 1},         {"quint8", 1},         {"qint32", 4},        {"bfloat16", 2},
    {"quint4x2", 1},      {"quint2x4", 1},       {"bits1x8", 1},       {"bits2x4", 1},
    {"bits4x2", 1},       {"bits8", 1},          {"bits16", 2},        {"float8_e5m2", 1},
    {"float8_e4m3fn", 1}, {"float8_e5m2fnuz", 1}, {"float8_e4m3fnuz", 1}, {"uint16", 2},
    {"uint32", 4},        {"uint64", 8},
}};

}  // namespace

bool is_valid_scalar_type(int value) { return value >= 0 && value < kNumScalarTypes; }

size_t element_size(ScalarType type) {
  int v = static_cast<int>(type);
  return is_valid_scalar_type(v) ? kTypes[v].size : 0;
}

std::string_view scalar_type_name(ScalarType type) {
  int v = static_cast<int>(type);
  return is_valid_scalar_type(v) ? kTypes[v].name : std::string_view("invalid");
}

std::optional<ScalarType> scalar_type_from_name(std::string_view name) {
  for (int i = 0; i < kNumScalarTypes; ++i) {
    if (kTypes[i].name == name) return static_cast<ScalarType>(i);
  }
  return std::nullopt;
}

bool is_floating_type(ScalarType t) {
  return t == ScalarType::Half || t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::BFloat16;
}

bool is_integral_type(ScalarType t, bool include_bool) {
  switch (t) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Short:
    case ScalarType::Int:
    case ScalarType::Long:
    case ScalarType::UInt16:
    case ScalarType::UInt32:
    case ScalarType::UInt64:
      return true;
    case ScalarType::Bool:
      return include_bool;
    default:
      return false;
  }
}

}  // namespace etnp
