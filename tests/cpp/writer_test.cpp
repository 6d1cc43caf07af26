// Programs written by format::ProgramWriter round-trip through the reader and run: every instruction type,
// several methods, dynamic shapes, the planner, constants, mutable state, named data, delegates and .ptd data.
// The byte layout is checked against the serializer's rules (shared/spec/pte-format.md §2, ptd §1.4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "etnp/backend.h"
#include "format/pte_file.h"
#include "format/ptd_file.h"
#include "tools/writer/xnnpack_writer.h"
#include "writer_test_util.h"

namespace etnp::writer_testing {
namespace {

using format::MethodWriter;
using format::ProgramWriter;
using format::XnnpackGraphWriter;

uint32_t u32_at(const std::vector<uint8_t>& b, size_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}
uint64_t u64_at(const std::vector<uint8_t>& b, size_t off) {
  uint64_t v;
  std::memcpy(&v, b.data() + off, 8);
  return v;
}

TEST(WriterSha256, KnownDigests) {
  EXPECT_EQ(format::sha256_hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(format::sha256_hex({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()}),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the padding spills into a second block.
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(format::sha256_hex({reinterpret_cast<const uint8_t*>(two.data()), two.size()}),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(WriterLayout, NoSegmentDataMeansNoExtendedHeader) {
  const std::vector<uint8_t> bytes = small_add_program(false);
  ASSERT_GE(bytes.size(), 16u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()) + 4, 4), "ET12");
  EXPECT_NE(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, 4), "eh00");
  Program p = load_bytes(bytes);
  const ProgramInfo info = p.info();
  EXPECT_FALSE(info.has_extended_header);
  // The (empty) constant segment is still listed, as the serializer does.
  ASSERT_EQ(info.segments.size(), 1u);
  EXPECT_EQ(info.segments[0].size, 0u);
}

TEST(WriterLayout, ExtendedHeaderAndSegmentsFollowTheSerializerRules) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const std::vector<float> a = {1, 2, 3}, b = {4, 5, 6, 7, 8};  // 12 and 20 bytes: the second needs padding
  const int32_t ca = m.constant_tensor(f32({3}), format::as_bytes(a));
  const int32_t cb = m.constant_tensor(f32({5}), format::as_bytes(b));
  const int32_t ca2 = m.constant_tensor(f32({3}), format::as_bytes(a));  // deduplicated
  const std::vector<uint8_t> blob(300, 7);
  w.add_named_data("blob", blob, 64);
  m.set_outputs({ca, cb, ca2});
  const std::vector<uint8_t> bytes = w.serialize();

  ASSERT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, 4), "eh00");
  EXPECT_EQ(u32_at(bytes, 12), 32u);
  const uint64_t program_size = u64_at(bytes, 16), base = u64_at(bytes, 24), data_size = u64_at(bytes, 32);
  EXPECT_EQ(base % 128, 0u);
  EXPECT_GE(base, program_size);
  EXPECT_LT(base - program_size, 128u);
  EXPECT_EQ(base + data_size, bytes.size());
  // Root offset moved past the 32-byte header: it must point inside the flatbuffer, after the header.
  EXPECT_GE(u32_at(bytes, 0), 40u);
  for (size_t i = program_size; i < base; ++i) ASSERT_EQ(bytes[i], 0) << "padding byte " << i;

  Program p = load_bytes(bytes);
  const ProgramInfo info = p.info();
  EXPECT_TRUE(info.has_extended_header);
  EXPECT_EQ(info.segment_base_offset, base);
  ASSERT_EQ(info.segments.size(), 2u);  // constants, then the named blob
  EXPECT_EQ(info.segments[0].offset, 0u);
  EXPECT_EQ(info.segments[0].size, 16u + 20u);  // 12 bytes padded to 16, then 20
  EXPECT_EQ(info.segments[1].offset % 128, 0u);  // lcm(128, 64)
  EXPECT_EQ(info.segments[1].offset, 128u);
  EXPECT_EQ(info.num_named_data, 1u);

  auto method = p.load_method("forward");
  const auto out = exec(*method, {});
  EXPECT_EQ(floats(out[0]), a);
  EXPECT_EQ(floats(out[1]), b);
  EXPECT_EQ(floats(out[2]), a);
  // Same constant index: the two values share one copy.
  EXPECT_EQ(std::get<TensorRef>(out[0]).data, std::get<TensorRef>(out[2]).data);
}

TEST(WriterRoundTrip, KernelCallsWithConstants) {
  Program p = load_bytes(small_add_program(true));
  auto method = p.load_method("forward");
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, y = {10, 20, 30, 40, 50, 60};
  const auto out = exec(*method, {tensor_input(x, {2, 3}), tensor_input(y, {2, 3})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{11.5f, 23.5f, 31.0f, 44.5f, 56.5f, 64.0f}));
  EXPECT_EQ(sizes_of(out[0]), (std::vector<int64_t>{2, 3}));
}

