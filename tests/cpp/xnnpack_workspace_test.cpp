// The memory a method offers its delegates (etnp::MethodWorkspace): with XnnpackBackend's workspace_sharing_mode
// 1 (the default) the delegates of one method keep their intermediate values in one shared scratch, sized for
// the largest, instead of an arena each; inputs in the method's own buffers are read in place wherever they end.
// Proved by memory (Method::load_time_bytes, DelegateHandle::bytes) and by results against a reference and
// against mode 0, never by the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "etnp/backend.h"
#include "etnp/etnp.h"
#include "kernel_test_util.h"
#include "runtime/method_impl.h"
#include "tools/writer/xnnpack_writer.h"
#include "writer_test_util.h"
#include "xnnpack_graph_builder.h"

namespace etnp {
namespace {

using etnp::testing::OwnedTensor;
using format::ProgramWriter;
using format::XnnpackGraphWriter;
using writer_testing::exec;
using writer_testing::f32;
using writer_testing::floats;
using writer_testing::load_bytes;
using writer_testing::tensor_input;

std::shared_ptr<Backend> xnnpack() { return find_backend("XnnpackBackend"); }

float weight(size_t i, int seed) { return static_cast<float>((i * 7 + static_cast<size_t>(seed) * 13) % 23) * 0.0625f - 0.6f; }

std::vector<float> weights(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = weight(i, seed);
  return v;
}

// x [kRows, kWidth] through kDelegates delegates in a row, each fully connected kWidth -> mid (an intermediate
// value of the delegate) -> kWidth; the mids differ, so the delegates' arenas do.
constexpr int32_t kRows = 4, kWidth = 64;
constexpr int32_t kMids[] = {48, 256, 96};
constexpr size_t kDelegates = std::size(kMids);

std::vector<uint8_t> chain_program() {
  ProgramWriter w;
  auto& m = w.add_method("forward");
  std::vector<int32_t> values = {m.planned_tensor(f32({kRows, kWidth}))};
  for (size_t d = 0; d < kDelegates; ++d) {
    const auto mid = static_cast<uint32_t>(kMids[d]);
    XnnpackGraphWriter g;
    const uint32_t in = g.input({kRows, kWidth}, 0), out = g.output({kRows, kWidth}, 1);
    const uint32_t hidden = g.internal({kRows, mid});
    g.fully_connected(in, g.constant({mid, kWidth}, weights(mid * kWidth, 2 * static_cast<int>(d))), XnnpackGraphWriter::kInvalidId, hidden);
    g.fully_connected(hidden, g.constant({kWidth, mid}, weights(kWidth * mid, 2 * static_cast<int>(d) + 1)),
                      XnnpackGraphWriter::kInvalidId, out);
    values.push_back(m.planned_tensor(f32({kRows, kWidth})));
    format::add_xnnpack_delegate(w, m, g.finish(), {values[d], values[d + 1]});
  }
  m.set_inputs({values.front()});
  m.set_outputs({values.back()});
  return w.serialize();
}

// The chain in double precision.
std::vector<double> chain_reference(const std::vector<float>& x) {
  std::vector<double> cur(x.begin(), x.end());
  for (size_t d = 0; d < kDelegates; ++d) {
    const size_t mid = static_cast<size_t>(kMids[d]);
    std::vector<double> hidden(kRows * mid, 0.0), next(kRows * kWidth, 0.0);
    for (size_t r = 0; r < kRows; ++r) {
      for (size_t o = 0; o < mid; ++o) {
        for (size_t i = 0; i < kWidth; ++i) hidden[r * mid + o] += cur[r * kWidth + i] * weight(o * kWidth + i, 2 * static_cast<int>(d));
      }
      for (size_t o = 0; o < kWidth; ++o) {
        for (size_t i = 0; i < mid; ++i) next[r * kWidth + o] += hidden[r * mid + i] * weight(o * mid + i, 2 * static_cast<int>(d) + 1);
      }
    }
    cur = std::move(next);
  }
  return cur;
}

LoadOptions with_mode(int64_t mode) {
  LoadOptions options;
  options.backend_options["XnnpackBackend"]["workspace_sharing_mode"] = mode;
  return options;
}

TEST(XnnpackWorkspace, DelegatesOfAMethodShareOneArena) {
  const std::vector<uint8_t> bytes = chain_program();
  std::vector<float> x(kRows * kWidth);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 2.0f;
  const std::vector<double> expected = chain_reference(x);

  // What the first run adds to the method's memory: the arenas, sized by the run (nothing is staged: the
  // delegates' inputs and outputs are the method's planned tensors).
  auto first_run = [&](const LoadOptions& options, std::vector<float>& out) {
    Program p = load_bytes(bytes, options);
    auto method = p.load_method("forward");
    const size_t at_load = method->load_time_bytes();
    out = floats(exec(*method, {tensor_input(x, {kRows, kWidth})})[0]);
    const size_t after = method->load_time_bytes();
    EXPECT_EQ(floats(exec(*method, {tensor_input(x, {kRows, kWidth})})[0]), out) << "a second run differs";
    EXPECT_EQ(method->load_time_bytes(), after) << "a second run of the same shapes allocated more";
    return after - at_load;
  };
  std::vector<float> shared_out, own_out, default_out;
  const size_t shared = first_run(with_mode(1), shared_out);
  const size_t own = first_run(with_mode(0), own_out);
  const size_t by_default = first_run({}, default_out);

  size_t largest = 0, sum = 0;
  for (int32_t mid : kMids) {
    const size_t arena = static_cast<size_t>(kRows * mid) * sizeof(float);  // one intermediate value each
    largest = std::max(largest, arena);
    sum += arena;
  }
  EXPECT_EQ(shared, largest);
  EXPECT_EQ(own, sum);
  EXPECT_EQ(by_default, shared);  // 1 is the default

  ASSERT_EQ(shared_out.size(), expected.size());
  EXPECT_EQ(shared_out, own_out);  // the same kernels on the same values: bit-equal
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(shared_out[i], expected[i], 1e-4 * std::max(1.0, std::abs(expected[i]))) << i;
  }
}

// A workspace for one delegate alone: every request for the scratch returns a new buffer full of NaNs (the
// others stay allocated, so no address comes back), as if other delegates had grown and overwritten it between
// this one's calls. holds() answers for one buffer of the test's.
class MovingWorkspace final : public MethodWorkspace {
 public:
  uint8_t* shared_scratch(size_t bytes) override {
    requests.push_back(bytes);
    auto& b = buffers.emplace_back(bytes + kReadPastBytes + 64, uint8_t{0xFF});
    return b.data() + (64 - reinterpret_cast<uintptr_t>(b.data()) % 64) % 64;
  }
  bool holds(const void* data, size_t bytes) const override {
    const auto p = reinterpret_cast<uintptr_t>(data);
    return p >= held_begin && p <= held_end && bytes + kReadPastBytes <= held_end - p;
  }
  size_t shared_scratch_bytes() const override { return requests.empty() ? 0 : requests.back(); }

