// Strings from a file (operator, method and tensor names, named-data keys, backend ids, identifiers) as they
// may appear in an error message: never the raw bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace etnp {

/// The longest name a message quotes, in bytes of the escaped text (an ellipsis marks the cut).
inline constexpr size_t kMaxQuotedBytes = 80;

/// `bytes` made safe to print: printable ASCII and well-formed UTF-8 of printable characters are kept; every
/// other byte (controls, DEL, invalid or overlong UTF-8, C1 controls) is written \xNN. The result is cut after
/// `max_bytes` (never inside an escape or a character) and ends with "..." when cut.
std::string printable(std::string_view bytes, size_t max_bytes = kMaxQuotedBytes);
inline std::string printable(std::span<const uint8_t> bytes, size_t max_bytes = kMaxQuotedBytes) {
  return printable(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), max_bytes);
}
/// printable(bytes) in single quotes (not `quoted`: std::quoted would win by argument-dependent lookup): 'name'.
inline std::string quoted_name(std::string_view bytes) { return "'" + printable(bytes) + "'"; }

}  // namespace etnp
