// write_npy_string / encode_npy_string: a 0-d unicode .npy (what numpy.save(numpy.array(text)) writes).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "etnp/error.h"
#include "format/npy.h"

namespace etnp::format {
namespace {

std::string header_of(const std::vector<uint8_t>& bytes) {
  const size_t len = bytes[8] | (size_t(bytes[9]) << 8);
  return std::string(reinterpret_cast<const char*>(bytes.data() + 10), len);
}

std::vector<uint32_t> code_units(const std::vector<uint8_t>& bytes) {
  const size_t start = 10 + header_of(bytes).size();
  std::vector<uint32_t> out((bytes.size() - start) / 4);
  std::memcpy(out.data(), bytes.data() + start, out.size() * 4);
  return out;
}

TEST(NpyString, IsA0dUnicodeArrayOfTheCodePoints) {
  const auto bytes = encode_npy_string("h\xC3\xA9\xE2\x9C\x93\xF0\x9F\x98\x80");  // h, e-acute, check mark, emoji
  EXPECT_EQ(std::memcmp(bytes.data(), "\x93NUMPY\x01\x00", 8), 0);
  const std::string header = header_of(bytes);
  EXPECT_EQ(header.rfind("{'descr': '<U4', 'fortran_order': False, 'shape': (), }", 0), 0u) << header;
  EXPECT_EQ((10 + header.size()) % 64, 0u);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(code_units(bytes), (std::vector<uint32_t>{'h', 0xE9, 0x2713, 0x1F600}));
}

TEST(NpyString, EmptyTextIsOneNul) {
  const auto bytes = encode_npy_string("");
  EXPECT_NE(header_of(bytes).find("'descr': '<U1'"), std::string::npos);
  EXPECT_EQ(code_units(bytes), (std::vector<uint32_t>{0}));
}

TEST(NpyString, InvalidUtf8BecomesReplacementCharacters) {
  // A lone continuation byte, a truncated sequence, an overlong '/', a surrogate.
  const auto bytes = encode_npy_string(std::string("a\x80" "b\xE2\x9C" "c\xC0\xAF" "d\xED\xA0\x80", 12));
  const auto units = code_units(bytes);
  ASSERT_FALSE(units.empty());
  EXPECT_EQ(units[0], uint32_t('a'));
  EXPECT_EQ(units[1], 0xFFFDu);
  EXPECT_EQ(units[2], uint32_t('b'));
  for (uint32_t u : units) EXPECT_TRUE(u == 0xFFFD || (u >= 'a' && u <= 'd')) << u;
}

TEST(NpyString, ObjectArraysAreNamedNotDumped) {
  std::string npy = "\x93NUMPY";
  npy += std::string("\x01\x00", 2);
  std::string header = "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  npy += static_cast<char>(header.size());
  npy += '\0';
  npy += header;
  try {
    parse_npy(std::vector<uint8_t>(npy.begin(), npy.end()), "o.npy");
    FAIL() << "parsed";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(what.find("object arrays"), std::string::npos) << what;
    EXPECT_EQ(what.find("fortran_order"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace etnp::format
