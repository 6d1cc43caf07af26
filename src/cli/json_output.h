// The CLI's --json output (nlohmann-json): one object per line, keys in the order they are set.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace etnp::cli {

using Json = nlohmann::ordered_json;

/// Prints `record` on one line. Bytes that are not UTF-8 (in a file name) are replaced, not refused;
/// a double that is not finite is written as null.
inline void print_json(const Json& record) {
  const std::string text = record.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::printf("%s\n", text.c_str());
}

}  // namespace etnp::cli