TEST(WriterRoundTrip, ScalarValuesAndListsLoadAsWritten) {
  ProgramWriter w;
  auto& m = w.add_method("get_values");  // a constant method: no inputs, no instructions
  const int32_t i = m.int_value(-7), d = m.double_value(2.5), b = m.bool_value(true), s = m.string_value("hello");
  const int32_t n = m.none();
  m.int_list({1, 2, 3});
  m.double_list({0.5, 1.5});
  m.bool_list({true, false});
  const std::vector<float> pi = {3.25f};
  const int32_t scalar = m.constant_tensor(f32({}), format::as_bytes(pi));  // rank 0: empty sizes and dim_order
  m.set_outputs({i, d, b, s, n, scalar});
  Program p = load_bytes(w.serialize());
  EXPECT_EQ(p.method_meta("get_values").num_instructions, 0u);
  auto method = p.load_method("get_values");
  const auto out = exec(*method, {});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(std::get<int64_t>(out[0]), -7);
  EXPECT_EQ(std::get<double>(out[1]), 2.5);
  EXPECT_EQ(std::get<bool>(out[2]), true);
  EXPECT_EQ(std::get<std::string>(out[3]), "hello");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(out[4]));
  EXPECT_EQ(floats(out[5]), pi);
  EXPECT_TRUE(sizes_of(out[5]).empty());
}

TEST(WriterRoundTrip, TensorListAndOptionalTensorListArguments) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t a = m.planned_tensor(f32({2}));
  const int32_t b = m.planned_tensor(f32({3}));
  const int32_t cat = m.planned_tensor(f32({5}));
  // aten::cat.out(Tensor[] tensors, int dim, *, Tensor(a!) out)
  m.kernel("aten::cat.out", {m.tensor_list({a, b}), m.int_value(0), cat, cat});
  // aten::index.Tensor_out(Tensor self, Tensor?[] indices, *, Tensor(a!) out)
  const std::vector<int64_t> idx = {4, 0, 2};
  const int32_t index = m.constant_tensor({ScalarType::Long, {3}, {}, {}, {}}, format::as_bytes(idx));
  const int32_t picked = m.planned_tensor(f32({3}));
  m.kernel("aten::index.Tensor_out", {cat, m.optional_tensor_list({index}), picked, picked});
  m.set_inputs({a, b});
  m.set_outputs({cat, picked});
  Program p = load_bytes(w.serialize());
  auto method = p.load_method("forward");
  const std::vector<float> x = {1, 2}, y = {3, 4, 5};
  const auto out = exec(*method, {tensor_input(x, {2}), tensor_input(y, {3})});
  EXPECT_EQ(floats(out[0]), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{5, 1, 3}));
}

// out = sum_{k=1..n} x via a loop: i = 0; do { acc += x; i += 1 } while (i < n). A backward jump-false on a
// constant false value makes the back edge; a forward jump-false on the condition leaves the loop.
TEST(WriterRoundTrip, JumpFalseLoopAndMove) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({3}));
  const int32_t acc = m.planned_tensor(f32({3}));
  const int32_t scratch = m.planned_tensor(f32({3}));
  const int32_t result = m.planned_tensor(f32({3}));
  const int32_t i = m.int_value(0), n = m.int_value(4), one = m.int_value(1), cond = m.bool_value(false);
  const int32_t never = m.bool_value(false);
  const int32_t zero_d = m.double_value(0.0);
  // 0: i = i - i (reset, so every execution starts at 0); 1: acc = x * 0
  m.kernel("executorch_prim::sub.Scalar", {i, i, i});
  m.kernel("aten::mul.Scalar_out", {x, zero_d, acc, acc});
  const auto loop = static_cast<int32_t>(m.num_instructions());
  m.kernel("aten::add.out", {acc, x, one, scratch, scratch});             // 2: scratch = acc + x
  m.kernel("aten::mul.Scalar_out", {scratch, m.double_value(1.0), acc, acc});  // 3: acc = scratch
  m.kernel("executorch_prim::add.Scalar", {i, one, i});                   // 4: i += 1
  m.kernel("executorch_prim::lt.Scalar", {i, n, cond});                   // 5: cond = i < n
  const size_t exit_jump = m.jump_false(cond, -1);                        // 6: leave when !cond
  m.jump_false(never, loop);                                              // 7: back edge
  m.set_jump_destination(exit_jump, static_cast<int32_t>(m.num_instructions()));
  m.move(acc, result);                                                    // 8: result now names acc
  m.set_inputs({x});
  m.set_outputs({result, i});
  const std::vector<uint8_t> bytes = w.serialize();

  // The loop keeps acc, scratch and x live throughout: they must not share bytes.
  std::vector<int64_t> offsets = {m.planned_offset(x), m.planned_offset(acc), m.planned_offset(scratch)};
  std::sort(offsets.begin(), offsets.end());
  EXPECT_GE(offsets[1] - offsets[0], 12);
  EXPECT_GE(offsets[2] - offsets[1], 12);

  Program p = load_bytes(bytes);
  EXPECT_EQ(p.method_meta("forward").num_instructions, 9u);
  auto method = p.load_method("forward");
  const std::vector<float> in = {1.0f, -2.0f, 0.25f};
  for (int run = 0; run < 2; ++run) {
    const auto out = exec(*method, {tensor_input(in, {3})});
    EXPECT_EQ(floats(out[0]), (std::vector<float>{4.0f, -8.0f, 1.0f})) << "run " << run;
    EXPECT_EQ(std::get<int64_t>(out[1]), 4);
  }
}

