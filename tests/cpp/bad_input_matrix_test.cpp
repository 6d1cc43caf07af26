// The bad-input matrix of issue 18 (item 6), C++ side: each cell gets the documented etnp::ErrorKind and a message
// naming the input (Error::context().input_index, "input N" in what()) and what is wrong, or is accepted and gives
// the right result. tests/python/test_bad_input_matrix.py is the Python side; its docstring maps both.
//
// cell                                     test (this file unless named)
// wrong dtype                              bad_input_test.cpp BadInputArguments.WrongDtype; BFloat16Cells
// wrong rank                               BadInputArguments.WrongRank; ZeroDimensional (0-d for rank 2 and back)
// wrong shape                              BadInputArguments.WrongShape; NegativeSize
// dim beyond its dynamic bound             AboveTheDynamicBound; runtime_test.cpp
//                                          Runtime.DynamicInputAboveItsBoundNamesTheDimension (a fixture)
// non-contiguous / other memory order      BadInputArguments.WrongLayout (a TensorRef has a dim order, no strides:
//                                          negative strides and gaps cannot be expressed in C++)
// misaligned data                          MisalignedPlannedInputIsCopied, MisalignedUnplannedInputIsRefused
// read-only data                           (TensorRef::data is const void*: every input is read-only to the
//                                          caller unless Method::writes_input; no cell to test)
// null data                                runtime_test.cpp InputValidation.NullData; EmptyTensors (null is fine
//                                          for zero bytes)
// 0-d tensors                              ZeroDimensional
// empty tensors (a dim of 0)               EmptyTensors
// bfloat16                                 BFloat16Cells (uint16 is no stand-in for bfloat16 in C++)
// scalar for a tensor                      BadInputArguments.NonTensorForATensor; ScalarAndTensorSwapped
// tensor for a scalar                      ScalarAndTensorSwapped
// None and values of the wrong kind        NoneAndWrongKinds; runtime_test.cpp
//                                          Runtime.PrimitiveInputMustEqualExportedValue
// too few / too many inputs                BadInputArguments.WrongInputCount; TooManyInputs, SetInputPastTheEnd
// buffer changing size during the call     (Python only: a C++ caller owns the memory for the call)
// .ptd missing                             BadInputExternalData.MissingPtd, .MissingPtdFileOnDisk
// .ptd wrong                               BadInputExternalData.PtdWithoutTheKey, .PtdWithTheWrongShape,
//                                          .ProgramGivenAsPtd; PtdWithTheWrongDtype
// .ptd duplicated                          PtdGivenTwice, TwoPtdsWithTheSameKey
// .ptd truncated                           PtdTruncatedAtEveryLength; format_test.cpp Ptd.RejectsNonPtdBytes
// .ptd corrupt                             PtdWithEachByteCorrupted
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "tools/writer/writer.h"
#include "writer_test_util.h"

