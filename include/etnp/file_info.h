// What the container of a .pte says about itself, and how closely loading verifies it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace etnp {

enum class Verification : uint8_t {
  Minimal,              ///< Header, identifier and FlatBuffers structure.
  InternalConsistency,  ///< Also every index, offset, size and tensor in every method (the default).
};

struct SegmentInfo {
  uint64_t offset = 0;
  uint64_t size = 0;
};

/// What `etnp inspect` shows about the container.
struct ProgramInfo {
  std::string identifier;  ///< "ET12"
  uint32_t version = 0;
  bool has_extended_header = false;
  uint64_t file_size = 0;
  uint64_t program_size = 0;
  uint64_t segment_base_offset = 0;
  uint64_t segment_data_size = 0;
  std::vector<SegmentInfo> segments;
  uint64_t constant_bytes = 0;
  bool legacy_constant_buffer = false;
  size_t num_named_data = 0;
  size_t num_mutable_segments = 0;
};

}  // namespace etnp
