// ETDump (.etdp): the profiling / value-logging record of runs, a size-prefixed FlatBuffer with identifier
// "ED00" at bytes 8..12. write_etdump() produces one; parse_etdump() verifies and decodes one (ours or the
// official runtime's). Times are opaque platform ticks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "etnp/scalar_type.h"

namespace etnp::format {

/// A timed event: an instruction ("OPERATOR_CALL", "DELEGATE_CALL", ...), a runtime phase
/// ("Method::execute"), or an event a delegate reported (identified by a delegate debug id, name empty).
struct EtdumpProfileEvent {
  std::string name;
  int32_t chain_index = -1;
  int32_t instruction_id = -1;
  int32_t delegate_debug_id_int = -1;   ///< -1 when absent.
  std::string delegate_debug_id_str;    ///< Empty when absent.
  std::vector<uint8_t> delegate_debug_metadata;
  uint64_t start_time = 0;
  uint64_t end_time = 0;

  bool operator==(const EtdumpProfileEvent&) const = default;
};

/// A tracked allocation; allocator_id is the 1-based position in RunBlock::allocators.
struct EtdumpAllocationEvent {
  int32_t allocator_id = 0;
  uint64_t allocation_size = 0;

  bool operator==(const EtdumpAllocationEvent&) const = default;
};

/// Metadata of a logged tensor; its bytes are at `offset` in the separate debug buffer (-1: not written).
struct EtdumpTensor {
  ScalarType dtype = ScalarType::Float;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = -1;

  bool operator==(const EtdumpTensor&) const = default;
};

/// A logged value (program output or intermediate).
struct EtdumpDebugEvent {
  /// Numbered as the file's ValueType.
  enum class Kind : uint8_t {
    Null = 0, Int = 1, Bool = 2, Float = 3, Double = 4, Tensor = 5, TensorList = 6, String = 7
  };
  uint64_t chain_index = 0;
  int32_t instruction_id = -1;
  int32_t delegate_debug_id_int = -1;
  std::string delegate_debug_id_str;
  std::string name;
  Kind kind = Kind::Null;
  int64_t int_value = 0;
  bool bool_value = false;
  double double_value = 0;            ///< Kind::Double, and Kind::Float widened.
  std::vector<EtdumpTensor> tensors;  ///< One for Kind::Tensor, the list for Kind::TensorList.
  bool is_output = false;             ///< The value is a method output.

  bool operator==(const EtdumpDebugEvent&) const = default;
};

/// One RunData block: "Default" (loading), "Execute" (one per execute call), ...
/// The file interleaves the three event kinds; they are kept here per kind, each in file order.
struct RunBlock {
  std::string name;
  int32_t bundled_input_index = -1;
  std::vector<std::string> allocators;
  std::vector<EtdumpProfileEvent> profile_events;
  std::vector<EtdumpAllocationEvent> allocation_events;
  std::vector<EtdumpDebugEvent> debug_events;

  bool operator==(const RunBlock&) const = default;
};

/// Serializes `blocks` as an ETDump (schema version 0). Within a block, events are written profile events
/// first, then allocation events, then debug events.
std::vector<uint8_t> write_etdump(const std::vector<RunBlock>& blocks);

/// Verifies and decodes an ETDump. Bytes after the size-prefixed buffer are ignored. Throws
/// etnp::Error(InvalidArgument) when the bytes are not a valid ETDump (truncated, corrupt, wrong identifier).
std::vector<RunBlock> parse_etdump(std::span<const uint8_t> bytes);

/// True when the bytes start like a size-prefixed ETDump (identifier "ED00" at bytes 8..12).
bool is_etdump(std::span<const uint8_t> bytes);

}  // namespace etnp::format
