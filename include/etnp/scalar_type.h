// Element types: one table (ETNP_SCALAR_TYPES) of their codes, names, sizes and categories.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace etnp {

/// Every element type, X(Enumerator, code, name, bytes, category): the numbering is the file format's
/// (PyTorch's c10::ScalarType), so values read from a .pte cast directly; `name` is PyTorch's spelling
/// ("float32"), the enumerator c10's ("Float", which the Python package's ScalarType reuses). Category:
/// Integral, Floating (the types the kernels compute in: Half, Float, Double, BFloat16), Bool, or Other
/// (complex, quantized, bit-packed and 8-bit floating types, which are only stored).
#define ETNP_SCALAR_TYPES(X)                          \
  X(Byte, 0, "uint8", 1, Integral)                    \
  X(Char, 1, "int8", 1, Integral)                     \
  X(Short, 2, "int16", 2, Integral)                   \
  X(Int, 3, "int32", 4, Integral)                     \
  X(Long, 4, "int64", 8, Integral)                    \
  X(Half, 5, "float16", 2, Floating)                  \
  X(Float, 6, "float32", 4, Floating)                 \
  X(Double, 7, "float64", 8, Floating)                \
  X(ComplexHalf, 8, "complex32", 4, Other)            \
  X(ComplexFloat, 9, "complex64", 8, Other)           \
  X(ComplexDouble, 10, "complex128", 16, Other)       \
  X(Bool, 11, "bool", 1, Bool)                        \
  X(QInt8, 12, "qint8", 1, Other)                     \
  X(QUInt8, 13, "quint8", 1, Other)                   \
  X(QInt32, 14, "qint32", 4, Other)                   \
  X(BFloat16, 15, "bfloat16", 2, Floating)            \
  X(QUInt4x2, 16, "quint4x2", 1, Other)               \
  X(QUInt2x4, 17, "quint2x4", 1, Other)               \
  X(Bits1x8, 18, "bits1x8", 1, Other)                 \
  X(Bits2x4, 19, "bits2x4", 1, Other)                 \
  X(Bits4x2, 20, "bits4x2", 1, Other)                 \
  X(Bits8, 21, "bits8", 1, Other)                     \
  X(Bits16, 22, "bits16", 2, Other)                   \
  X(Float8_e5m2, 23, "float8_e5m2", 1, Other)         \
  X(Float8_e4m3fn, 24, "float8_e4m3fn", 1, Other)     \
  X(Float8_e5m2fnuz, 25, "float8_e5m2fnuz", 1, Other) \
  X(Float8_e4m3fnuz, 26, "float8_e4m3fnuz", 1, Other) \
  X(UInt16, 27, "uint16", 2, Integral)                \
  X(UInt32, 28, "uint32", 4, Integral)                \
  X(UInt64, 29, "uint64", 8, Integral)

enum class ScalarType : int8_t {
#define ETNP_SCALAR_TYPE_ENUMERATOR(enumerator, code, name, bytes, category) enumerator = code,
  ETNP_SCALAR_TYPES(ETNP_SCALAR_TYPE_ENUMERATOR)
#undef ETNP_SCALAR_TYPE_ENUMERATOR
};

#define ETNP_SCALAR_TYPE_ONE(enumerator, code, name, bytes, category) +1
/// The types are numbered 0..kNumScalarTypes-1 (scalar_type.cpp checks it).
constexpr int kNumScalarTypes = 0 ETNP_SCALAR_TYPES(ETNP_SCALAR_TYPE_ONE);
#undef ETNP_SCALAR_TYPE_ONE

/// True for values 0..29, the range the format allows.
bool is_valid_scalar_type(int value);
/// Bytes per element; 0 for an invalid type.
size_t element_size(ScalarType type);
/// Lower-case name as PyTorch spells it ("float32", "int64", "bool", "bfloat16", ...).
std::string_view scalar_type_name(ScalarType type);
/// Inverse of scalar_type_name.
std::optional<ScalarType> scalar_type_from_name(std::string_view name);
/// The enumerator's name ("Float", "Long", "BFloat16", ...); "invalid" for an invalid type.
std::string_view scalar_type_enumerator_name(ScalarType type);

bool is_floating_type(ScalarType type);   // Half, Float, Double, BFloat16
bool is_integral_type(ScalarType type, bool include_bool);  // Byte..Long, UInt16..UInt64 (+Bool)

}  // namespace etnp