  std::vector<size_t> requests;
  std::deque<std::vector<uint8_t>> buffers;
  uintptr_t held_begin = 0, held_end = 0;
};

struct TwoLayerGraph {
  static constexpr uint32_t kIn = 256, kMid = 96, kOut = 32, kRows = 4;
  std::vector<uint8_t> payload() const {
    xnn::testing::GraphBuilder g;
    const uint32_t x = g.input({kRows, kIn}, 0), out = g.output({kRows, kOut}, 1);
    const uint32_t mid = g.internal({kRows, kMid});
    g.fully_connected(x, g.f32_constant({kMid, kIn}, weights(kMid * kIn, 1)), xnn::testing::kNoExt, mid);
    g.fully_connected(mid, g.f32_constant({kOut, kMid}, weights(kOut * kMid, 2)), xnn::testing::kNoExt, out);
    return g.payload();
  }
};

std::unique_ptr<DelegateHandle> init(const std::vector<uint8_t>& payload, MethodWorkspace* workspace, int64_t mode) {
  BackendOptions options = {{"workspace_sharing_mode", mode}};
  BackendInitContext ctx;
  ctx.load_options = &options;
  ctx.workspace = workspace;
  return xnnpack()->init(ctx, payload, {});
}

// Runs the delegate on `x`, which the caller placed (its data pointer is used as given).
std::vector<float> run(DelegateHandle& handle, float* x) {
  const int64_t sizes[] = {TwoLayerGraph::kRows, TwoLayerGraph::kIn};
  Tensor in(ScalarType::Float, sizes, {}, x, ShapeDynamism::Static);
  auto out = OwnedTensor::make<float>(ScalarType::Float, {TwoLayerGraph::kRows, TwoLayerGraph::kOut}, {});
  std::vector<EValue> args = {EValue::from_tensor(&in), EValue::from_tensor(&out->tensor)};
  std::vector<EValue*> ptrs = {&args[0], &args[1]};
  xnnpack()->execute(handle, ptrs);
  return out->values<float>();
}

// Page-aligned memory of three pages, with the input placed to end exactly at the second page's end: XNNPACK's
// over-read of it stays in the third page, so reading in place and reading a copy are both safe here.
struct PageEndInput {
  static constexpr size_t kPage = 4096, kBytes = TwoLayerGraph::kRows * TwoLayerGraph::kIn * sizeof(float);
  std::unique_ptr<uint8_t, decltype(&std::free)> pages{static_cast<uint8_t*>(std::aligned_alloc(kPage, 3 * kPage)), &std::free};
  float* x = reinterpret_cast<float*>(pages.get() + 2 * kPage - kBytes);
  PageEndInput() {
    for (size_t i = 0; i < kBytes / sizeof(float); ++i) x[i] = std::cos(static_cast<float>(i)) * 1.5f;
  }
};

// Both engines: the delegate's own GEMM, and XNNPACK's fully-connected operators (set up with the arena's
// pointers on every call).
class XnnpackWorkspaceEngines : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { setenv("ETNP_XNNPACK_ENGINE", GetParam(), 1); }
  void TearDown() override { unsetenv("ETNP_XNNPACK_ENGINE"); }
};

