// BundledProgram (.bpte) reader: the upstream fixture against its goldens, synthetic files exercising every
// value kind and validation rule, and truncated / corrupted files (rejected, never read out of bounds).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <random>

#include "bundled_program_generated.h"
#include "etnp/error.h"
#include "format/bundled_program.h"

namespace etnp::format {
namespace {

namespace bp = ::bundled_program_flatbuffer;

std::string fixtures_dir() {
  if (const char* env = std::getenv("ETNP_FIXTURES")) return env;
  return ETNP_FIXTURES_DIR;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Data bytes of a little-endian .npy file (header skipped), or empty when unreadable.
std::vector<uint8_t> npy_data(const std::string& path) {
  const auto bytes = read_file(path);
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) return {};
  const size_t header_len = bytes[8] | (bytes[9] << 8);  // version 1 header
  if (bytes[6] != 1 || 10 + header_len > bytes.size()) return {};
  return std::vector<uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(10 + header_len), bytes.end());
}

std::vector<uint8_t> span_bytes(std::span<const uint8_t> s) { return std::vector<uint8_t>(s.begin(), s.end()); }

TEST(BundledProgramFormat, UpstreamFixtureMatchesGoldens) {
  const std::string path = fixtures_dir() + "/upstream/bundled_program.bpte";
  const auto bytes = read_file(path);
  if (bytes.empty()) GTEST_SKIP() << "fixture upstream/bundled_program.bpte not available";
  ASSERT_TRUE(BundledProgram::is_bundled_program(bytes));

  const BundledProgram bundle = BundledProgram::load_file(path);
  EXPECT_EQ(bundle.version(), 2u);
  // The embedded program is a complete .pte: identifier ET12 at bytes 4..8, aligned to 32 in the file.
  ASSERT_GE(bundle.program().size(), 8u);
  EXPECT_EQ(std::memcmp(bundle.program().data() + 4, "ET12", 4), 0);

  ASSERT_EQ(bundle.method_test_suites().size(), 1u);
  const BundledMethodTests* forward = bundle.find_method("forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(bundle.find_method("backward"), nullptr);
  ASSERT_EQ(forward->test_cases.size(), 10u);

  const std::string golden = fixtures_dir() + "/upstream/bundled_program.golden/forward__case";
  for (size_t c = 0; c < forward->test_cases.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const BundledTestCase& tc = forward->test_cases[c];
    ASSERT_EQ(tc.inputs.size(), 2u);
    ASSERT_EQ(tc.expected_outputs.size(), 1u);
    for (size_t i = 0; i < 2; ++i) {
      const BundledValue& v = tc.inputs[i];
      ASSERT_EQ(v.kind, BundledValue::Kind::Tensor);
      EXPECT_EQ(v.tensor.dtype, ScalarType::Int);
      EXPECT_EQ(v.tensor.sizes, (std::vector<int64_t>{2, 2}));
      EXPECT_EQ(v.tensor.dim_order, (std::vector<uint8_t>{0, 1}));
      const std::string npy = golden + std::to_string(c) + "/input_" + std::to_string(i) + ".npy";
      EXPECT_EQ(span_bytes(v.tensor.data), npy_data(npy));
    }
    const BundledValue& out = tc.expected_outputs[0];
    ASSERT_EQ(out.kind, BundledValue::Kind::Tensor);
    EXPECT_EQ(out.tensor.numel(), 4);
    EXPECT_EQ(span_bytes(out.tensor.data), npy_data(golden + std::to_string(c) + "/output_0.npy"));
  }

  // parse() over the same bytes (in place, or copied when misaligned) gives the same program bytes.
  const BundledProgram again = BundledProgram::parse(bytes);
  EXPECT_EQ(span_bytes(again.program()), span_bytes(bundle.program()));
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  const BundledProgram misaligned = BundledProgram::parse(std::span<const uint8_t>(shifted.data() + 1, bytes.size()));
  EXPECT_EQ(span_bytes(misaligned.program()), span_bytes(bundle.program()));
}

TEST(BundledProgramFormat, MissingFileIsALoadError) {
  try {
    BundledProgram::load_file(fixtures_dir() + "/does/not/exist.bpte");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
  }
}

// ---- synthetic files ----------------------------------------------------------------------------------------

struct TensorSpec {
  executorch_flatbuffer::ScalarType dtype = executorch_flatbuffer::ScalarType::FLOAT;
  std::vector<int32_t> sizes;
  std::vector<uint8_t> data;
  std::vector<uint8_t> dim_order;
};

flatbuffers::Offset<bp::Value> tensor_value(flatbuffers::FlatBufferBuilder& b, const TensorSpec& t) {
  b.ForceVectorAlignment(t.data.size(), 1, 16);
  auto data = b.CreateVector(t.data);
  auto tensor = bp::CreateTensor(b, t.dtype, b.CreateVector(t.sizes), data, b.CreateVector(t.dim_order));
  return bp::CreateValue(b, bp::ValueUnion::Tensor, tensor.Union());
}

std::vector<uint8_t> fake_program() {
  std::vector<uint8_t> p(40, 0);
  std::memcpy(p.data() + 4, "ET12", 4);
  return p;
}

/// A bundle with one method and one test case holding `inputs` (plus a Double, Int and Bool input).
std::vector<uint8_t> make_bundle(const std::vector<TensorSpec>& tensors, bool with_program = true) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<bp::Value>> inputs;
  for (const auto& t : tensors) inputs.push_back(tensor_value(b, t));
  inputs.push_back(bp::CreateValue(b, bp::ValueUnion::Double, bp::CreateDouble(b, 2.5).Union()));
  inputs.push_back(bp::CreateValue(b, bp::ValueUnion::Int, bp::CreateInt(b, -7).Union()));
  inputs.push_back(bp::CreateValue(b, bp::ValueUnion::Bool, bp::CreateBool(b, true).Union()));
  std::vector<flatbuffers::Offset<bp::Value>> outputs;
  if (!tensors.empty()) outputs.push_back(tensor_value(b, tensors[0]));
  auto tc = bp::CreateBundledMethodTestCaseDirect(b, &inputs, &outputs);
  std::vector<flatbuffers::Offset<bp::BundledMethodTestCase>> cases = {tc};
  auto suite = bp::CreateBundledMethodTestSuiteDirect(b, "forward", &cases);
  std::vector<flatbuffers::Offset<bp::BundledMethodTestSuite>> suites = {suite};
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> program;
  if (with_program) {
    const auto p = fake_program();
    b.ForceVectorAlignment(p.size(), 1, 32);
    program = b.CreateVector(p);
  }
  auto root = bp::CreateBundledProgram(b, 2, b.CreateVector(suites), program);
  bp::FinishBundledProgramBuffer(b, root);
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

TensorSpec float_2x2() {
  TensorSpec t;
  t.sizes = {2, 2};
  t.dim_order = {1, 0};
  const float v[4] = {1.f, 2.f, 3.f, 4.f};
  t.data.resize(16);
  std::memcpy(t.data.data(), v, 16);
  return t;
}

TEST(BundledProgramFormat, DecodesEveryValueKind) {
  TensorSpec scalar;  // 0-d int64 tensor without a dim order
  scalar.dtype = executorch_flatbuffer::ScalarType::LONG;
  scalar.data.assign(8, 0);
  scalar.data[0] = 5;
  const auto bytes = make_bundle({float_2x2(), scalar});
  const BundledProgram bundle = BundledProgram::parse(bytes);
  EXPECT_EQ(bundle.version(), 2u);
  EXPECT_EQ(span_bytes(bundle.program()), fake_program());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bundle.program().data()) % 32, reinterpret_cast<uintptr_t>(bytes.data()) % 32);
  const auto& tc = bundle.method_test_suites().at(0).test_cases.at(0);
  ASSERT_EQ(tc.inputs.size(), 5u);
  EXPECT_EQ(tc.inputs[0].tensor.dtype, ScalarType::Float);
  EXPECT_EQ(tc.inputs[0].tensor.dim_order, (std::vector<uint8_t>{1, 0}));
  float first;
  std::memcpy(&first, tc.inputs[0].tensor.data.data(), 4);
  EXPECT_EQ(first, 1.f);
  EXPECT_EQ(tc.inputs[1].tensor.dtype, ScalarType::Long);
  EXPECT_TRUE(tc.inputs[1].tensor.sizes.empty());
  EXPECT_EQ(tc.inputs[1].tensor.numel(), 1);
  EXPECT_EQ(tc.inputs[1].tensor.data.size(), 8u);
  ASSERT_EQ(tc.inputs[2].kind, BundledValue::Kind::Double);
  EXPECT_EQ(tc.inputs[2].double_value, 2.5);
  ASSERT_EQ(tc.inputs[3].kind, BundledValue::Kind::Int);
  EXPECT_EQ(tc.inputs[3].int_value, -7);
  ASSERT_EQ(tc.inputs[4].kind, BundledValue::Kind::Bool);
  EXPECT_TRUE(tc.inputs[4].bool_value);
  ASSERT_EQ(tc.expected_outputs.size(), 1u);
}

