// Program and method behaviour on the public fixtures: stateful calls, external data, input validation,
// error kinds and messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "fixtures.h"

namespace etnp::testing {
namespace {

std::string path(const std::string& rel) { return fixtures_dir() + "/" + rel; }

TEST(Runtime, KvCacheStatePersistsAcrossCalls) {
  ETNP_REQUIRE_FIXTURES();
  const nlohmann::json* entry = manifest_entry("exported/tiny_llama_kv_portable");
  ASSERT_NE(entry, nullptr);
  Program program = Program::load_file(path("exported/tiny_llama_kv_portable.pte"));
  for (const auto& c : (*entry)["cases"]) {
    if (!c.value("stateful", false)) continue;
    auto method = program.load_method("forward");
    int k = 0;
    for (const auto& call : c["calls"]) {
      CaseInput in = load_case_inputs(call["inputs"]);
      const auto out = method->execute(in.values);
      EXPECT_EQ(compare_output(out.at(0), call["outputs"][0], c["atol"], c["rtol"]), "") << "call " << k;
      ++k;
    }
    EXPECT_EQ(k, 16);
  }
}

TEST(Runtime, FreshLoadStartsWithZeroedState) {
  ETNP_REQUIRE_FIXTURES();
  // Running call 5 of the decode on a fresh method gives a different answer than in sequence: state matters.
  const nlohmann::json* entry = manifest_entry("exported/tiny_llama_kv_portable");
  Program program = Program::load_file(path("exported/tiny_llama_kv_portable.pte"));
  const nlohmann::json* stateful = nullptr;
  for (const auto& c : (*entry)["cases"]) {
    if (c.value("stateful", false)) stateful = &c;
  }
  ASSERT_NE(stateful, nullptr);
  const auto& call5 = (*stateful)["calls"][5];
  auto fresh = program.load_method("forward");
  CaseInput in = load_case_inputs(call5["inputs"]);
  const auto out = fresh->execute(in.values);
  EXPECT_NE(compare_output(out.at(0), call5["outputs"][0], (*stateful)["atol"], (*stateful)["rtol"]), "");
}

TEST(Runtime, ExternalDataInLegacyPtdLayout) {
  ETNP_REQUIRE_FIXTURES();
  LoadOptions options;
  options.data_files = {path("upstream/linear.ptd")};
  Program program = Program::load_file(path("upstream/linear.pte"), options);
  auto method = program.load_method("forward");
  std::vector<float> x(9, 1.0f);
  const auto out = method->execute(std::vector<Value>{TensorRef{ScalarType::Float, {3, 3}, {}, x.data()}});
  EXPECT_EQ(std::get<TensorRef>(out.at(0)).sizes, (std::vector<int64_t>{3, 3}));
}

TEST(Runtime, MissingExternalDataIsAPreciseLoadError) {
  ETNP_REQUIRE_FIXTURES();
  Program program = Program::load_file(path("upstream/linear.pte"));
  Error e = expect_error([&] { program.load_method("forward"); });
  EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
  EXPECT_NE(std::string(e.what()).find("linear.weight"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(".ptd"), std::string::npos) << e.what();
  EXPECT_EQ(e.context().method, "forward");
}

TEST(Runtime, WrongDataFileIsRejected) {
  ETNP_REQUIRE_FIXTURES();
  LoadOptions options;
  options.data_files = {path("upstream/add.pte")};  // a program, not external data
  Error e = expect_error([&] { Program::load_file(path("upstream/linear.pte"), options); });
  EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
  EXPECT_NE(std::string(e.what()).find("not .ptd"), std::string::npos) << e.what();
}

TEST(Runtime, UnknownMethodListsTheMethods) {
  ETNP_REQUIRE_FIXTURES();
  Program program = Program::load_file(path("nprt/multi.pte"));
  Error e = expect_error([&] { program.load_method("backward"); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("'forward'"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("'double'"), std::string::npos) << e.what();
}

class InputValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    ETNP_REQUIRE_FIXTURES();
    program_ = std::make_unique<Program>(Program::load_file(path("upstream/add.pte")));
    method_ = program_->load_method("forward");
  }
  Error fails_with(const std::vector<Value>& inputs) {
    return expect_error([&] { method_->execute(inputs); });
  }
  std::unique_ptr<Program> program_;
  std::unique_ptr<Method> method_;
  std::vector<float> one_ = {1.0f};
  std::vector<int64_t> one_long_ = {1};
};

TEST_F(InputValidation, WrongCount) {
  Error e = fails_with({TensorRef{ScalarType::Float, {1}, {}, one_.data()}});
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("expected 2 inputs, got 1"), std::string::npos) << e.what();
}

TEST_F(InputValidation, WrongDtypeNamesInputAndTypes) {
  Error e = fails_with({TensorRef{ScalarType::Float, {1}, {}, one_.data()},
                        TensorRef{ScalarType::Long, {1}, {}, one_long_.data()}});
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_EQ(e.context().input_index, 1);
  EXPECT_NE(std::string(e.what()).find("expected dtype float32, got int64"), std::string::npos) << e.what();
}

TEST_F(InputValidation, WrongRank) {
  Error e = fails_with({TensorRef{ScalarType::Float, {1, 1}, {}, one_.data()},
                        TensorRef{ScalarType::Float, {1}, {}, one_.data()}});
  EXPECT_EQ(e.context().input_index, 0);
  EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
}

TEST_F(InputValidation, WrongShape) {
  std::vector<float> two = {1, 2};
  Error e = fails_with({TensorRef{ScalarType::Float, {2}, {}, two.data()},
                        TensorRef{ScalarType::Float, {1}, {}, one_.data()}});
  EXPECT_NE(std::string(e.what()).find("expected shape [1], got [2]"), std::string::npos) << e.what();
}

TEST_F(InputValidation, NonTensorWhereTensorExpected) {
  Error e = fails_with({int64_t{1}, TensorRef{ScalarType::Float, {1}, {}, one_.data()}});
  EXPECT_NE(std::string(e.what()).find("expected a tensor, got Int"), std::string::npos) << e.what();
}

TEST_F(InputValidation, NullData) {
  Error e = fails_with({TensorRef{ScalarType::Float, {1}, {}, nullptr}, TensorRef{ScalarType::Float, {1}, {}, one_.data()}});
  EXPECT_NE(std::string(e.what()).find("null"), std::string::npos) << e.what();
}

TEST_F(InputValidation, MethodStillWorksAfterRejectedInputs) {
  fails_with({TensorRef{ScalarType::Long, {1}, {}, one_long_.data()}, TensorRef{ScalarType::Float, {1}, {}, one_.data()}});
  std::vector<float> a = {2}, b = {3};
  const auto out = method_->execute(std::vector<Value>{TensorRef{ScalarType::Float, {1}, {}, a.data()},
                                                       TensorRef{ScalarType::Float, {1}, {}, b.data()}});
  EXPECT_EQ(static_cast<const float*>(std::get<TensorRef>(out.at(0)).data)[0], 5.0f);
}

TEST(Runtime, PrimitiveInputMustEqualExportedValue) {
  ETNP_REQUIRE_FIXTURES();
  Program program = Program::load_file(path("djl/prim_input.pte"));
  auto method = program.load_method("forward");
  std::vector<float> x = {1, 2, 3, 4};
  const TensorRef t{ScalarType::Float, {4}, {}, x.data()};
  Error e = expect_error([&] { method->execute(std::vector<Value>{t, 3.0}); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_EQ(e.context().input_index, 1);
  EXPECT_NE(std::string(e.what()).find("exported with the value 2"), std::string::npos) << e.what();
  const auto out = method->execute(std::vector<Value>{t, 2.0});
  EXPECT_EQ(static_cast<const float*>(std::get<TensorRef>(out.at(0)).data)[3], 8.0f);
}

TEST(Runtime, DynamicInputAboveItsBoundNamesTheDimension) {
  ETNP_REQUIRE_FIXTURES();
  Program program = Program::load_file(path("nprt/dynamic.pte"));
  auto method = program.load_method("forward");
  std::vector<float> x(9, 1.0f);
  Error e = expect_error([&] { method->execute(std::vector<Value>{TensorRef{ScalarType::Float, {9}, {}, x.data()}}); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("dimension 0 is 9, above its upper bound 8"), std::string::npos) << e.what();
}

TEST(Runtime, NotAProgramSaysWhatTheFileIs) {
  ETNP_REQUIRE_FIXTURES();
  Error zip = expect_error([&] { Program::load_file(path("negative/torchscript_like_zip.pte")); });
  EXPECT_EQ(zip.kind(), ErrorKind::ProgramLoadError);
  EXPECT_NE(std::string(zip.what()).find("ZIP archive"), std::string::npos);
  Error text = expect_error([&] { Program::load_file(path("negative/text_placeholder.pte")); });
  EXPECT_NE(std::string(text.what()).find("plain text"), std::string::npos);
}

TEST(Runtime, LoadsFromBufferAndDescriptor) {
  ETNP_REQUIRE_FIXTURES();
  std::ifstream in(path("upstream/add.pte"), std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Program from_buffer = Program::load_buffer(bytes);
  EXPECT_EQ(from_buffer.method_names(), std::vector<std::string>{"forward"});
  // An odd offset forces the copy path.
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::copy(bytes.begin(), bytes.end(), shifted.begin() + 1);
  Program unaligned = Program::load_buffer(std::span<const uint8_t>(shifted).subspan(1));
  EXPECT_TRUE(unaligned.has_method("forward"));
}

TEST(Runtime, ProfilingRecordsOneEventPerInstruction) {
  ETNP_REQUIRE_FIXTURES();
  LoadOptions options;
  options.enable_profiling = true;
  Program program = Program::load_file(path("nprt/const_methods.pte"), options);
  auto method = program.load_method("forward");
  std::vector<float> x = {1, 2, 3};
  method->execute(std::vector<Value>{TensorRef{ScalarType::Float, {3}, {}, x.data()}});
  ASSERT_EQ(method->profile_events().size(), method->meta().num_instructions);
  EXPECT_EQ(method->profile_events().back().name, "aten::add.out");
  for (const auto& ev : method->profile_events()) EXPECT_LE(ev.start_ns, ev.end_ns);
}

}  // namespace
}  // namespace etnp::testing