namespace etnp::writer_testing {
namespace {

TensorSpec spec(ScalarType dtype, std::vector<int32_t> sizes, ShapeDynamism dynamism = ShapeDynamism::Static) {
  return {dtype, std::move(sizes), {}, dynamism, {}};
}

/// One program with a method per cell:
///   forward(x f32[2, 3] planned, y f32[2, 3] unplanned) = x + y
///   dynamic(x f32[<=4, 3]) = x + x
///   zero_d(x f32[]) = x + x
///   empty(x f32[0, 3]) = x + x
///   bf16(x bf16[2, 3]) = x + x
///   scalars(3, 2.5, true, None) returns its inputs
std::vector<uint8_t> matrix_program() {
  format::ProgramWriter w;
  {
    auto& m = w.add_method("forward");
    const int32_t x = m.planned_tensor(f32({2, 3}));
    const int32_t y = m.unplanned_tensor(f32({2, 3}));
    const int32_t out = m.planned_tensor(f32({2, 3}));
    m.kernel("aten::add.out", {x, y, m.int_value(1), out, out});
    m.set_inputs({x, y});
    m.set_outputs({out});
  }
  auto doubling = [&](const char* name, TensorSpec in, TensorSpec out_spec) {
    auto& m = w.add_method(name);
    const int32_t x = m.planned_tensor(std::move(in));
    const int32_t out = m.planned_tensor(std::move(out_spec));
    m.kernel("aten::add.out", {x, x, m.int_value(1), out, out});
    m.set_inputs({x});
    m.set_outputs({out});
  };
  doubling("dynamic", f32({4, 3}, ShapeDynamism::DynamicBound), f32({4, 3}, ShapeDynamism::DynamicBound));
  doubling("zero_d", f32({}), f32({}));
  doubling("empty", f32({0, 3}), f32({0, 3}));
  doubling("bf16", spec(ScalarType::BFloat16, {2, 3}), spec(ScalarType::BFloat16, {2, 3}));
  {
    auto& m = w.add_method("scalars");
    const int32_t n = m.int_value(3), d = m.double_value(2.5), b = m.bool_value(true), none = m.none();
    m.set_inputs({n, d, b, none});
    m.set_outputs({n, d, b, none});
  }
  return w.serialize();
}

class BadInputMatrix : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { bytes_ = new std::vector<uint8_t>(matrix_program()); }
  static void TearDownTestSuite() {
    delete bytes_;
    bytes_ = nullptr;
  }

  std::unique_ptr<Method> method(const std::string& name) {
    if (!program_) program_ = std::make_unique<Program>(load_bytes(*bytes_));
    return program_->load_method(name);
  }

  /// `call` fails with InvalidArgument at input `index` (-1: none), its message holding each of `needles`.
  static void expect_invalid(const std::function<void()>& call, int64_t index, const std::vector<std::string>& needles) {
    try {
      call();
      ADD_FAILURE() << "accepted (expected: " << (needles.empty() ? "" : needles[0]) << ")";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << msg;
      EXPECT_EQ(e.context().input_index, index) << msg;
      if (index >= 0) {
        EXPECT_NE(msg.find("input " + std::to_string(index) + ":"), std::string::npos) << msg;
      }
      EXPECT_NE(msg.find("method '"), std::string::npos) << msg;
      for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
    }
  }