void expect_load_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  try {
    BundledProgram::parse(bytes);
    FAIL() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BundledProgramFormat, RejectsInconsistentTensors) {
  TensorSpec short_data = float_2x2();
  short_data.data.resize(12);
  expect_load_error(make_bundle({short_data}), "needs 16");

  TensorSpec bad_order = float_2x2();
  bad_order.dim_order = {0, 0};
  expect_load_error(make_bundle({bad_order}), "dim_order");

  TensorSpec wrong_rank_order = float_2x2();
  wrong_rank_order.dim_order = {0};
  expect_load_error(make_bundle({wrong_rank_order}), "dim_order");

  TensorSpec negative = float_2x2();
  negative.sizes = {-2, -2};
  expect_load_error(make_bundle({negative}), "negative size");

  TensorSpec bad_dtype = float_2x2();
  bad_dtype.dtype = static_cast<executorch_flatbuffer::ScalarType>(99);
  expect_load_error(make_bundle({bad_dtype}), "scalar type");

  TensorSpec too_many_dims = float_2x2();
  too_many_dims.sizes.assign(17, 1);
  too_many_dims.dim_order.clear();
  too_many_dims.data.resize(4);
  expect_load_error(make_bundle({too_many_dims}), "rank");

  expect_load_error(make_bundle({float_2x2()}, /*with_program=*/false), "no embedded program");
}

