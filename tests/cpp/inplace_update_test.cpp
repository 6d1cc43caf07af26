// In-place buffer updates (elide_copies, src/runtime/method_passes.cpp): `t = index_put(buf, ...)` ... `buf.copy_(t)`, the form
// exporters give a KV-cache write, runs in the buffer itself when nothing else touches the buffer's bytes in
// between. Each program here runs several calls and is checked against the state it must carry, including the
// cases where the rewrite would be wrong and must not happen.
#include <gtest/gtest.h>

#include <vector>

#include "tools/writer/writer.h"
#include "writer_test_util.h"

namespace etnp::writer_testing {
namespace {

constexpr int kRows = 4, kCols = 3;

Value position_input(const int64_t& pos) {
  TensorRef t;
  t.dtype = ScalarType::Long;
  t.sizes = {1};
  t.data = &pos;
  return t;
}

/// How the update program is varied.
enum class Between {
  Nothing,          // only readers of t between the scatter and the copy back
  ReadBuffer,       // the old buffer is read after the scatter: t cannot live in the buffer
  OverwriteBuffer,  // another tensor planned on the buffer's bytes is written in between
  ViewOfUpdate,     // the update is read through a view planned on its bytes (an exporter-elided view)
};

/// cache[pos] = row; y = 2 * (updated cache); cache keeps the update. With ReadBuffer a second output is
/// the cache as it was before this call.
std::vector<uint8_t> update_program(Between between) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const std::vector<float> zeros(kRows * kCols, 0.0f);
  // The writer cannot alias a mutable tensor's bytes, so the overwrite case keeps its buffer in plain planned
  // memory (zeroed at load and kept between calls, like the mutable one).
  const int32_t cache = between == Between::OverwriteBuffer
                            ? m.planned_tensor(f32({kRows, kCols}))
                            : m.mutable_tensor(f32({kRows, kCols}), format::as_bytes(zeros));
  const int32_t pos = m.planned_tensor({ScalarType::Long, {1}, {}, ShapeDynamism::Static, {}});
  const int32_t row = m.planned_tensor(f32({1, kCols}));
  const int32_t t = m.planned_tensor(f32({kRows, kCols}));
  const int32_t y = m.planned_tensor(f32({kRows, kCols}));
  const int32_t old = m.planned_tensor(f32({kRows, kCols}));
  m.kernel("aten::index_put.out", {cache, m.optional_tensor_list({pos}), row, m.bool_value(false), t, t});
  if (between == Between::ReadBuffer) m.kernel("aten::mul.Scalar_out", {cache, m.double_value(1.0), old, old});
  if (between == Between::OverwriteBuffer) {
    const int32_t scratch = m.planned_alias(cache, f32({kRows, kCols}));
    m.kernel("aten::mul.Scalar_out", {t, m.double_value(0.0), scratch, scratch});  // zeros the buffer's bytes
  }
  const int32_t doubled_source = between == Between::ViewOfUpdate ? m.planned_alias(t, f32({kRows, kCols})) : t;
  m.kernel("aten::mul.Scalar_out", {doubled_source, m.double_value(2.0), y, y});
  m.kernel("aten::copy_", {cache, t, m.bool_value(false), cache});
  m.set_inputs({pos, row});
  m.set_outputs(between == Between::ReadBuffer ? std::vector<int32_t>{y, old} : std::vector<int32_t>{y});
  return w.serialize();
}

/// Runs calls writing row (k % kRows) with values 10k + column, checking y (and the old cache) each time.
void run_updates(Between between) {
  Program p = load_bytes(update_program(between));
  auto method = p.load_method("forward");
  std::vector<float> expected(kRows * kCols, 0.0f);
  for (int call = 0; call < 6; ++call) {
    const int64_t pos = call % kRows;
    std::vector<float> row(kCols);
    for (int c = 0; c < kCols; ++c) row[c] = static_cast<float>(10 * (call + 1) + c);
    const std::vector<float> before = expected;
    for (int c = 0; c < kCols; ++c) expected[pos * kCols + c] = row[c];
    const auto out = exec(*method, {position_input(pos), tensor_input(row, {1, kCols})});
    std::vector<float> doubled(expected);
    for (float& v : doubled) v *= 2.0f;
    EXPECT_EQ(floats(out[0]), doubled) << "call " << call;
    if (between == Between::ReadBuffer) {
      EXPECT_EQ(floats(out[1]), before) << "call " << call;
    }
  }
}

TEST(InplaceUpdate, IndexPutThenCopyBackKeepsTheState) { run_updates(Between::Nothing); }

TEST(InplaceUpdate, BufferReadBetweenSeesItsOldValue) { run_updates(Between::ReadBuffer); }

TEST(InplaceUpdate, BufferBytesReusedInBetweenDoNotCorruptTheUpdate) { run_updates(Between::OverwriteBuffer); }

TEST(InplaceUpdate, ViewPlannedOnTheUpdateStillSeesIt) { run_updates(Between::ViewOfUpdate); }

// slice_scatter writing row 1 of the buffer, then the copy back: same rewrite, other scatter.
TEST(InplaceUpdate, SliceScatterThenCopyBackKeepsTheState) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const std::vector<float> initial = {1, 2, 3, 4, 5, 6};
  const int32_t cache = m.mutable_tensor(f32({2, kCols}), format::as_bytes(initial));
  const int32_t row = m.planned_tensor(f32({1, kCols}));
  const int32_t t = m.planned_tensor(f32({2, kCols}));
  const int32_t y = m.planned_tensor(f32({2, kCols}));
  m.kernel("aten::slice_scatter.out", {cache, row, m.int_value(0), m.int_value(1), m.int_value(2), m.int_value(1), t, t});
  m.kernel("aten::add.out", {t, t, m.int_value(1), y, y});
  m.kernel("aten::copy_", {cache, t, m.bool_value(false), cache});
  m.set_inputs({row});
  m.set_outputs({y});
  Program p = load_bytes(w.serialize());
  auto method = p.load_method("forward");
  const std::vector<float> first = {7, 8, 9}, second = {-1, -2, -3};
  EXPECT_EQ(floats(exec(*method, {tensor_input(first, {1, kCols})})[0]), (std::vector<float>{2, 4, 6, 14, 16, 18}));
  EXPECT_EQ(floats(exec(*method, {tensor_input(second, {1, kCols})})[0]), (std::vector<float>{2, 4, 6, -2, -4, -6}));
  // A second method instance starts from the initial state: the buffer is per instance.
  auto fresh = p.load_method("forward");
  EXPECT_EQ(floats(exec(*fresh, {tensor_input(second, {1, kCols})})[0]), (std::vector<float>{2, 4, 6, -2, -4, -6}));
  EXPECT_EQ(floats(exec(*method, {tensor_input(first, {1, kCols})})[0]), (std::vector<float>{2, 4, 6, 14, 16, 18}));
}

}  // namespace
}  // namespace etnp::writer_testing