  static std::vector<uint8_t>* bytes_;
  std::unique_ptr<Program> program_;
  std::vector<float> x_ = {1, 2, 3, 4, 5, 6}, y_ = {10, 20, 30, 40, 50, 60};
};

std::vector<uint8_t>* BadInputMatrix::bytes_ = nullptr;

TensorRef ref(ScalarType dtype, std::vector<int64_t> sizes, const void* data) {
  TensorRef t;
  t.dtype = dtype;
  t.sizes = std::move(sizes);
  t.data = data;
  return t;
}

// --- Shapes -----------------------------------------------------------------------------------------------------

TEST_F(BadInputMatrix, AboveTheDynamicBound) {
  auto m = method("dynamic");
  std::vector<float> big(5 * 4, 1.0f);
  expect_invalid([&] { exec(*m, {tensor_input(big, {5, 3})}); }, 0,
                 {"dimension 0 is 5, above its upper bound 4", "bound [4, 3]"});
  expect_invalid([&] { exec(*m, {tensor_input(big, {2, 4})}); }, 0, {"dimension 1 is 4, above its upper bound 3"});
  expect_invalid([&] { exec(*m, {tensor_input(big, {12})}); }, 0, {"rank-2", "got rank 1"});
  // Within the bound it still runs, at the given shape.
  const auto out = exec(*m, {tensor_input(x_, {2, 3})});
  EXPECT_EQ(sizes_of(out[0]), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(floats(out[0]), (std::vector<float>{2, 4, 6, 8, 10, 12}));
}

TEST_F(BadInputMatrix, NegativeSize) {
  expect_invalid([&] { exec(*method("dynamic"), {tensor_input(x_, {-1, 3})}); }, 0, {"negative size", "[-1, 3]"});
  expect_invalid([&] { exec(*method("forward"), {tensor_input(x_, {2, 3}), tensor_input(y_, {2, -3})}); }, 1,
                 {"negative size", "[2, -3]"});
}

TEST_F(BadInputMatrix, ZeroDimensional) {
  auto m = method("zero_d");
  const std::vector<float> one = {2.5f};
  const auto out = exec(*m, {tensor_input(one, {})});
  EXPECT_TRUE(sizes_of(out[0]).empty());
  EXPECT_EQ(floats(out[0]), (std::vector<float>{5.0f}));
  expect_invalid([&] { exec(*m, {tensor_input(one, {1})}); }, 0, {"rank-0", "got rank 1 shape [1]"});
  // A 0-d tensor where a rank-2 one is wanted.
  expect_invalid([&] { exec(*method("forward"), {tensor_input(one, {}), tensor_input(y_, {2, 3})}); }, 0,
                 {"rank-2", "got rank 0"});
}

TEST_F(BadInputMatrix, EmptyTensors) {
  // A static [0, 3] input takes zero bytes: null data is fine, and so is any pointer.
  // The outputs point into the method's storage: the method outlives them.
  for (const void* data : {static_cast<const void*>(nullptr), static_cast<const void*>(x_.data())}) {
    const auto empty = method("empty");
    const auto out = exec(*empty, {ref(ScalarType::Float, {0, 3}, data)});
    EXPECT_EQ(sizes_of(out[0]), (std::vector<int64_t>{0, 3}));
    EXPECT_TRUE(floats(out[0]).empty());
  }
  // A dynamic input shrunk to no rows runs and returns no rows; the next call at full size is right again.
  auto dynamic = method("dynamic");
  EXPECT_EQ(sizes_of(exec(*dynamic, {ref(ScalarType::Float, {0, 3}, nullptr)})[0]), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(floats(exec(*dynamic, {tensor_input(x_, {2, 3})})[0]), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  // An empty tensor is still a shape: [0, 3] is not [2, 3], and null data with bytes to read is refused.
  expect_invalid([&] { exec(*method("forward"), {ref(ScalarType::Float, {0, 3}, nullptr), tensor_input(y_, {2, 3})}); },
                 0, {"expected shape [2, 3], got [0, 3]"});
  expect_invalid([&] { exec(*method("empty"), {ref(ScalarType::Float, {1, 3}, nullptr)}); }, 0,
                 {"expected shape [0, 3], got [1, 3]"});
  expect_invalid([&] { exec(*dynamic, {ref(ScalarType::Float, {1, 3}, nullptr)}); }, 0, {"tensor data is null"});
}

// --- Memory -----------------------------------------------------------------------------------------------------

/// `values` copied one byte into a buffer: a float pointer that is not 4-byte aligned.
struct Misaligned {
  explicit Misaligned(const std::vector<float>& values) {
    const size_t n = std::min(values.size() * sizeof(float), sizeof(storage) - 1);
    EXPECT_EQ(n, values.size() * sizeof(float));
    std::memcpy(at, values.data(), n);
  }
  alignas(16) uint8_t storage[64] = {};
  uint8_t* at = storage + 1;
};

TEST_F(BadInputMatrix, MisalignedPlannedInputIsCopied) {
  // Input 0 is memory-planned: its bytes are copied into the method's aligned arena, whatever their address.
  Misaligned x(x_);
  ASSERT_NE(reinterpret_cast<uintptr_t>(x.at) % alignof(float), 0u);
  const auto forward = method("forward");  // outlives `out`, which points into its storage
  const auto out = exec(*forward, {ref(ScalarType::Float, {2, 3}, x.at), tensor_input(y_, {2, 3})});
  EXPECT_EQ(floats(out[0]), (std::vector<float>{11, 22, 33, 44, 55, 66}));
}

TEST_F(BadInputMatrix, MisalignedUnplannedInputIsRefused) {
  // Input 1 is not planned: the method would hand the caller's pointer to its kernels, which may load floats
  // from it (undefined behaviour when misaligned). It is refused before anything runs, naming the alignment.
  Misaligned y(y_);
  auto m = method("forward");
  expect_invalid([&] { exec(*m, {tensor_input(x_, {2, 3}), ref(ScalarType::Float, {2, 3}, y.at)}); }, 1,
                 {"not aligned", "4-byte"});
  // The same data at an aligned address runs.
  EXPECT_EQ(floats(exec(*m, {tensor_input(x_, {2, 3}), tensor_input(y_, {2, 3})})[0]),
            (std::vector<float>{11, 22, 33, 44, 55, 66}));
}

// --- dtypes -----------------------------------------------------------------------------------------------------

TEST_F(BadInputMatrix, BFloat16Cells) {
  auto m = method("bf16");
  // bfloat16 bits of 1, 2, -3, 0, 0.25, 100: doubled exactly.
  const std::vector<uint16_t> bits = {0x3F80, 0x4000, 0xC040, 0x0000, 0x3E80, 0x42C8};
  const auto out = exec(*m, {ref(ScalarType::BFloat16, {2, 3}, bits.data())});
  const auto& t = std::get<TensorRef>(out[0]);
  ASSERT_EQ(t.dtype, ScalarType::BFloat16);
  std::vector<uint16_t> got(6);
  std::memcpy(got.data(), t.data, 12);
  EXPECT_EQ(got, (std::vector<uint16_t>{0x4000, 0x4080, 0xC0C0, 0x0000, 0x3F00, 0x4348}));  // 2, 4, -6, 0, .5, 200
  // uint16 bits are no stand-in for bfloat16 in C++ (the Python package's passthrough is its own), nor is a
  // type of the same size.
  expect_invalid([&] { exec(*m, {ref(ScalarType::UInt16, {2, 3}, bits.data())}); }, 0,
                 {"expected dtype bfloat16, got uint16"});
  expect_invalid([&] { exec(*m, {ref(ScalarType::Half, {2, 3}, bits.data())}); }, 0,
                 {"expected dtype bfloat16, got float16"});
  expect_invalid([&] { exec(*method("forward"), {ref(ScalarType::BFloat16, {2, 3}, bits.data()), tensor_input(y_, {2, 3})}); },
                 0, {"expected dtype float32, got bfloat16"});
}

// --- Kinds of value ---------------------------------------------------------------------------------------------

TEST_F(BadInputMatrix, ScalarAndTensorSwapped) {
  auto m = method("scalars");
  const std::vector<Value> good = {int64_t{3}, 2.5, true, std::monostate{}};
  const auto out = m->execute(good);
  EXPECT_EQ(std::get<int64_t>(out[0]), 3);
  EXPECT_EQ(std::get<double>(out[1]), 2.5);
  EXPECT_EQ(std::get<bool>(out[2]), true);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(out[3]));
  const std::vector<int64_t> three = {3};
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<Value> in = good;
    in[i] = ref(ScalarType::Long, {}, three.data());
    const char* wanted[] = {"expected an Int, got Tensor", "expected a Double, got Tensor", "expected a Bool, got Tensor",
                            "expected None, got Tensor"};
    expect_invalid([&] { m->execute(in); }, static_cast<int64_t>(i), {wanted[i]});
  }
  // A scalar for a tensor, of each kind.
  for (const Value& v : {Value(int64_t{1}), Value(1.0), Value(true), Value(std::string("x"))}) {
    expect_invalid([&] { exec(*method("forward"), {tensor_input(x_, {2, 3}), v}); }, 1, {"expected a tensor, got"});
  }
}

TEST_F(BadInputMatrix, NoneAndWrongKinds) {
  expect_invalid([&] { exec(*method("forward"), {std::monostate{}, tensor_input(y_, {2, 3})}); }, 0,
                 {"expected a tensor, got None"});
  auto m = method("scalars");
  expect_invalid([&] { exec(*m, {std::monostate{}, 2.5, true, std::monostate{}}); }, 0, {"expected an Int, got None"});
  expect_invalid([&] { exec(*m, {int64_t{3}, std::string("2.5"), true, std::monostate{}}); }, 1,
                 {"expected a Double, got String"});
  expect_invalid([&] { exec(*m, {int64_t{3}, 2.5, int64_t{1}, std::monostate{}}); }, 2, {"expected a Bool, got Int"});
  expect_invalid([&] { exec(*m, {true, 2.5, true, std::monostate{}}); }, 0, {"expected an Int, got Bool"});
  expect_invalid([&] { exec(*m, {int64_t{3}, 2.5, true, int64_t{0}}); }, 3, {"expected None, got Int"});
  // The right kind with another value than the exported one.
  expect_invalid([&] { exec(*m, {int64_t{4}, 2.5, true, std::monostate{}}); }, 0, {"exported with the value 3", "got 4"});
}

TEST_F(BadInputMatrix, TooManyInputs) {
  auto m = method("forward");
  expect_invalid([&] { exec(*m, {tensor_input(x_, {2, 3}), tensor_input(y_, {2, 3}), tensor_input(y_, {2, 3})}); }, -1,
                 {"expected 2 inputs, got 3"});
  expect_invalid([&] { exec(*m, {}); }, -1, {"expected 2 inputs, got 0"});
  expect_invalid([&] { exec(*method("zero_d"), {}); }, -1, {"expected 1 input"});
}

TEST_F(BadInputMatrix, SetInputPastTheEnd) {
  auto m = method("forward");
  expect_invalid([&] { m->set_input(2, tensor_input(x_, {2, 3})); }, -1, {"takes 2 inputs, there is no input 2"});
}

// --- TensorView: set_input and output_view, the allocation-free forms -----------------------------------------

TensorView view_of(const std::vector<float>& data, const std::vector<int64_t>& sizes) {
  return TensorView{ScalarType::Float, sizes, {}, data.data()};
}

TEST_F(BadInputMatrix, TensorViewInputsAndOutputViews) {
  auto m = method("forward");
  const std::vector<int64_t> shape = {2, 3};
  m->set_input(0, view_of(x_, shape));
  m->set_input(1, view_of(y_, shape));
  m->run();
  const TensorView out = m->output_view(0);
  // The same tensor output() describes, and x + y.
  const TensorRef ref = std::get<TensorRef>(m->output(0));
  EXPECT_EQ(out.dtype, ScalarType::Float);
  EXPECT_EQ(std::vector<int64_t>(out.sizes.begin(), out.sizes.end()), ref.sizes);
  EXPECT_EQ(std::vector<uint8_t>(out.dim_order.begin(), out.dim_order.end()), (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(out.data, ref.data);
  EXPECT_EQ(out.numel(), 6);
  EXPECT_EQ(out.nbytes(), 24u);
  const auto* sum = static_cast<const float*>(out.data);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(sum[i], x_[i] + y_[i]) << i;
  // A dynamic input takes its shape from the view; the output view follows it.
  auto dynamic = method("dynamic");
  const std::vector<float> three(9, 1.5f);
  const std::vector<int64_t> three_rows = {3, 3};
  dynamic->set_input(0, view_of(three, three_rows));
  dynamic->run();
  const TensorView doubled = dynamic->output_view(0);
  EXPECT_EQ(std::vector<int64_t>(doubled.sizes.begin(), doubled.sizes.end()), three_rows);
  EXPECT_EQ(static_cast<const float*>(doubled.data)[8], 3.0f);
}

TEST_F(BadInputMatrix, TensorViewCellsAreCheckedAsTensorRefs) {
  auto m = method("forward");
  const std::vector<int64_t> shape = {2, 3}, wrong = {3, 2}, rank1 = {6};
  const std::vector<uint8_t> transposed = {1, 0};
  TensorView int_view = view_of(x_, shape);
  int_view.dtype = ScalarType::Int;
  expect_invalid([&] { m->set_input(1, int_view); }, 1, {"expected dtype float32, got int32"});
  expect_invalid([&] { m->set_input(0, view_of(x_, wrong)); }, 0, {"expected shape [2, 3], got [3, 2]"});
  expect_invalid([&] { m->set_input(0, view_of(x_, rank1)); }, 0, {"expected a rank-2 tensor", "got rank 1"});
  TensorView channels_last = view_of(x_, shape);
  channels_last.dim_order = transposed;
  expect_invalid([&] { m->set_input(0, channels_last); }, 0, {"expected memory order [0, 1], got [1, 0]"});
  TensorView null_data = view_of(x_, shape);
  null_data.data = nullptr;
  expect_invalid([&] { m->set_input(0, null_data); }, 0, {"tensor data is null"});
  expect_invalid([&] { m->set_input(2, view_of(x_, shape)); }, -1, {"takes 2 inputs, there is no input 2"});
  const std::vector<float> big(15, 1.0f);
  const std::vector<int64_t> five_rows = {5, 3};
  expect_invalid([&] { method("dynamic")->set_input(0, view_of(big, five_rows)); }, 0,
                 {"dimension 0 is 5, above its upper bound 4"});
  // A tensor view where the method takes a scalar; output_view of a scalar output and past the last output.
  auto scalars = method("scalars");
  expect_invalid([&] { scalars->set_input(0, view_of(x_, shape)); }, 0, {"expected an Int, got Tensor"});
  scalars->set_input(0, int64_t{3});
  scalars->set_input(1, 2.5);
  scalars->set_input(2, true);
  scalars->set_input(3, std::monostate{});
  scalars->run();
  expect_invalid([&] { (void)scalars->output_view(0); }, -1, {"output 0 is an Int, not a tensor"});
  expect_invalid([&] { (void)scalars->output_view(9); }, -1, {"the method has 4 outputs, there is no output 9"});
}

// --- .ptd files -------------------------------------------------------------------------------------------------

std::vector<uint8_t> weight_ptd() {
  format::PtdWriter ptd;
  external_weight_program(&ptd);
  return ptd.serialize();
}

/// Loads external_weight_program with `buffers` as its .ptd data and runs forward on ones; the error, if any.
std::optional<Error> run_with_ptds(const std::vector<std::vector<uint8_t>>& buffers, std::vector<float>* out = nullptr) {
  try {
    LoadOptions options;
    for (const auto& b : buffers) options.data_buffers.push_back(b);
    Program p = load_bytes(external_weight_program(nullptr), options);
    const std::vector<float> x(6, 1.0f);
    const auto forward = p.load_method("forward");  // outlives `result`, which may point into its storage
    const auto result = exec(*forward, {tensor_input(x, {2, 3})});
    if (out != nullptr) *out = floats(result[0]);
    return std::nullopt;
  } catch (const Error& e) {
    return e;
  }
}

TEST(BadInputMatrixPtd, PtdWithTheWrongDtype) {
  format::PtdWriter wrong;
  const std::vector<int32_t> w = {1, 2, 3, 4, 5, 6};
  wrong.add_tensor("layer.weight", TensorLayout{ScalarType::Int, {2, 3}, {}}, format::as_bytes(w));
  const std::optional<Error> e = run_with_ptds({wrong.serialize()});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), ErrorKind::ProgramLoadError);
  const std::string msg = e->what();
  EXPECT_NE(msg.find("'layer.weight' is int32[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32[2, 3]"), std::string::npos) << msg;
}

TEST(BadInputMatrixPtd, PtdGivenTwice) {
  const std::vector<uint8_t> ptd = weight_ptd();
  std::vector<float> out;
  ASSERT_FALSE(run_with_ptds({ptd}, &out).has_value());
  EXPECT_EQ(out, (std::vector<float>{2, 3, 4, 5, 6, 7}));
  const std::optional<Error> e = run_with_ptds({ptd, ptd});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), ErrorKind::ProgramLoadError);
  const std::string msg = e->what();
  EXPECT_NE(msg.find("data key 'layer.weight' is defined twice"), std::string::npos) << msg;
  EXPECT_NE(msg.find("<data buffer 0>"), std::string::npos) << msg;
  EXPECT_NE(msg.find("<data buffer 1>"), std::string::npos) << msg;
}

