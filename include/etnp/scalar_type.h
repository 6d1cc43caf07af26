// Element types. The numbering is the file format's (PyTorch's c10::ScalarType), so values read from a
// .pte cast directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace etnp {

enum class ScalarType : int8_t {
  Byte = 0,       // uint8
  Char = 1,       // int8
  Short = 2,      // int16
  Int = 3,        // int32
  Long = 4,       // int64
  Half = 5,       // IEEE fp16
  Float = 6,      // fp32
  Double = 7,     // fp64
  ComplexHalf = 8,
  ComplexFloat = 9,
  ComplexDouble = 10,
  Bool = 11,
  QInt8 = 12,
  QUInt8 = 13,
  QInt32 = 14,
  BFloat16 = 15,
  QUInt4x2 = 16,
  QUInt2x4 = 17,
  Bits1x8 = 18,
  Bits2x4 = 19,
  Bits4x2 = 20,
  Bits8 = 21,
  Bits16 = 22,
  Float8_e5m2 = 23,
  Float8_e4m3fn = 24,
  Float8_e5m2fnuz = 25,
  Float8_e4m3fnuz = 26,
  UInt16 = 27,
  UInt32 = 28,
  UInt64 = 29,
};

constexpr int kNumScalarTypes = 30;

/// True for values 0..29, the range the format allows.
bool is_valid_scalar_type(int value);
/// Bytes per element; 0 for an invalid type.
size_t element_size(ScalarType type);
/// Lower-case name as PyTorch spells it ("float32", "int64", "bool", "bfloat16", ...).
std::string_view scalar_type_name(ScalarType type);
/// Inverse of scalar_type_name.
std::optional<ScalarType> scalar_type_from_name(std::string_view name);

bool is_floating_type(ScalarType type);   // Half, Float, Double, BFloat16
bool is_integral_type(ScalarType type, bool include_bool);  // Byte..Long, UInt16..UInt64 (+Bool)

}  // namespace etnp