TEST(BundledProgramFormat, RejectsAZeroSizedTensorWhoseStridesOverflow) {
  // fuzz_bpte: [0, 2^31-1 x 3] holds no element, so its data (none) matched, but its strides overflow int64
  // (UBSan in strides_from_dim_order when the tensor was viewed).
  TensorSpec huge;
  huge.sizes = {0, INT32_MAX, INT32_MAX, INT32_MAX};
  try {
    BundledProgram::parse(make_bundle({huge}));
    FAIL() << "parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    EXPECT_NE(std::string(e.what()).find("element count overflows"), std::string::npos) << e.what();
  }
  huge.sizes = {0, INT32_MAX, INT32_MAX};  // 2^62: fits, and views as an empty tensor
  const BundledProgram fits = BundledProgram::parse(make_bundle({huge}));
  const Tensor view = fits.method_test_suites().at(0).test_cases.at(0).inputs.at(0).tensor.view();
  EXPECT_EQ(view.numel(), 0);
  EXPECT_EQ(view.strides()[0], int64_t{INT32_MAX} * INT32_MAX);
}

TEST(BundledProgramFormat, RejectsWrongIdentifierAndTinyInput) {
  auto bytes = make_bundle({float_2x2()});
  EXPECT_FALSE(BundledProgram::is_bundled_program(std::span<const uint8_t>(bytes.data(), 7)));
  expect_load_error(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 7), "too short");
  bytes[4] = 'E';
  bytes[5] = 'T';
  bytes[6] = '1';
  bytes[7] = '2';
  EXPECT_FALSE(BundledProgram::is_bundled_program(bytes));
  expect_load_error(bytes, "BP08");
}

