// Method::set_output_buffer: an output the method writes into storage of its own is redirected to caller
// memory; every other output is refused with the reason (Method::output_buffer_refusal), because binding
// it would not change what the method writes or would overwrite memory the program owns.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/writer/writer.h"
#include "fixtures.h"
#include "writer_test_util.h"

namespace etnp::writer_testing {
namespace {

using ::etnp::testing::expect_error;

// forward(x, y): outputs
//   0  x + y        unplanned, written by add: bindable
//   1  x * 2        memory-planned
//   2  a constant
//   3  x            the unplanned input itself
//   4  view of 0    et_view
//   5  move target  a value the move at instruction 3 replaces with x + y
//   6  unused       an unplanned tensor no instruction touches
//   7  an Int
// twice(x, y): outputs 0 and 1 are the same tensor.
std::vector<uint8_t> outputs_program() {
  format::ProgramWriter w;
  const std::vector<float> ones(6, 1.0f);
  {
    auto& m = w.add_method("forward");
    const int32_t x = m.unplanned_tensor(f32({2, 3}));
    const int32_t y = m.planned_tensor(f32({2, 3}));
    const int32_t sum = m.unplanned_tensor(f32({2, 3}));
    const int32_t doubled = m.planned_tensor(f32({2, 3}));
    const int32_t constant = m.constant_tensor(f32({2, 3}), format::as_bytes(ones));
    const int32_t view = m.unplanned_tensor(f32({6}));
    const int32_t moved = m.unplanned_tensor(f32({2, 3}));
    const int32_t unused = m.unplanned_tensor(f32({2, 3}));
    m.kernel("aten::add.out", {x, y, m.int_value(1), sum, sum});
    m.kernel("aten::mul.Scalar_out", {x, m.double_value(2.0), doubled, doubled});
    m.kernel("executorch_prim::et_view.default", {sum, m.int_list({6}), view});
    m.move(sum, moved);
    m.set_inputs({x, y});
    m.set_outputs({sum, doubled, constant, x, view, moved, unused, m.int_value(7)});
  }
  {
    auto& m = w.add_method("twice");
    const int32_t x = m.planned_tensor(f32({2, 3}));
    const int32_t y = m.planned_tensor(f32({2, 3}));
    const int32_t sum = m.unplanned_tensor(f32({2, 3}));
    m.kernel("aten::add.out", {x, y, m.int_value(1), sum, sum});
    m.set_inputs({x, y});
    m.set_outputs({sum, sum});
  }
  return w.serialize();
}

class OutputBuffer : public ::testing::Test {
 protected:
  OutputBuffer() : program_(load_bytes(outputs_program())), method_(program_.load_method("forward")) {}

  /// The message set_output_buffer refuses output `index` with (a buffer large enough for any output).
  std::string refusal_message(Method& method, size_t index) {
    std::vector<float> buffer(6);
    Error e = expect_error([&] { method.set_output_buffer(index, buffer.data(), buffer.size() * sizeof(float)); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_EQ(e.context().method, method.name());
    return e.detail();
  }

  Program program_;
  std::unique_ptr<Method> method_;
};

TEST_F(OutputBuffer, AnUnplannedOutputIsWrittenToCallerMemory) {
  EXPECT_EQ(method_->output_buffer_refusal(0), "");
  std::vector<float> buffer(6, -1.0f);
  method_->set_output_buffer(0, buffer.data(), buffer.size() * sizeof(float));
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, y = {10, 20, 30, 40, 50, 60};
  const auto out = exec(*method_, {tensor_input(x, {2, 3}), tensor_input(y, {2, 3})});
  EXPECT_EQ(std::get<TensorRef>(out[0]).data, buffer.data());
  EXPECT_EQ(buffer, (std::vector<float>{11, 22, 33, 44, 55, 66}));
}

TEST_F(OutputBuffer, RefusesAMemoryPlannedOutput) {
  EXPECT_EQ(refusal_message(*method_, 1),
            "output 1 is memory-planned: the method writes it into its own planned memory, so it cannot be bound to "
            "caller memory");
}

TEST_F(OutputBuffer, RefusesAConstantOutput) {
  EXPECT_EQ(refusal_message(*method_, 2),
            "output 2 is a constant of the program, which the method never writes, so it cannot be bound to caller "
            "memory");
}

TEST_F(OutputBuffer, RefusesAnOutputThatIsAnInput) {
  EXPECT_EQ(refusal_message(*method_, 3),
            "output 3 is method input 0 returned as is (aliased), so it cannot be bound to caller memory");
}

TEST_F(OutputBuffer, RefusesAView) {
  EXPECT_EQ(refusal_message(*method_, 4),
            "output 4 is a view of another tensor of the method (aliased), so it cannot be bound to caller memory");
}

TEST_F(OutputBuffer, RefusesAMoveTarget) {
  EXPECT_EQ(refusal_message(*method_, 5),
            "output 5 is the target of the move at instruction 3 (aliased: it holds another value when the method "
            "runs), so it cannot be bound to caller memory");
}

TEST_F(OutputBuffer, RefusesAnOutputNoInstructionWrites) {
  EXPECT_EQ(refusal_message(*method_, 6),
            "output 6 is used by no instruction (nothing would write the caller's memory), so it cannot be bound to "
            "caller memory");
}

TEST_F(OutputBuffer, RefusesANonTensor) {
  EXPECT_EQ(refusal_message(*method_, 7), "output 7 is Int, not a tensor, so it cannot be bound to caller memory");
}

TEST_F(OutputBuffer, RefusesAnOutputThatIsAnotherOutput) {
  auto twice = program_.load_method("twice");
  EXPECT_EQ(refusal_message(*twice, 0),
            "output 0 is the same tensor as output 1 (aliased), so it cannot be bound to caller memory");
  EXPECT_EQ(refusal_message(*twice, 1),
            "output 1 is the same tensor as output 0 (aliased), so it cannot be bound to caller memory");
}

TEST_F(OutputBuffer, RefusesABufferTooSmallNullOrAnIndexOutOfRange) {
  std::vector<float> buffer(6);
  Error small = expect_error([&] { method_->set_output_buffer(0, buffer.data(), 5 * sizeof(float)); });
  EXPECT_EQ(small.kind(), ErrorKind::InvalidArgument);
  EXPECT_EQ(small.detail(), "output 0 needs 24 bytes, the buffer has 20");
  Error null = expect_error([&] { method_->set_output_buffer(0, nullptr, 24); });
  EXPECT_EQ(null.detail(), "output 0: the buffer is null");
  Error index = expect_error([&] { method_->set_output_buffer(8, buffer.data(), 24); });
  EXPECT_EQ(index.kind(), ErrorKind::InvalidArgument);
  EXPECT_EQ(index.detail(), "the method has 8 outputs, there is no output 8");
  Error query = expect_error([&] { method_->output_buffer_refusal(8); });
  EXPECT_EQ(query.detail(), "the method has 8 outputs, there is no output 8");
  // A refused binding leaves the output where it was: the method still runs into its own memory.
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, y = {1, 1, 1, 1, 1, 1};
  const auto out = exec(*method_, {tensor_input(x, {2, 3}), tensor_input(y, {2, 3})});
  EXPECT_EQ(floats(out[0]), (std::vector<float>{2, 3, 4, 5, 6, 7}));
  EXPECT_NE(std::get<TensorRef>(out[0]).data, buffer.data());
}

}  // namespace
}  // namespace etnp::writer_testing
