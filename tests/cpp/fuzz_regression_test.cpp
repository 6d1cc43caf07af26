// Regression tests for what the libFuzzer targets (fuzz/, scripts/fuzz.sh) found, each on a writer-made file
// with the few bytes edited that reproduce the finding (docs/security.md lists them).
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <string>
#include <vector>

#include "etnp/error.h"
#include "etnp/program.h"
#include "etnp/tensor.h"
#include "format/byte_source.h"
#include "format/pte_file.h"
#include "llm/tokenizer_impl.h"
#include "writer_test_util.h"

namespace etnp {
namespace {

std::string parse_error(const std::vector<uint8_t>& bytes, Verification level) {
  try {
    format::PteFile::parse(format::ByteSource::from_buffer(bytes, nullptr, "<test>"), level);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    return e.what();
  }
  return "parsed";
}

// fuzz_pte: the verifier accepts a vector of int64 whose elements are 4 mod 8 (it checks the length word's
// alignment only); validate_plan then read the planned buffer sizes with misaligned loads (UBSan).
TEST(FuzzRegression, MisalignedInt64VectorIsRefused) {
  std::vector<uint8_t> bytes = writer_testing::small_add_program(false);
  const auto* program = format::fb::GetProgram(bytes.data());
  const auto* plan = program->execution_plan()->Get(0);
  const auto* sizes = plan->non_const_buffer_sizes();
  ASSERT_NE(sizes, nullptr);
  ASSERT_GE(sizes->size(), 2u);
  const size_t data = static_cast<size_t>(sizes->Data() - bytes.data());
  ASSERT_EQ(data % 8, 0u);
  // Move the vector 4 bytes on: its length word (the same count) over the low half of entry 0 (the unused
  // placeholder), its elements at 4 mod 8.
  const flatbuffers::voffset_t field = reinterpret_cast<const flatbuffers::Table*>(plan)->GetOptionalFieldOffset(
      format::fb::ExecutionPlan::VT_NON_CONST_BUFFER_SIZES);
  ASSERT_NE(field, 0);
  const size_t field_at = static_cast<size_t>(reinterpret_cast<const uint8_t*>(plan) - bytes.data()) + field;
  uint32_t offset;
  std::memcpy(&offset, &bytes[field_at], 4);
  offset += 4;
  std::memcpy(&bytes[field_at], &offset, 4);
  const uint32_t count = sizes->size();
  std::memcpy(&bytes[data], &count, 4);
  for (Verification level : {Verification::Minimal, Verification::InternalConsistency}) {
    EXPECT_EQ(parse_error(bytes, level), "corrupt program: execution plan 0's planned buffer sizes is not 8-byte aligned");
  }
}

// The alignment check above refused an empty int list whose (absent) elements would start at 4 mod 8, as the
// writer leaves the dim order of a 0-d tensor's copy: nothing is read from it. Such a file loads and runs.
TEST(FuzzRegression, EmptyListAtFourModEightIsAccepted) {
  bool misaligned_seen = false;
  for (int extra = 0; extra < 8; ++extra) {
    format::ProgramWriter w;
    auto& m = w.add_method("forward");
    const int32_t x = m.planned_tensor(writer_testing::f32({}));
    for (int k = 0; k < extra % 4; ++k) m.int_list({k});  // shifts what follows
    if (extra >= 4) m.bool_value(true);
    const int32_t empty = m.int_list({});
    const int32_t y = m.planned_tensor(writer_testing::f32({}));
    m.kernel("dim_order_ops::_to_dim_order_copy.out", {x, m.bool_value(false), empty, y, y});
    m.set_inputs({x});
    m.set_outputs({y});
    const std::vector<uint8_t> bytes = w.serialize();
    const auto* value = format::fb::GetProgram(bytes.data())->execution_plan()->Get(0)->values()->Get(empty);
    ASSERT_NE(value->val_as_IntList(), nullptr);
    misaligned_seen = misaligned_seen || reinterpret_cast<uintptr_t>(value->val_as_IntList()->items()->Data()) % 8 != 0;
    Program program = writer_testing::load_bytes(bytes);
    auto method = program.load_method("forward");
    const std::vector<float> in = {2.5f};
    EXPECT_EQ(writer_testing::floats(writer_testing::exec(*method, {writer_testing::tensor_input(in, {})})[0]), in);
  }
  EXPECT_TRUE(misaligned_seen) << "no layout put the empty list at 4 mod 8: the test no longer tests it";
}

// fuzz_tokenizer: a number too large for a double in tokenizer.json made nlohmann's parser throw out_of_range
// (406), which load_hf_json did not catch (only parse_error): std::terminate instead of an etnp::Error.
TEST(FuzzRegression, TokenizerJsonNumberOverflowIsAnError) {
  for (const char* text : {R"({"version": 7e7777})", "{\"a\": -1e999, \"b\": \"\x01\xff\"}"}) {
    try {
      llm::load_hf_json(text, "/nonexistent/tokenizer.json");
      ADD_FAILURE() << "loaded " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("not valid JSON: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("number overflow"), std::string::npos) << e.what();
    }
  }
}

// fuzz_tokenizer: a SentencePiece model whose second piece starts with a NUL byte made the library's trie builder
// throw Darts::Details::Exception ("zero-length key") out of LoadFromSerializedProto, which reports every other
// malformed model as a status: std::terminate instead of an etnp::Error. The input is the fuzzer's 24 bytes, a
// ModelProto: pieces {piece: "<unk>", type: UNKNOWN} and {piece: "\0\0\0\x80", score: -0.0}.
TEST(FuzzRegression, SentencePieceZeroLengthPieceIsAnError) {
  const unsigned char model[] = {0x0a, 0x09, 0x0a, 0x05, '<', 'u', 'n', 'k', '>', 0x18, 0x02, 0x0a,
                                 0x0b, 0x0a, 0x04, 0x00, 0x00, 0x00, 0x80, 0x15, 0x00, 0x00, 0x80, 0x02};
  try {
    llm::load_sentencepiece(std::string_view(reinterpret_cast<const char*>(model), sizeof model), "m.model");
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("m.model: not a SentencePiece model: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("failed to insert key"), std::string::npos) << e.what();
  }
}

// fuzz_execute: a method input that is a constant tensor had each execute's input copied over the program's
// own bytes (a read-only mapping of the file would fault); an instruction writing a constant would too.
TEST(FuzzRegression, WritesToConstantsAreRefusedAtLoad) {
  auto program_with = [](bool constant_input) {
    format::ProgramWriter w;
    auto& m = w.add_method("forward");
    const int32_t x = m.planned_tensor(writer_testing::f32({3}));
    const std::vector<float> bias = {0.5f, 1.5f, -2.0f};
    const int32_t b = m.constant_tensor(writer_testing::f32({3}), format::as_bytes(bias));
    const int32_t one = m.int_value(1);
    const int32_t out = m.planned_tensor(writer_testing::f32({3}));
    if (constant_input) {
      m.kernel("aten::add.out", {x, b, one, out, out});
      m.set_inputs({x, b});
      m.set_outputs({out});
    } else {
      m.kernel("aten::add.out", {x, x, one, b, b});  // writes its sum into the constant
      m.set_inputs({x});
      m.set_outputs({b});
    }
    return w.serialize();
  };
  const std::pair<bool, const char*> cases[] = {
      {true, "corrupt program: input 1 is value 1, a constant tensor (constants are read-only)"},
      {false, "corrupt program: the instruction writes value 1, a constant tensor (constants are read-only)"}};
  for (const auto& [constant_input, expected] : cases) {
    const std::vector<uint8_t> bytes = program_with(constant_input);
    const Program program = Program::load_buffer(bytes);
    try {
      program.load_method("forward");
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("forward"), std::string::npos) << e.what();
      if (!constant_input) {
        EXPECT_EQ(e.context().instruction, 0) << e.what();
      }
    }
  }
}

TEST(FuzzRegression, OverlappingWritesAreRefusedAtLoad) {
  // fuzz_execute: a corrupt plan put a kernel's output 8 bytes into its input's storage, so that the kernel's
  // copy ran between overlapping ranges. A tensor updated in place (the same storage) stays allowed.
  auto program_with = [](uint64_t out_offset, int32_t out_numel) {
    format::ProgramWriter w;
    auto& m = w.add_method("forward");
    const int32_t x = m.planned_tensor(writer_testing::f32({8}));
    const int32_t out = m.planned_alias(x, writer_testing::f32({out_numel}), out_offset);
    m.kernel("aten::roll.out", {x, m.int_list({2}), m.int_list({}), out, out});
    m.set_inputs({x});
    m.set_outputs({out});
    return w.serialize();
  };
  const std::vector<uint8_t> overlapping = program_with(8, 6);
  try {
    Program::load_buffer(overlapping).load_method("forward");
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    EXPECT_NE(std::string(e.what()).find("corrupt memory plan: the instruction writes value"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("at 8 bytes from its start"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("aten::roll.out"), std::string::npos) << e.what();
    EXPECT_EQ(e.context().instruction, 0) << e.what();
  }
  // In place: loads, and rolls as if it had read a copy of its input.
  const std::vector<uint8_t> in_place = program_with(0, 8);
  const Program program = Program::load_buffer(in_place);
  auto method = program.load_method("forward");
  const std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7};
  const auto out = method->execute(std::vector<Value>{TensorRef{ScalarType::Float, {8}, {}, x.data()}});
  const auto& y = std::get<TensorRef>(out.at(0));
  ASSERT_EQ(y.sizes, (std::vector<int64_t>{8}));
  const auto* yf = static_cast<const float*>(y.data);
  EXPECT_EQ(std::vector<float>(yf, yf + 8), (std::vector<float>{6, 7, 0, 1, 2, 3, 4, 5}));
}

// fuzz_bpte: a tensor with a zero dim beside huge ones holds no element, so its element count passed every check,
// but its strides overflowed int64 (UBSan in strides_from_dim_order). The Tensor refuses such a shape, at
// construction and at a resize (which a caller's input shape reaches).
TEST(FuzzRegression, ZeroSizedTensorWhoseStridesOverflowIsRefused) {
  const int64_t big = int64_t{1} << 40;
  const std::vector<int64_t> huge = {0, big, big};
  try {
    Tensor t(ScalarType::Float, huge, {}, nullptr);
    FAIL() << "constructed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    EXPECT_NE(std::string(e.what()).find("[0, 1099511627776, 1099511627776]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("strides overflow"), std::string::npos) << e.what();
  }
  const std::vector<int64_t> bound = {4, 4, 4};
  Tensor dynamic(ScalarType::Float, bound, {}, nullptr, ShapeDynamism::DynamicBound);
  EXPECT_FALSE(dynamic.try_resize(huge));
  try {
    dynamic.resize(huge);
    FAIL() << "resized";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ExecutionError);
    EXPECT_NE(std::string(e.what()).find("strides overflow"), std::string::npos) << e.what();
  }
  const std::vector<int64_t> empty = {0, 4, 4};  // an ordinary empty shape still resizes
  EXPECT_TRUE(dynamic.try_resize(empty));
  EXPECT_EQ(dynamic.strides()[0], 16);
}

}  // namespace
}  // namespace etnp
