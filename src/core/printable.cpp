#include "core/printable.h"

#include <cstdint>

namespace etnp {

namespace {

// Length of the well-formed UTF-8 sequence of a printable non-ASCII character at `s[i]`, or 0.
size_t utf8_char(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (b(k) & 0x3F);
  }
  const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
  const bool c1_control = cp >= 0x80 && cp <= 0x9F;
  if (overlong || surrogate || c1_control || cp > 0x10FFFF) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view bytes, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<uint8_t>(bytes[i]);
    size_t n = c >= 0x20 && c < 0x7F ? 1 : utf8_char(bytes, i);
    std::string piece;
    if (n > 0) piece.assign(bytes.substr(i, n));
    else piece = {'\\', 'x', kHex[c >> 4], kHex[c & 15]}, n = 1;
    if (out.size() + piece.size() > max_bytes) return out + "...";
    out += piece;
    i += n;
  }
  return out;
}

}  // namespace etnp