TEST_P(XnnpackWorkspaceEngines, ArenaFollowsTheSharedScratchWhereverItMoves) {
  const TwoLayerGraph graph;
  const PageEndInput input;
  auto own = init(graph.payload(), nullptr, 0);
  const std::vector<float> expected = run(*own, input.x);

  MovingWorkspace workspace;
  auto shared = init(graph.payload(), &workspace, 1);
  for (int call = 0; call < 3; ++call) {
    EXPECT_EQ(run(*shared, input.x), expected) << "call " << call;
    // The intermediate values went where this call's request pointed, not into an earlier buffer.
    const std::vector<uint8_t>& latest = workspace.buffers.back();
    EXPECT_LT(std::count(latest.begin(), latest.end(), uint8_t{0xFF}), static_cast<std::ptrdiff_t>(latest.size() / 2))
        << "call " << call;
  }
  // One request per call, for the one intermediate value, and no arena of the delegate's own.
  EXPECT_EQ(workspace.requests, std::vector<size_t>(3, TwoLayerGraph::kRows * TwoLayerGraph::kMid * sizeof(float)));
  auto same_without_sharing = init(graph.payload(), &workspace, 0);
  EXPECT_EQ(run(*same_without_sharing, input.x), expected);
  EXPECT_EQ(workspace.requests.size(), 3u) << "mode 0 asked for the shared scratch";
  EXPECT_EQ(same_without_sharing->bytes() - shared->bytes(), TwoLayerGraph::kRows * TwoLayerGraph::kMid * sizeof(float));
}

INSTANTIATE_TEST_SUITE_P(Engines, XnnpackWorkspaceEngines, ::testing::Values("own", "xnnpack"));

TEST(XnnpackWorkspace, InputsTheMethodHoldsAreReadInPlace) {
  const TwoLayerGraph graph;
  const PageEndInput input;
  MovingWorkspace workspace;
  auto handle = init(graph.payload(), &workspace, 1);
  const size_t built = handle->bytes();
  const std::vector<float> copied = run(*handle, input.x);  // not the workspace's: read from a padded copy
  EXPECT_EQ(handle->bytes() - built, PageEndInput::kBytes);

  MovingWorkspace holding;
  holding.held_begin = reinterpret_cast<uintptr_t>(input.pages.get());
  holding.held_end = holding.held_begin + 3 * PageEndInput::kPage;
  auto in_place = init(graph.payload(), &holding, 1);
  const size_t before = in_place->bytes();
  EXPECT_EQ(run(*in_place, input.x), copied);
  EXPECT_EQ(in_place->bytes(), before) << "an input the method holds was copied";
}

TEST(XnnpackWorkspace, MethodBuffersHoldWhatLiesInThemWithRoomToReadPast) {
  std::vector<compute::ZeroedBuffer> arenas, owned;
  arenas.emplace_back(1000 + MethodWorkspace::kReadPastBytes);
  owned.emplace_back(200 + MethodWorkspace::kReadPastBytes);
  runtime::DelegateWorkspace workspace(arenas, owned);
  const uint8_t* a = arenas[0].data();
  EXPECT_TRUE(workspace.holds(a, 1000));
  EXPECT_TRUE(workspace.holds(a + 600, 400));
  EXPECT_TRUE(workspace.holds(a + 1000, 0));
  EXPECT_FALSE(workspace.holds(a + 1, 1000));  // its read-past would leave the buffer
  EXPECT_FALSE(workspace.holds(a, 1001));
  EXPECT_FALSE(workspace.holds(a - 1, 10));
  EXPECT_FALSE(workspace.holds(a + 1000, SIZE_MAX));  // no wrap-around
  EXPECT_TRUE(workspace.holds(owned[0].data() + 8, 192));
  EXPECT_FALSE(workspace.holds(owned[0].data() + 8, 193));
  float elsewhere[4] = {};
  EXPECT_FALSE(workspace.holds(elsewhere, sizeof(elsewhere)));

  // The scratch: grown on a larger request only, zero-filled when new, held like the rest.
  EXPECT_EQ(workspace.shared_scratch_bytes(), 0u);
  uint8_t* s = workspace.shared_scratch(300);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s) % 64, 0u);
  EXPECT_EQ(workspace.shared_scratch_bytes(), 300u);
  std::memset(s, 7, 300);
  EXPECT_EQ(workspace.shared_scratch(100), s);
  EXPECT_EQ(workspace.shared_scratch(300), s);
  EXPECT_EQ(workspace.shared_scratch_bytes(), 300u);
  uint8_t* grown = workspace.shared_scratch(70000);
  EXPECT_EQ(workspace.shared_scratch_bytes(), 70000u);
  EXPECT_TRUE(std::all_of(grown, grown + 70000 + MethodWorkspace::kReadPastBytes, [](uint8_t b) { return b == 0; }));
  EXPECT_TRUE(workspace.holds(grown, 70000));
  EXPECT_FALSE(workspace.holds(grown, 70001));
}

}  // namespace
}  // namespace etnp
