// Numbers written as text (command-line values): the whole string must be one number, or the parse fails.
#pragma once

#include <cstdint>
#include <string>

namespace etnp {

/// A base-10 int64 filling all of `s` (no spaces, no trailing text, in range); false otherwise.
bool parse_int(const std::string& s, int64_t* out);
/// A finite double filling all of `s`; false otherwise.
bool parse_double(const std::string& s, double* out);

}  // namespace etnp
