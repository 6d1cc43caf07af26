// NumPy .npy files (format versions 1-3, little-endian, C or Fortran order), for inputs and outputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "etnp/scalar_type.h"

namespace etnp::format {

struct NpyArray {
  ScalarType dtype = ScalarType::Float;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  ///< Row-major (C order) element bytes.
  int64_t numel() const;
};

/// Reads a .npy file; Fortran-ordered arrays are transposed to C order. Throws InvalidArgument naming the
/// path and the problem (bad magic, unsupported dtype such as objects or big-endian, truncated data).
NpyArray read_npy(const std::string& path);
NpyArray parse_npy(const std::vector<uint8_t>& bytes, const std::string& name);
/// Writes a C-order .npy (version 1.0). bfloat16 is written as uint16 bits (numpy has no bfloat16).
void write_npy(const std::string& path, ScalarType dtype, const std::vector<int64_t>& shape, const void* data);
std::vector<uint8_t> encode_npy(ScalarType dtype, const std::vector<int64_t>& shape, const void* data);
/// Writes `utf8` as a 0-d unicode array (dtype '<U<n>', UTF-32LE: what numpy.save(numpy.array(text)) writes;
/// numpy.load reads it without allow_pickle). Invalid UTF-8 bytes become U+FFFD.
void write_npy_string(const std::string& path, const std::string& utf8);
std::vector<uint8_t> encode_npy_string(const std::string& utf8);

}  // namespace etnp::format
