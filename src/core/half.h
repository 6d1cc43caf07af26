// The 16-bit floating types, for storage: arithmetic goes through float. Half conversions are the FP16
// library's (IEEE binary16, round to nearest even, NaN kept quiet); bfloat16 is the top half of a float.
#pragma once

#include <cstdint>
#include <cstring>

#include <fp16.h>

namespace etnp {

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f) { return fp16_ieee_from_fp32_value(f); }
  static float to_float(uint16_t h) { return fp16_ieee_to_fp32_value(h); }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static float to_float(uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fff + ((u >> 16) & 1);                                          // round to nearest even
    return uint16_t(u >> 16);
  }
};

}  // namespace etnp