TEST(BadInputMatrixPtd, TwoPtdsWithTheSameKey) {
  // Different files, different values, one key: which one wins would be a guess, so both are refused.
  format::PtdWriter other;
  const std::vector<float> w = {9, 9, 9, 9, 9, 9}, extra = {1};
  other.add_tensor("extra", TensorLayout{ScalarType::Float, {1}, {}}, format::as_bytes(extra));
  other.add_tensor("layer.weight", TensorLayout{ScalarType::Float, {2, 3}, {}}, format::as_bytes(w));
  const std::optional<Error> e = run_with_ptds({weight_ptd(), other.serialize()});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->kind(), ErrorKind::ProgramLoadError);
  const std::string msg = e->what();
  EXPECT_NE(msg.find("'layer.weight' is defined twice"), std::string::npos) << msg;
  EXPECT_NE(msg.find("<data buffer 0>"), std::string::npos) << msg;
  EXPECT_NE(msg.find("<data buffer 1>"), std::string::npos) << msg;
}

TEST(BadInputMatrixPtd, PtdTruncatedAtEveryLength) {
  const std::vector<uint8_t> ptd = weight_ptd();
  for (size_t len = 0; len < ptd.size(); ++len) {
    const std::optional<Error> e = run_with_ptds({std::vector<uint8_t>(ptd.begin(), ptd.begin() + static_cast<std::ptrdiff_t>(len))});
    ASSERT_TRUE(e.has_value()) << "a .ptd cut to " << len << " of " << ptd.size() << " bytes was accepted";
    EXPECT_EQ(e->kind(), ErrorKind::ProgramLoadError) << len << ": " << e->what();
    EXPECT_NE(std::string(e->what()).find("<data buffer 0>"), std::string::npos) << len << ": " << e->what();
  }
}