// FreeCall releases a tensor's storage for good: the first run is fine, a second one that needs the freed
// tensor again fails cleanly instead of touching freed memory.
TEST(WriterRoundTrip, FreeCall) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({3}));
  const int32_t y = m.planned_tensor(f32({3}));
  const int32_t z = m.planned_tensor(f32({3}));
  m.kernel("aten::mul.Scalar_out", {x, m.double_value(2.0), y, y});
  m.kernel("aten::add.out", {y, x, m.int_value(1), z, z});
  m.free(y);
  m.set_inputs({x});
  m.set_outputs({z});
  Program p = load_bytes(w.serialize());
  EXPECT_EQ(p.method_meta("forward").num_instructions, 3u);
  auto method = p.load_method("forward");
  const std::vector<float> in = {1, 2, 3};
  EXPECT_EQ(floats(exec(*method, {tensor_input(in, {3})})[0]), (std::vector<float>{3, 6, 9}));
  // The free ends y's lifetime within that run only; the next run has its planned storage again.
  EXPECT_EQ(floats(exec(*method, {tensor_input(in, {3})})[0]), (std::vector<float>{3, 6, 9}));
}

TEST(WriterRoundTrip, UseAfterFreeInTheSameRunFails) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({3}));
  const int32_t y = m.planned_tensor(f32({3}));
  const int32_t z = m.planned_tensor(f32({3}));
  m.kernel("aten::mul.Scalar_out", {x, m.double_value(2.0), y, y});
  m.free(y);
  m.kernel("aten::add.out", {y, x, m.int_value(1), z, z});
  m.set_inputs({x});
  m.set_outputs({z});
  Program p = load_bytes(w.serialize());
  auto method = p.load_method("forward");
  const std::vector<float> in = {1, 2, 3};
  for (int run = 0; run < 2; ++run) {
    try {
      exec(*method, {tensor_input(in, {3})});
      FAIL() << "a freed tensor was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::ExecutionError);
      EXPECT_EQ(e.context().instruction, 2);
      EXPECT_EQ(e.context().op, "aten::add.out");
    }
  }
}

TEST(WriterRoundTrip, SeveralMethods) {
  ProgramWriter w;
  {
    auto& m = w.add_method("forward");
    const int32_t x = m.planned_tensor(f32({2}));
    const int32_t y = m.planned_tensor(f32({2}));
    m.kernel("aten::mul.Scalar_out", {x, m.double_value(3.0), y, y});
    const int32_t z = m.planned_tensor(f32({2}));
    m.kernel("aten::add.out", {y, x, m.int_value(1), z, z});
    m.set_inputs({x});
    m.set_outputs({z});
  }
  {
    auto& m = w.add_method("negate");
    const int32_t x = m.planned_tensor(f32({2}));
    const int32_t y = m.planned_tensor(f32({2}));
    m.kernel("aten::mul.Scalar_out", {x, m.double_value(-1.0), y, y});
    m.set_inputs({x});
    m.set_outputs({y});
  }
  {
    auto& m = w.add_method("get_max_seq_len");
    m.set_outputs({m.int_value(128)});
    m.set_input_spec("");
  }
  Program p = load_bytes(w.serialize());
  EXPECT_EQ(p.method_names(), (std::vector<std::string>{"forward", "negate", "get_max_seq_len"}));
  const std::vector<float> x = {1.0f, -2.0f};
  EXPECT_EQ(floats(exec(*p.load_method("forward"), {tensor_input(x, {2})})[0]), (std::vector<float>{4.0f, -8.0f}));
  EXPECT_EQ(floats(exec(*p.load_method("negate"), {tensor_input(x, {2})})[0]), (std::vector<float>{-1.0f, 2.0f}));
  EXPECT_EQ(std::get<int64_t>(exec(*p.load_method("get_max_seq_len"), {})[0]), 128);
  EXPECT_EQ(p.input_spec("get_max_seq_len"), "");
  EXPECT_EQ(p.input_spec("forward").substr(0, 3), "[1,");
}

// Exporters emit one chain per method; the format allows several (run in order), and the writer can write them.
TEST(WriterLayout, SeveralChains) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({2}));
  const int32_t y = m.planned_tensor(f32({2}));
  m.kernel("aten::mul.Scalar_out", {x, m.double_value(3.0), y, y});
  m.new_chain();
  const int32_t z = m.planned_tensor(f32({2}));
  m.kernel("aten::add.out", {y, x, m.int_value(1), z, z});
  m.move(z, y);
  m.set_inputs({x});
  m.set_outputs({z});
  const std::vector<uint8_t> bytes = w.serialize();
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  ASSERT_TRUE(executorch_flatbuffer::VerifyProgramBuffer(verifier));
  const auto* plan = executorch_flatbuffer::GetProgram(bytes.data())->execution_plan()->Get(0);
  ASSERT_EQ(plan->chains()->size(), 2u);
  EXPECT_EQ(plan->chains()->Get(0)->instructions()->size(), 1u);
  EXPECT_EQ(plan->chains()->Get(1)->instructions()->size(), 2u);
  // Planning spans the chains: y is used in both, so z (second chain) cannot take y's bytes.
  EXPECT_NE(m.planned_offset(z), m.planned_offset(y));
  EXPECT_NE(m.planned_offset(z), m.planned_offset(x));
}