TEST(BundledProgramFormat, ViewAndOutputComparison) {
  TensorSpec spec = float_2x2();  // dim order {1, 0}
  const auto bytes = make_bundle({spec});
  const BundledProgram bundle = BundledProgram::parse(bytes);
  const BundledTensor& expected = bundle.method_test_suites()[0].test_cases[0].expected_outputs[0].tensor;

  const Tensor view = expected.view();
  EXPECT_EQ(view.dtype(), ScalarType::Float);
  EXPECT_EQ(view.stride(0), 1);  // column-major
  EXPECT_EQ(view.stride(1), 2);
  EXPECT_EQ(view.data(), expected.data.data());

  // An output with the same layout and values within tolerance matches.
  std::vector<float> values = {1.f, 2.f, 3.f, 4.f + 2e-5f};
  const std::vector<int64_t> sizes = {2, 2};
  const std::vector<uint8_t> col_major = {1, 0}, row_major = {0, 1};
  Tensor actual(ScalarType::Float, sizes, col_major, values.data());
  std::string why;
  EXPECT_TRUE(bundled_tensor_matches(expected, actual, 1e-5, 1e-8, &why)) << why;
  EXPECT_FALSE(bundled_tensor_matches(expected, actual, 0, 0, &why));  // exact
  EXPECT_NE(why.find("element 3"), std::string::npos) << why;
  values[0] = 1.1f;
  EXPECT_FALSE(bundled_tensor_matches(expected, actual, 1e-5, 1e-8, &why));
  EXPECT_NE(why.find("element 0"), std::string::npos) << why;
  values[0] = 1.f;

  // Same values in another layout, another dtype, or another shape do not.
  Tensor other_layout(ScalarType::Float, sizes, row_major, values.data());
  EXPECT_FALSE(bundled_tensor_matches(expected, other_layout, 1e-5, 1e-8, &why));
  EXPECT_NE(why.find("layout"), std::string::npos) << why;
  Tensor other_dtype(ScalarType::Int, sizes, col_major, values.data());
  EXPECT_FALSE(bundled_tensor_matches(expected, other_dtype, 1e-5, 1e-8, &why));
  const std::vector<int64_t> flat = {4};
  Tensor other_shape(ScalarType::Float, flat, {}, values.data());
  EXPECT_FALSE(bundled_tensor_matches(expected, other_shape, 1e-5, 1e-8, &why));

  // NaN matches NaN; integers compare bytewise.
  TensorSpec nan_spec = float_2x2();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_spec.data.data(), &nan, 4);
  const auto nan_bytes = make_bundle({nan_spec});  // parse() views the bytes: keep them alive
  const BundledProgram nan_bundle = BundledProgram::parse(nan_bytes);
  const BundledTensor& nan_expected = nan_bundle.method_test_suites()[0].test_cases[0].expected_outputs[0].tensor;
  std::vector<float> nan_values = {nan, 2.f, 3.f, 4.f};
  Tensor nan_actual(ScalarType::Float, sizes, col_major, nan_values.data());
  EXPECT_TRUE(bundled_tensor_matches(nan_expected, nan_actual, 1e-5, 1e-8, &why)) << why;
  EXPECT_TRUE(bundled_tensor_matches(nan_expected, nan_actual, 0, 0, &why)) << why;
}

std::vector<uint8_t> fixture_or_synthetic() {
  auto bytes = read_file(fixtures_dir() + "/upstream/bundled_program.bpte");
  return bytes.empty() ? make_bundle({float_2x2()}) : bytes;
}

TEST(BundledProgramFormat, RejectsEveryTruncation) {
  const auto bytes = fixture_or_synthetic();
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto cut = std::make_unique<uint8_t[]>(n + 1);  // exact-size heap block: ASan catches any over-read
    std::memcpy(cut.get(), bytes.data(), n);
    EXPECT_THROW(BundledProgram::parse(std::span<const uint8_t>(cut.get(), n)), Error) << "length " << n;
  }
}

TEST(BundledProgramFormat, SurvivesRandomCorruption) {
  const auto original = fixture_or_synthetic();
  std::mt19937 rng(99);
  int rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    auto bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Keep the identifier so that the structure checks, not the identifier check, are exercised.
      const size_t at = rng() % bytes.size();
      if (at >= 4 && at < 8) continue;
      bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
    }
    try {
      const BundledProgram bundle = BundledProgram::parse(bytes);
      // Whatever was accepted must be internally consistent.
      for (const auto& suite : bundle.method_test_suites())
        for (const auto& tc : suite.test_cases)
          for (const auto& v : tc.inputs)
            if (v.kind == BundledValue::Kind::Tensor) {
              EXPECT_EQ(v.tensor.data.size(), static_cast<size_t>(v.tensor.numel()) * element_size(v.tensor.dtype));
              EXPECT_GE(v.tensor.data.data(), bytes.data());
              EXPECT_LE(v.tensor.data.data() + v.tensor.data.size(), bytes.data() + bytes.size());
            }
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace etnp::format