TEST(BadInputMatrixPtd, PtdWithEachByteCorrupted) {
  // Each byte in turn inverted: a load error naming the data (or its key), or a run; never anything else. Bytes
  // of the weight itself change the result (a .ptd has no checksum); bytes of the header and the tables must not
  // go unnoticed, so most cases are refused.
  const std::vector<uint8_t> ptd = weight_ptd();
  size_t refused = 0;
  for (size_t pos = 0; pos < ptd.size(); ++pos) {
    std::vector<uint8_t> bad = ptd;
    bad[pos] ^= 0xFF;
    std::optional<Error> e;
    try {
      e = run_with_ptds({bad});
    } catch (const std::exception& other) {
      ADD_FAILURE() << "byte " << pos << ": a non-etnp exception: " << other.what();
      continue;
    }
    if (!e) continue;
    ++refused;
    const std::string msg = e->what();
    EXPECT_EQ(e->kind(), ErrorKind::ProgramLoadError) << pos << ": " << msg;
    EXPECT_TRUE(msg.find("<data buffer 0>") != std::string::npos || msg.find("layer.weight") != std::string::npos)
        << pos << ": " << msg;
  }
  EXPECT_GT(refused, ptd.size() / 2);
}

}  // namespace
}  // namespace etnp::writer_testing