TEST(WriterRoundTrip, BoundedDynamicShapes) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({4, 3}, ShapeDynamism::DynamicBound));
  const int32_t y = m.planned_tensor(f32({4, 3}, ShapeDynamism::DynamicBound));
  m.kernel("aten::mul.Scalar_out", {x, m.double_value(2.0), y, y});
  m.set_inputs({x});
  m.set_outputs({y});
  Program p = load_bytes(w.serialize());
  const MethodMeta meta = p.method_meta("forward");
  EXPECT_EQ(meta.inputs[0].tensor.dynamism, ShapeDynamism::DynamicBound);
  EXPECT_EQ(meta.inputs[0].tensor.sizes, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(meta.planned_buffer_sizes, (std::vector<int64_t>{96}));  // two 48-byte tensors
  auto method = p.load_method("forward");
  const std::vector<float> small = {1, 2, 3, 4, 5, 6};
  auto out = exec(*method, {tensor_input(small, {2, 3})});
  EXPECT_EQ(sizes_of(out[0]), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(floats(out[0]), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  const std::vector<float> full(12, 1.0f);
  out = exec(*method, {tensor_input(full, {4, 3})});
  EXPECT_EQ(sizes_of(out[0]), (std::vector<int64_t>{4, 3}));
  const std::vector<float> big(15, 1.0f);
  try {
    exec(*method, {tensor_input(big, {5, 3})});
    FAIL() << "a shape above the bound was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_EQ(e.context().input_index, 0);
  }
}

TEST(WriterPlanner, ReusesBytesOfDeadTensorsAndKeepsLiveOnesApart) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({256}));
  std::vector<int32_t> chain = {x};
  for (int k = 0; k < 6; ++k) {
    const int32_t y = m.planned_tensor(f32({256}));
    m.kernel("aten::add.out", {chain.back(), x, m.int_value(1), y, y});  // x stays live to the end
    chain.push_back(y);
  }
  m.set_inputs({x});
  m.set_outputs({chain.back()});
  Program p = load_bytes(w.serialize());
  // x, the current value and the next one are live at once: 3 buffers of 1 KiB, not 7.
  EXPECT_EQ(m.arena_sizes(), (std::vector<int64_t>{3 * 1024}));
  for (size_t k = 1; k < chain.size(); ++k) {
    EXPECT_NE(m.planned_offset(chain[k]), m.planned_offset(chain[k - 1]));
    EXPECT_NE(m.planned_offset(chain[k]), m.planned_offset(x));
  }
  auto method = p.load_method("forward");
  std::vector<float> in(256);
  std::iota(in.begin(), in.end(), 0.0f);
  const auto out = floats(exec(*method, {tensor_input(in, {256})})[0]);
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], 7.0f * in[i]) << i;
}

TEST(WriterPlanner, AliasSharesItsBaseStorage) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({2, 3}));
  const int32_t y = m.planned_tensor(f32({2, 3}));
  m.kernel("aten::mul.Scalar_out", {x, m.double_value(10.0), y, y});
  const int32_t flat = m.planned_alias(y, f32({6}));
  const int32_t z = m.planned_tensor(f32({6}));
  m.kernel("aten::add.out", {flat, flat, m.int_value(1), z, z});
  m.set_inputs({x});
  m.set_outputs({z, flat});
  const std::vector<uint8_t> bytes = w.serialize();
  EXPECT_EQ(m.planned_offset(flat), m.planned_offset(y));
  EXPECT_NE(m.planned_offset(z), m.planned_offset(y));
  Program p = load_bytes(bytes);
  auto method = p.load_method("forward");
  const std::vector<float> in = {1, 2, 3, 4, 5, 6};
  const auto out = exec(*method, {tensor_input(in, {2, 3})});
  EXPECT_EQ(floats(out[0]), (std::vector<float>{20, 40, 60, 80, 100, 120}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{10, 20, 30, 40, 50, 60}));
  EXPECT_EQ(sizes_of(out[1]), (std::vector<int64_t>{6}));
}

TEST(WriterRoundTrip, UnplannedInputsAndMutableState) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.unplanned_tensor(f32({2}));  // backed by the caller's buffer
  const std::vector<float> initial = {100.0f, 200.0f};
  const int32_t state = m.mutable_tensor(f32({2}), format::as_bytes(initial));
  const int32_t out = m.planned_tensor(f32({2}));
  m.kernel("aten::add.out", {state, x, m.int_value(1), out, out});
  m.kernel("aten::mul.Scalar_out", {out, m.double_value(1.0), state, state});  // state = out
  m.set_inputs({x});
  m.set_outputs({out});
  const std::vector<uint8_t> bytes = w.serialize();
  Program p = load_bytes(bytes);
  EXPECT_EQ(p.info().num_mutable_segments, 1u);
  EXPECT_FALSE(p.method_meta("forward").inputs[0].tensor.memory_planned);
  auto method = p.load_method("forward");
  const std::vector<float> in = {1.0f, 2.0f};
  EXPECT_EQ(floats(exec(*method, {tensor_input(in, {2})})[0]), (std::vector<float>{101.0f, 202.0f}));
  EXPECT_EQ(floats(exec(*method, {tensor_input(in, {2})})[0]), (std::vector<float>{102.0f, 204.0f}));
  // A freshly loaded method starts again from the initial state.
  EXPECT_EQ(floats(exec(*p.load_method("forward"), {tensor_input(in, {2})})[0]),
            (std::vector<float>{101.0f, 202.0f}));
}

