// NumPy .npy files (format versions 1-3, little-endian, C or Fortran order), for inputs and outputs, and the
// uncompressed .npz archives of numpy.savez that hold them.
#pragma once

#include <cstdint>
#include <memory>
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

/// One array of a .npz archive: its name without ".npy".
struct NamedNpyArray {
  std::string name;
  std::shared_ptr<NpyArray> array;
};

/// The arrays of an uncompressed .npz (numpy.savez, zip or zip64, stored entries): arr_0, arr_1, ... in number
/// order, other names in the archive's order. Throws InvalidArgument "'<name>' is not a usable .npz archive:
/// <why>" for anything else: not a zip, a damaged or truncated directory or entry, a compressed entry
/// (numpy.savez_compressed), no arrays; and parse_npy's errors for an entry that is not a .npy.
std::vector<NamedNpyArray> parse_npz(const std::vector<uint8_t>& bytes, const std::string& name);

}  // namespace etnp::format
