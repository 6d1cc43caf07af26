// Error messages are safe to print (issue 18, item 2): names and keys from a file are escaped (\xNN for
// control, DEL and non-UTF-8 bytes) and cut to kMaxQuotedBytes, in the helper and in the messages that quote
// them. The inputs are writer-made programs with a few bytes edited.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/printable.h"
#include "etnp/error.h"
#include "writer_test_util.h"

namespace etnp {
namespace {

using writer_testing::f32;
using writer_testing::load_bytes;

// Replaces the only occurrence of `from` in `bytes` with `to` (same length).
void patch(std::vector<uint8_t>& bytes, const std::string& from, const std::string& to) {
  ASSERT_EQ(from.size(), to.size());
  const auto at = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
  ASSERT_NE(at, bytes.end()) << from;
  ASSERT_EQ(std::search(at + 1, bytes.end(), from.begin(), from.end()), bytes.end()) << from << " twice";
  std::copy(to.begin(), to.end(), at);
}

// Printable ASCII only: what the messages below must be (their inputs are ASCII apart from the bad bytes).
bool printable_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7F; });
}

std::string load_method_error(const std::vector<uint8_t>& bytes) {
  try {
    load_bytes(bytes).load_method("forward");
  } catch (const Error& e) {
    return e.what();
  }
  return "loaded";
}

TEST(Printable, EscapesControlAndInvalidBytes) {
  EXPECT_EQ(printable("aten::add.out"), "aten::add.out");
  EXPECT_EQ(printable(std::string("a\x00\x1b[2J\x7f\n", 8)), "a\\x00\\x1b[2J\\x7f\\x0a");
  EXPECT_EQ(printable("caf\xC3\xA9 \xE2\x96\x81x"), "caf\xC3\xA9 \xE2\x96\x81x");  // UTF-8 stays
  EXPECT_EQ(printable("\xC3"), "\\xc3");                                         // truncated sequence
  EXPECT_EQ(printable("\xC0\xAF"), "\\xc0\\xaf");                                // overlong '/'
  EXPECT_EQ(printable("\xED\xA0\x80"), "\\xed\\xa0\\x80");                       // a surrogate
  EXPECT_EQ(printable("\xC2\x9B"), "\\xc2\\x9b");                                // C1 control (CSI)
  EXPECT_EQ(printable("\xF4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");              // past U+10FFFF
  EXPECT_EQ(quoted_name("k\xff"), "'k\\xff'");
}

TEST(Printable, CutsLongNames) {
  const std::string name(10000, 'n');
  EXPECT_EQ(printable(name), std::string(kMaxQuotedBytes, 'n') + "...");
  // Never inside an escape or a character.
  EXPECT_EQ(printable(std::string(79, 'a') + "\x01"), std::string(79, 'a') + "...");
  EXPECT_EQ(printable(std::string(79, 'a') + "\xC3\xA9"), std::string(79, 'a') + "...");
  EXPECT_EQ(printable(std::string(80, 'a')), std::string(80, 'a'));
}

TEST(Printable, CorruptedNamedDataKeyIsEscaped) {
  std::vector<uint8_t> bytes = writer_testing::external_weight_program();
  patch(bytes, "layer.weight", "lay\xff\x01.weight");
  const std::string message = load_method_error(bytes);
  EXPECT_NE(message.find("tensor 'lay\\xff\\x01.weight' is stored in external data"), std::string::npos) << message;
  EXPECT_TRUE(printable_ascii(message)) << message;
}

TEST(Printable, OperatorNameWithControlBytesIsEscaped) {
  std::vector<uint8_t> bytes = writer_testing::small_add_program(false);
  patch(bytes, "aten::add", "aten::\x1b\x07" "d");  // the name; "out" is the overload
  try {
    load_bytes(bytes).load_method("forward");
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OperatorNotFound);
    const std::string message = e.what();
    EXPECT_NE(message.find("aten::\\x1b\\x07d.out"), std::string::npos) << message;
    EXPECT_TRUE(printable_ascii(message)) << message;
  }
}

TEST(Printable, TenKilobyteNamesAreCut) {
  const std::string op = std::string(10000, 'o') + "\x01";
  format::ProgramWriter w;
  auto& m = w.add_method(std::string(10000, 'm'));
  const int32_t x = m.planned_tensor(f32({2})), y = m.planned_tensor(f32({2}));
  m.kernel(op, {x, y});
  m.set_inputs({x});
  m.set_outputs({y});
  const std::vector<uint8_t> bytes = w.serialize();
  try {
    const Program program = load_bytes(bytes);
    program.load_method(program.method_names().at(0));
    FAIL() << "loaded";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_LT(message.size(), 400u) << message;
    EXPECT_NE(message.find(std::string(kMaxQuotedBytes, 'o') + "..."), std::string::npos) << message;
    EXPECT_TRUE(printable_ascii(message)) << message;
  }
  try {
    load_bytes(bytes).load_method("no such method");
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + std::string(kMaxQuotedBytes, 'm') + "...'"), std::string::npos);
  }
}

}  // namespace
}  // namespace etnp