/// relu6(conv3x3(x) + bias) + add with a second input, through one XNNPACK delegate, NCHW outside.
std::vector<float> reference_conv(const std::vector<float>& x, const std::vector<float>& w_oihw,
                                  const std::vector<float>& bias, int cin, int cout, int h, int wd) {
  std::vector<float> out(static_cast<size_t>(cout * h * wd));
  for (int o = 0; o < cout; ++o)
    for (int y = 0; y < h; ++y)
      for (int xx = 0; xx < wd; ++xx) {
        double s = bias[o];
        for (int c = 0; c < cin; ++c)
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              const int iy = y + ky - 1, ix = xx + kx - 1;
              if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
              s += static_cast<double>(x[(c * h + iy) * wd + ix]) * w_oihw[((o * cin + c) * 3 + ky) * 3 + kx];
            }
        out[(o * h + y) * wd + xx] = static_cast<float>(std::min(std::max(s, 0.0), 6.0));
      }
  return out;
}

struct SmallXnnModel {
  std::vector<float> filter_oihw, bias;
  static constexpr int kCin = 2, kCout = 3, kH = 4, kW = 5;
};

void write_small_xnnpack(ProgramWriter& w, const SmallXnnModel& model, bool in_ptd, format::PayloadPlacement) {
  constexpr int cin = SmallXnnModel::kCin, cout = SmallXnnModel::kCout, h = SmallXnnModel::kH, wd = SmallXnnModel::kW;
  std::vector<float> ohwi(model.filter_oihw.size());
  for (int o = 0; o < cout; ++o)
    for (int c = 0; c < cin; ++c)
      for (int k = 0; k < 9; ++k) ohwi[(o * 9 + k) * cin + c] = model.filter_oihw[(o * cin + c) * 9 + k];
  XnnpackGraphWriter g;
  const uint32_t x = g.input({1, cin, h, wd}, 0);
  const uint32_t out = g.output({1, cout, h, wd}, 1);
  const uint32_t x_nhwc = g.internal({1, h, wd, cin});
  g.static_transpose({0, 2, 3, 1}, x, x_nhwc);
  const uint32_t f = g.constant({cout, 3, 3, cin}, ohwi);
  const uint32_t b = g.constant({cout}, model.bias);
  const uint32_t conv = g.internal({1, h, wd, cout});
  format::XnnConv2dParams p;
  p.kernel_h = p.kernel_w = 3;
  p.pad_top = p.pad_right = p.pad_bottom = p.pad_left = 1;
  p.group_input_channels = cin;
  p.group_output_channels = cout;
  g.conv2d(p, x_nhwc, f, b, conv);
  const uint32_t clamped = g.internal({1, h, wd, cout});
  g.clamp(conv, clamped, 0.0f, 6.0f);
  g.static_transpose({0, 3, 1, 2}, clamped, out);
  auto& m = w.add_method("forward");
  const int32_t in_v = m.planned_tensor(f32({1, cin, h, wd}));
  const int32_t out_v = m.planned_tensor(f32({1, cout, h, wd}));
  format::add_xnnpack_delegate(w, m, g.finish(), {in_v, out_v}, in_ptd);
  m.set_inputs({in_v});
  m.set_outputs({out_v});
}

SmallXnnModel small_model() {
  SmallXnnModel model;
  for (int i = 0; i < SmallXnnModel::kCout * SmallXnnModel::kCin * 9; ++i) {
    model.filter_oihw.push_back(static_cast<float>((i * 7) % 11) * 0.1f - 0.5f);
  }
  model.bias = {0.5f, -0.25f, 0.0f};
  return model;
}

bool have_xnnpack() {
  auto b = find_backend("XnnpackBackend");
  return b != nullptr && b->is_available();
}

TEST(WriterXnnpack, DelegateWithNamedDataRuns) {
  if (!have_xnnpack()) GTEST_SKIP() << "XNNPACK backend not available in this build";
  const SmallXnnModel model = small_model();
  ProgramWriter w;
  write_small_xnnpack(w, model, false, format::PayloadPlacement::Segment);
  const std::vector<uint8_t> bytes = w.serialize();
  Program p = load_bytes(bytes);
  EXPECT_EQ(p.info().num_named_data, 2u);  // filter and bias, keyed by SHA-256
  EXPECT_EQ(p.method_meta("forward").backends, (std::vector<std::string>{"XnnpackBackend"}));
  std::vector<float> x(SmallXnnModel::kCin * SmallXnnModel::kH * SmallXnnModel::kW);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 3.0f;
  const auto out = floats(exec(*p.load_method("forward"), {tensor_input(x, {1, 2, 4, 5})})[0]);
  const auto expected = reference_conv(x, model.filter_oihw, model.bias, 2, 3, 4, 5);
  ASSERT_EQ(out.size(), expected.size());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-4) << i;
}

