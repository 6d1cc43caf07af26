// ETDump writer and reader: the fixtures against their reference decodings (JSON), round trips, and
// truncated / corrupted buffers (which must be rejected, never read out of bounds).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "etnp/error.h"
#include "format/etdump.h"

namespace etnp::format {
namespace {

// ---- a minimal JSON reader for the reference decodings ----------------------------------------------------

struct Json {
  enum class Type { Null, Bool, Number, String, Array, Object } type = Type::Null;
  bool b = false;
  double number = 0;
  std::string str;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  bool has(const std::string& k) const { return fields.count(k) != 0; }
  const Json& operator[](const std::string& k) const { return fields.at(k); }
};

class JsonParser {
 public:
  explicit JsonParser(std::string text) : s_(std::move(text)) {}
  Json parse() {
    Json v = value();
    ws();
    if (pos_ != s_.size()) throw std::runtime_error("trailing JSON");
    return v;
  }

 private:
  void ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  char peek() {
    ws();
    if (pos_ >= s_.size()) throw std::runtime_error("unexpected end of JSON");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) throw std::runtime_error(std::string("expected ") + c);
    ++pos_;
  }
  std::string string_literal() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\') {
        ++pos_;
        const char e = s_.at(pos_);
        if (e == 'n') out += '\n';
        else if (e == 't') out += '\t';
        else if (e == 'u') { out += '?'; pos_ += 4; }  // not used by the fixtures
        else out += e;
      } else {
        out += s_[pos_];
      }
      ++pos_;
    }
    expect('"');
    return out;
  }
  Json value() {
    Json v;
    const char c = peek();
    if (c == '{') {
      v.type = Json::Type::Object;
      ++pos_;
      if (peek() == '}') { ++pos_; return v; }
      while (true) {
        std::string key = string_literal();
        expect(':');
        v.fields[key] = value();
        if (peek() == ',') { ++pos_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.type = Json::Type::Array;
      ++pos_;
      if (peek() == ']') { ++pos_; return v; }
      while (true) {
        v.items.push_back(value());
        if (peek() == ',') { ++pos_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.type = Json::Type::String;
      v.str = string_literal();
      return v;
    }
    if (s_.compare(pos_, 4, "true") == 0) { pos_ += 4; v.type = Json::Type::Bool; v.b = true; return v; }
    if (s_.compare(pos_, 5, "false") == 0) { pos_ += 5; v.type = Json::Type::Bool; return v; }
    if (s_.compare(pos_, 4, "null") == 0) { pos_ += 4; return v; }
    size_t used = 0;
    v.type = Json::Type::Number;
    v.number = std::stod(s_.substr(pos_, 40), &used);
    pos_ += used;
    return v;
  }
  std::string s_;
  size_t pos_ = 0;
};

std::string fixtures_dir() {
  if (const char* env = std::getenv("ETNP_FIXTURES")) return env;
  return ETNP_FIXTURES_DIR;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

int64_t num(const Json& obj, const std::string& key, int64_t dflt) {
  return obj.has(key) ? static_cast<int64_t>(obj[key].number) : dflt;
}

void expect_matches_reference(const std::vector<RunBlock>& blocks, const Json& ref) {
  ASSERT_EQ(ref["version"].number, 0);
  const auto& runs = ref["run_data"].items;
  ASSERT_EQ(blocks.size(), runs.size());
  size_t total_events = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    const Json& run = runs[r];
    const RunBlock& block = blocks[r];
    EXPECT_EQ(block.name, run["name"].str) << "run " << r;
    EXPECT_EQ(block.bundled_input_index, num(run, "bundled_input_index", -1)) << "run " << r;
    const size_t n_allocators = run.has("allocators") ? run["allocators"].items.size() : 0;
    EXPECT_EQ(block.allocators.size(), n_allocators);
    // Both fixtures hold profile events only; compare each one field by field, in order.
    const auto& events = run["events"].items;
    ASSERT_EQ(block.profile_events.size(), events.size()) << "run " << r;
    EXPECT_TRUE(block.allocation_events.empty());
    EXPECT_TRUE(block.debug_events.empty());
    for (size_t i = 0; i < events.size(); ++i) {
      ASSERT_TRUE(events[i].has("profile_event"));
      const Json& pe = events[i]["profile_event"];
      const EtdumpProfileEvent& e = block.profile_events[i];
      SCOPED_TRACE("run " + std::to_string(r) + " event " + std::to_string(i));
      EXPECT_EQ(e.name, pe.has("name") ? pe["name"].str : "");
      EXPECT_EQ(e.chain_index, num(pe, "chain_index", 0));
      EXPECT_EQ(e.instruction_id, num(pe, "instruction_id", -1));
      EXPECT_EQ(e.delegate_debug_id_int, num(pe, "delegate_debug_id_int", -1));
      EXPECT_EQ(e.delegate_debug_id_str, pe.has("delegate_debug_id_str") ? pe["delegate_debug_id_str"].str : "");
      EXPECT_EQ(e.delegate_debug_metadata.size(),
                pe.has("delegate_debug_metadata") ? pe["delegate_debug_metadata"].items.size() : 0u);
      EXPECT_EQ(static_cast<int64_t>(e.start_time), num(pe, "start_time", 0));
      EXPECT_EQ(static_cast<int64_t>(e.end_time), num(pe, "end_time", 0));
    }
    total_events += events.size();
  }
  EXPECT_GT(total_events, 0u);
}

class EtdumpFixture : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(EtdumpFixture, ParsesLikeTheReferenceDecoding) {
  const std::string dir = fixtures_dir() + "/etdump/";
  const auto bytes = read_file(dir + GetParam().first);
  const auto json_bytes = read_file(dir + GetParam().second);
  if (bytes.empty() || json_bytes.empty()) GTEST_SKIP() << "ETDump fixtures not available";
  ASSERT_TRUE(is_etdump(bytes));
  const auto blocks = parse_etdump(bytes);
  const Json ref = JsonParser(std::string(json_bytes.begin(), json_bytes.end())).parse();
  expect_matches_reference(blocks, ref);

  // Our writer reproduces the same content.
  EXPECT_EQ(parse_etdump(write_etdump(blocks)), blocks);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EtdumpFixture,
                         ::testing::Values(std::make_pair("tutorial.etdp", "tutorial.json"),
                                           std::make_pair("sample.etdump", "sample.json")));

TEST(EtdumpFormat, TutorialFixtureCounts) {
  const auto bytes = read_file(fixtures_dir() + "/etdump/tutorial.etdp");
  if (bytes.empty()) GTEST_SKIP() << "ETDump fixtures not available";
  const auto blocks = parse_etdump(bytes);
  // The manifest: 2 run_data blocks, 31 profile events.
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].name, "Default");
  EXPECT_EQ(blocks[1].name, "Execute");
  EXPECT_EQ(blocks[0].profile_events.size() + blocks[1].profile_events.size(), 31u);
  EXPECT_EQ(blocks[0].profile_events[0].name, "Method::init");
  EXPECT_EQ(blocks[0].profile_events[0].chain_index, -1);
  EXPECT_EQ(blocks[0].profile_events[0].start_time, 399054u);
}

// ---- writer ---------------------------------------------------------------------------------------------

std::vector<RunBlock> sample_blocks() {
  RunBlock load;
  load.name = "Default";
  load.allocators = {"planned", "temp"};
  load.profile_events.push_back({"Program::load_method", -1, 0, -1, "", {}, 10, 50});
  load.profile_events.push_back({"Method::init", -1, 0, -1, "", {}, 12, 40});
  load.allocation_events.push_back({1, 4096});
  load.allocation_events.push_back({2, 64});

  RunBlock exec;
  exec.name = "Execute";
  exec.bundled_input_index = 3;
  exec.profile_events.push_back({"Method::execute", -1, 0, -1, "", {}, 100, 900});
  exec.profile_events.push_back({"OPERATOR_CALL", 0, 0, -1, "", {}, 110, 200});
  exec.profile_events.push_back({"", 0, 1, -1, "Convolution (NHWC, F32) IGEMM #1", {1, 2, 3}, 210, 400});
  exec.profile_events.push_back({"", 0, 1, 7, "", {}, 410, 420});
  exec.profile_events.push_back({"DELEGATE_CALL", 0, 1, -1, "", {}, 205, 800});

  EtdumpDebugEvent out;
  out.chain_index = 0;
  out.instruction_id = 2;
  out.kind = EtdumpDebugEvent::Kind::Tensor;
  out.tensors.push_back({ScalarType::Float, {2, 3}, {3, 1}, 0});
  out.is_output = true;
  exec.debug_events.push_back(out);

  EtdumpDebugEvent list;
  list.chain_index = 0;
  list.instruction_id = 1;
  list.delegate_debug_id_str = "node";
  list.kind = EtdumpDebugEvent::Kind::TensorList;
  list.tensors.push_back({ScalarType::Long, {4}, {1}, 64});
  list.tensors.push_back({ScalarType::Bool, {}, {}, -1});
  exec.debug_events.push_back(list);

  EtdumpDebugEvent scalar_int;
  scalar_int.kind = EtdumpDebugEvent::Kind::Int;
  scalar_int.int_value = -42;
  scalar_int.name = "n";
  exec.debug_events.push_back(scalar_int);
  EtdumpDebugEvent scalar_double;
  scalar_double.kind = EtdumpDebugEvent::Kind::Double;
  scalar_double.double_value = 2.5;
  exec.debug_events.push_back(scalar_double);
  EtdumpDebugEvent scalar_bool;
  scalar_bool.kind = EtdumpDebugEvent::Kind::Bool;
  scalar_bool.bool_value = true;
  scalar_bool.delegate_debug_id_int = 9;
  exec.debug_events.push_back(scalar_bool);
  return {load, exec};
}

TEST(EtdumpFormat, WriterRoundTripsEverything) {
  const auto blocks = sample_blocks();
  const auto bytes = write_etdump(blocks);
  ASSERT_GE(bytes.size(), 12u);
  uint32_t prefix;
  std::memcpy(&prefix, bytes.data(), 4);
  EXPECT_EQ(prefix + 4u, bytes.size());
  EXPECT_EQ(std::memcmp(bytes.data() + 8, "ED00", 4), 0);
  EXPECT_EQ(parse_etdump(bytes), blocks);
  EXPECT_TRUE(parse_etdump(write_etdump({})).empty());
}

TEST(EtdumpFormat, AcceptsMisalignedInputAndTrailingBytes) {
  const auto bytes = write_etdump(sample_blocks());
  std::vector<uint8_t> shifted(bytes.size() + 3, 0xAB);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  // starts at an odd address and is followed by two bytes that are not part of the buffer
  EXPECT_EQ(parse_etdump(std::span<const uint8_t>(shifted.data() + 1, bytes.size() + 2)), sample_blocks());
}

// ---- malformed input ------------------------------------------------------------------------------------

TEST(EtdumpFormat, RejectsWrongIdentifierAndShortInput) {
  auto bytes = write_etdump(sample_blocks());
  EXPECT_THROW(parse_etdump(std::span<const uint8_t>(bytes.data(), 11)), Error);
  bytes[8] = 'X';
  EXPECT_FALSE(is_etdump(bytes));
  try {
    parse_etdump(bytes);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ED00"), std::string::npos) << e.what();
  }
}

TEST(EtdumpFormat, RejectsEveryTruncation) {
  const auto bytes = write_etdump(sample_blocks());
  for (size_t n = 0; n < bytes.size(); ++n) {
    // As cut (the size prefix then overstates the data) ...
    auto cut = std::make_unique<uint8_t[]>(n + 1);  // exact-size heap block: ASan catches any over-read
    std::memcpy(cut.get(), bytes.data(), n);
    EXPECT_THROW(parse_etdump(std::span<const uint8_t>(cut.get(), n)), Error) << "length " << n;
    // ... and with the prefix rewritten to match, so that the FlatBuffer verifier has to catch it.
    if (n >= 12) {
      const uint32_t prefix = static_cast<uint32_t>(n - 4);
      std::memcpy(cut.get(), &prefix, 4);
      try {
        parse_etdump(std::span<const uint8_t>(cut.get(), n));
      } catch (const Error&) {
      }
    }
  }
}

TEST(EtdumpFormat, SurvivesRandomCorruption) {
  const auto original = write_etdump(sample_blocks());
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[4 + rng() % (bytes.size() - 4)] ^= static_cast<uint8_t>(1u << (rng() % 8));
    try {
      (void)parse_etdump(bytes);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);  // some flips hit offsets and must be caught
}

TEST(EtdumpFormat, RejectsOutOfBoundsOffsets) {
  auto bytes = write_etdump(sample_blocks());
  // The root offset (bytes 4..8, relative to byte 4) pointing past the end must be caught by verification.
  const uint32_t bad_root = static_cast<uint32_t>(bytes.size());
  std::memcpy(bytes.data() + 4, &bad_root, 4);
  EXPECT_THROW(parse_etdump(bytes), Error);
}

}  // namespace
}  // namespace etnp::format