TEST(WriterXnnpack, DelegateConstantsInPtdFile) {
  if (!have_xnnpack()) GTEST_SKIP() << "XNNPACK backend not available in this build";
  const SmallXnnModel model = small_model();
  ProgramWriter w;
  write_small_xnnpack(w, model, true, format::PayloadPlacement::Segment);
  const std::vector<uint8_t> bytes = w.serialize();
  const std::vector<uint8_t> ptd = w.external_data().serialize();
  {
    Program p = load_bytes(bytes);
    EXPECT_EQ(p.info().num_named_data, 0u);
    EXPECT_THROW(p.load_method("forward"), Error);  // the weights are in the .ptd
  }
  LoadOptions options;
  options.data_buffers.push_back(ptd);
  Program p = load_bytes(bytes, options);
  std::vector<float> x(40, 1.0f);
  const auto out = floats(exec(*p.load_method("forward"), {tensor_input(x, {1, 2, 4, 5})})[0]);
  const auto expected = reference_conv(x, model.filter_oihw, model.bias, 2, 3, 4, 5);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-4) << i;
}

// The demo's other XNNPACK nodes, and the same network in portable operators: NCHW [1, 4, 5, 5] -> depthwise 3x3
// stride 2 (+ReLU6) -> global average pool -> flatten -> fully connected [3, 4]; both must match a direct loop.
struct DepthwiseNet {
  static constexpr int kC = 4, kH = 5, kOut = 3, kOH = 3;
  std::vector<float> dw_oihw, dw_bias, fc_w, fc_b, x;
  DepthwiseNet() {
    for (int i = 0; i < kC * 9; ++i) dw_oihw.push_back(std::cos(static_cast<float>(i)) * 0.7f);
    dw_bias = {0.1f, -0.2f, 0.3f, 0.0f};
    for (int i = 0; i < kOut * kC; ++i) fc_w.push_back(static_cast<float>(i % 5) * 0.25f - 0.5f);
    fc_b = {1.0f, -1.0f, 0.5f};
    for (int i = 0; i < kC * kH * kH; ++i) x.push_back(std::sin(static_cast<float>(i) * 0.3f) * 4.0f);
  }
  std::vector<float> reference() const {
    std::vector<double> pooled(kC, 0.0);
    for (int c = 0; c < kC; ++c)
      for (int oy = 0; oy < kOH; ++oy)
        for (int ox = 0; ox < kOH; ++ox) {
          double s = dw_bias[c];
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              const int iy = oy * 2 + ky - 1, ix = ox * 2 + kx - 1;
              if (iy < 0 || iy >= kH || ix < 0 || ix >= kH) continue;
              s += static_cast<double>(x[(c * kH + iy) * kH + ix]) * dw_oihw[c * 9 + ky * 3 + kx];
            }
          pooled[c] += std::min(std::max(s, 0.0), 6.0) / (kOH * kOH);
        }
    std::vector<float> out(kOut);
    for (int o = 0; o < kOut; ++o) {
      double s = fc_b[o];
      for (int c = 0; c < kC; ++c) s += pooled[c] * fc_w[o * kC + c];
      out[o] = static_cast<float>(s);
    }
    return out;
  }
};

/// The DepthwiseNet as one XNNPACK delegate: transpose, depthwise 3x3 (+ relu6), global average pool, reshape,
/// fully connected.
std::vector<uint8_t> xnnpack_depthwise_program(const DepthwiseNet& net) {
  constexpr int C = DepthwiseNet::kC, H = DepthwiseNet::kH, OH = DepthwiseNet::kOH, O = DepthwiseNet::kOut;
  std::vector<float> dw_1hwc(C * 9);
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < 9; ++k) dw_1hwc[k * C + c] = net.dw_oihw[c * 9 + k];
  XnnpackGraphWriter g;
  const uint32_t in = g.input({1, C, H, H}, 0), out = g.output({1, O}, 1);
  const uint32_t nhwc = g.internal({1, H, H, C});
  g.static_transpose({0, 2, 3, 1}, in, nhwc);
  format::XnnConv2dParams p;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 2;
  p.pad_top = p.pad_right = p.pad_bottom = p.pad_left = 1;
  p.groups = C;
  p.group_input_channels = p.group_output_channels = 1;
  const uint32_t dw = g.internal({1, OH, OH, C});
  g.depthwise_conv2d(p, nhwc, g.constant({1, 3, 3, C}, dw_1hwc), g.constant({C}, net.dw_bias), dw, 0.0f, 6.0f);
  const uint32_t pooled = g.internal({1, 1, 1, C});
  g.global_avg_pool2d(dw, pooled);
  const uint32_t flat = g.internal({1, C});
  g.static_reshape({1, C}, pooled, flat);
  g.fully_connected(flat, g.constant({O, C}, net.fc_w), g.constant({O}, net.fc_b), out);
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({1, C, H, H})), y = m.planned_tensor(f32({1, O}));
  format::add_xnnpack_delegate(w, m, g.finish(), {x, y});
  m.set_inputs({x});
  m.set_outputs({y});
  return w.serialize();
}

TEST(WriterXnnpack, DepthwisePoolReshapeFullyConnected) {
  if (!have_xnnpack()) GTEST_SKIP() << "XNNPACK backend not available in this build";
  const DepthwiseNet net;
  constexpr int C = DepthwiseNet::kC, H = DepthwiseNet::kH;
  Program prog = load_bytes(xnnpack_depthwise_program(net));
  const auto got = floats(exec(*prog.load_method("forward"), {tensor_input(net.x, {1, C, H, H})})[0]);
  const auto expected = net.reference();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-4) << i;
}

// The delegate's own copies count in the method's load-time memory: at least the weights its kernels repacked
// (the fully-connected layer's and the depthwise filter; with XnnpackBackend's weight_cache_enabled off, else
// the weight cache counts them), then also its intermediate arena once a run sized it.
TEST(WriterXnnpack, LoadTimeBytesCountTheDelegate) {
  if (!have_xnnpack()) GTEST_SKIP() << "XNNPACK backend not available in this build";
  const DepthwiseNet net;
  constexpr int C = DepthwiseNet::kC, H = DepthwiseNet::kH, OH = DepthwiseNet::kOH, O = DepthwiseNet::kOut;
  LoadOptions own_packings;
  own_packings.backend_options["XnnpackBackend"]["weight_cache_enabled"] = false;
  Program prog = load_bytes(xnnpack_depthwise_program(net), own_packings);
  auto method = prog.load_method("forward");
  const size_t at_load = method->load_time_bytes();
  EXPECT_GE(at_load, (O * C + 9 * C) * sizeof(float));
  exec(*method, {tensor_input(net.x, {1, C, H, H})});
  EXPECT_GE(method->load_time_bytes(), at_load + static_cast<size_t>(OH * OH * C) * sizeof(float));
}

// With profiling on, the delegate reports each node it ran, after the DELEGATE_CALL event and inside its time.
TEST(WriterXnnpack, ProfileHasEveryNodeOfTheDelegateCall) {
  if (!have_xnnpack()) GTEST_SKIP() << "XNNPACK backend not available in this build";
  const DepthwiseNet net;
  constexpr int C = DepthwiseNet::kC, H = DepthwiseNet::kH;
  LoadOptions options;
  options.enable_profiling = true;
  Program prog = load_bytes(xnnpack_depthwise_program(net), options);
  auto method = prog.load_method("forward");
  exec(*method, {tensor_input(net.x, {1, C, H, H})});
  const std::vector<ProfileEvent>& events = method->profile_events();
  ASSERT_EQ(events.size(), 6u);
  const ProfileEvent& call = events[0];
  EXPECT_EQ(call.name, "DELEGATE_CALL XnnpackBackend");
  EXPECT_FALSE(call.delegate_part);
  const char* nodes[] = {"XNNStaticTranspose (", "XNNDepthwiseConv2d (", "XNNGlobalAvgPooling2d (",
                         "XNNStaticReshape (", "XNNFullyConnected ("};
  uint64_t previous_end = call.start_ns;
  for (size_t i = 0; i < 5; ++i) {
    const ProfileEvent& part = events[i + 1];
    EXPECT_TRUE(part.delegate_part) << i;
    EXPECT_EQ(part.name.rfind(nodes[i], 0), 0u) << part.name;
    EXPECT_EQ(part.instruction, call.instruction);
    EXPECT_GE(part.start_ns, previous_end);
    EXPECT_LE(part.start_ns, part.end_ns);
    EXPECT_LE(part.end_ns, call.end_ns);
    previous_end = part.end_ns;
  }
  // Without profiling nothing is recorded, and a report outside a delegate call goes nowhere.
  report_delegate_part("stray", -1, 0, 1);
  Program plain = load_bytes(xnnpack_depthwise_program(net));
  auto quiet = plain.load_method("forward");
  exec(*quiet, {tensor_input(net.x, {1, C, H, H})});
  EXPECT_TRUE(quiet->profile_events().empty());
  EXPECT_FALSE(delegate_profiling_active());
  EXPECT_EQ(method->profile_events().size(), 6u);
}

TEST(WriterRoundTrip, PortableDepthwisePoolFullyConnected) {
  const DepthwiseNet net;
  constexpr int C = DepthwiseNet::kC, H = DepthwiseNet::kH, OH = DepthwiseNet::kOH, O = DepthwiseNet::kOut;
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({1, C, H, H}));
  const int32_t wv = m.constant_tensor(f32({C, 1, 3, 3}), format::as_bytes(net.dw_oihw));
  const int32_t bv = m.constant_tensor(f32({C}), format::as_bytes(net.dw_bias));
  const int32_t conv = m.planned_tensor(f32({1, C, OH, OH}));
  m.kernel("aten::convolution.out", {x, wv, bv, m.int_list({2, 2}), m.int_list({1, 1}), m.int_list({1, 1}),
                                      m.bool_value(false), m.int_list({0, 0}), m.int_value(C), conv, conv});
  const int32_t act = m.planned_tensor(f32({1, C, OH, OH}));
  m.kernel("aten::hardtanh.out", {conv, m.double_value(0.0), m.double_value(6.0), act, act});
  const int32_t pooled = m.planned_tensor(f32({1, C, 1, 1}));
  m.kernel("aten::mean.out", {act, m.int_list({-1, -2}), m.bool_value(true), m.none(), pooled, pooled});
  const int32_t flat = m.planned_alias(pooled, f32({1, C}));
  std::vector<float> wt(C * O);
  for (int o = 0; o < O; ++o)
    for (int c = 0; c < C; ++c) wt[c * O + o] = net.fc_w[o * C + c];
  const int32_t fc_w = m.constant_tensor(f32({C, O}), format::as_bytes(wt));
  const int32_t fc_b = m.constant_tensor(f32({O}), format::as_bytes(net.fc_b));
  const int32_t y = m.planned_tensor(f32({1, O}));
  m.kernel("aten::addmm.out", {fc_b, flat, fc_w, m.int_value(1), m.int_value(1), y, y});
  m.set_inputs({x});
  m.set_outputs({y});
  Program prog = load_bytes(w.serialize());
  const auto got = floats(exec(*prog.load_method("forward"), {tensor_input(net.x, {1, C, H, H})})[0]);
  const auto expected = net.reference();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-4) << i;
}

TEST(WriterPtd, LayoutAndExternalTensors) {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const std::vector<float> weight = {1, 2, 3, 4, 5, 6};
  TensorSpec spec = f32({2, 3});
  spec.name = "linear.weight";
  const int32_t wv = m.external_tensor(spec, format::as_bytes(weight));
  const int32_t x = m.planned_tensor(f32({2, 3}));
  const int32_t y = m.planned_tensor(f32({2, 3}));
  m.kernel("aten::add.out", {x, wv, m.int_value(1), y, y});
  m.set_inputs({x});
  m.set_outputs({y});
  const std::vector<uint8_t> bytes = w.serialize();
  const std::vector<uint8_t> ptd = w.external_data().serialize();

  // FT01 flatbuffer with the FH01 header (40 bytes, padded to 48) spliced in, segments 128-aligned.
  ASSERT_GE(ptd.size(), 56u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ptd.data()) + 4, 4), "FT01");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ptd.data()) + 8, 4), "FH01");
  EXPECT_EQ(u32_at(ptd, 12), 40u);
  EXPECT_EQ(u64_at(ptd, 16), 48u);
  const uint64_t fb_size = u64_at(ptd, 24), base = u64_at(ptd, 32), data_size = u64_at(ptd, 40);
  EXPECT_EQ(base % 128, 0u);
  EXPECT_GE(base, 48 + fb_size);
  EXPECT_EQ(base + data_size, ptd.size());
  EXPECT_EQ(data_size, 24u);
  auto owned = std::make_shared<std::vector<uint8_t>>(ptd);
  auto file = format::PtdFile::parse(format::ByteSource::from_buffer(*owned, owned, "test.ptd"));
  ASSERT_EQ(file->num_keys(), 1u);
  EXPECT_EQ(file->key(0), "linear.weight");
  ASSERT_TRUE(file->layout("linear.weight").has_value());
  EXPECT_EQ(file->layout("linear.weight")->sizes, (std::vector<int64_t>{2, 3}));

  LoadOptions options;
  options.data_buffers.push_back(ptd);
  Program p = load_bytes(bytes, options);
  const std::vector<float> in = {10, 20, 30, 40, 50, 60};
  EXPECT_EQ(floats(exec(*p.load_method("forward"), {tensor_input(in, {2, 3})})[0]),
            (std::vector<float>{11, 22, 33, 44, 55, 66}));
}

TEST(WriterRoundTrip, InlineDelegatePayload) {
  if (!have_xnnpack()) GTEST_SKIP() << "XNNPACK backend not available in this build";
  XnnpackGraphWriter g;
  const uint32_t a = g.input({4}, 0), b = g.input({4}, 1), out = g.output({4}, 2);
  g.add(a, b, out);
  auto payload = g.finish();
  ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({4})), y = m.planned_tensor(f32({4})), z = m.planned_tensor(f32({4}));
  m.delegate("XnnpackBackend", payload.bytes, {x, y, z}, {{"unused_key", {1, 2, 3}}}, format::PayloadPlacement::Inline);
  m.set_inputs({x, y});
  m.set_outputs({z});
  const std::vector<uint8_t> bytes = w.serialize();
  Program p = load_bytes(bytes);
  EXPECT_FALSE(p.info().has_extended_header);  // the payload lives inside the flatbuffer
  const std::vector<float> in1 = {1, 2, 3, 4}, in2 = {0.5f, 0.5f, -1, 10};
  EXPECT_EQ(floats(exec(*p.load_method("forward"), {tensor_input(in1, {4}), tensor_input(in2, {4})})[0]),
            (std::vector<float>{1.5f, 2.5f, 2.0f, 14.0f}));
}

}  // namespace
}  // namespace etnp::writer_testing
