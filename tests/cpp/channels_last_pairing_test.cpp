// Channels-last pairing at load (Method::Impl::pair_channels_last): tensors that exchanging kernels (convolutions
// on packed weights) write and read keep NHWC bytes between them, across max pooling, concatenation along
// channels and element-wise operators of one shape, as whole groups or not at all. The decisions are observed
// through a test kernel whose state records what the load paired; the numbers, through real convolutions against
// the same program with the weights given as inputs (the NCHW paths), at each CPU level.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cpu_levels.h"
#include "etnp/kernel.h"
#include "kernel_test_util.h"
#include "tools/writer/writer.h"
#include "writer_test_util.h"

namespace etnp::writer_testing {
namespace {

// ---- decisions ------------------------------------------------------------------------------------------

/// What the load told each labelled test kernel: {argument 0 NHWC, result NHWC}.
std::map<int64_t, std::pair<bool, bool>>& paired() {
  static std::map<int64_t, std::pair<bool, bool>> labels;
  return labels;
}

/// etnp_test::exchange.out(Tensor self, int label, *, Tensor(a!) out): out = self; its state exchanges
/// channels-last like a convolution's and records the pairing under `label`.
struct Exchange final : KernelState {
  int64_t label = 0;
  bool exchanges_channels_last() const override { return true; }
  void use_channels_last(bool input, bool output) override { paired()[label] = {input, output}; }
};

void exchange_kernel(KernelContext&, KernelArgs args) {
  const Tensor& in = args[0]->to_tensor();
  Tensor& out = args[2]->to_tensor();
  std::copy(in.data_as<const float>(), in.data_as<const float>() + in.numel(), out.data_as<float>());
}

std::unique_ptr<KernelState> prepare_exchange(KernelArgs args) {
  auto state = std::make_unique<Exchange>();
  state->label = args[1]->to_int();
  paired()[state->label] = {false, false};
  return state;
}

void register_exchange() {
  static std::once_flag once;
  std::call_once(once, [] { register_kernel({"etnp_test::exchange.out", exchange_kernel, 4, prepare_exchange}); });
}

/// Loads `bytes` and returns what each labelled exchange was told.
std::map<int64_t, std::pair<bool, bool>> decisions(const std::vector<uint8_t>& bytes) {
  register_exchange();
  paired().clear();
  Program program = load_bytes(bytes);
  auto method = program.load_method("forward");
  return paired();
}

struct Builder {
  format::ProgramWriter writer;
  format::MethodWriter& m = writer.add_method("forward");
  int32_t exchange(int32_t in, int64_t label, std::vector<int32_t> sizes) {
    const int32_t out = m.planned_tensor(f32(std::move(sizes)));
    m.kernel("etnp_test::exchange.out", {in, m.int_value(label), out, out});
    return out;
  }
  /// mean(in, dims, keepdim=True) of a [1, 4, 6, 6] input.
  int32_t mean(int32_t in, std::initializer_list<int64_t> dims, std::vector<int32_t> sizes) {
    const int32_t out = m.planned_tensor(f32(std::move(sizes)));
    m.kernel("aten::mean.out", {in, m.int_list(dims), m.bool_value(true), m.none(), out, out});
    return out;
  }
  int32_t unary(const char* op, int32_t in, std::vector<int32_t> sizes) {
    const int32_t out = m.planned_tensor(f32(std::move(sizes)));
    m.kernel(op, {in, out, out});
    return out;
  }
  int32_t binary(const char* op, int32_t a, int32_t b, std::vector<int32_t> sizes) {
    const int32_t out = m.planned_tensor(f32(std::move(sizes)));
    m.kernel(op, {a, b, out, out});
    return out;
  }
  /// An inference batch norm of a [1, C, H, W] input on constants (1 to C and their squares).
  int32_t batch_norm(int32_t in, std::vector<int32_t> sizes) {
    const int32_t c = sizes[1];
    std::vector<float> k(static_cast<size_t>(c)), k2(k.size());
    for (int32_t i = 0; i < c; ++i) k[static_cast<size_t>(i)] = float(i + 1), k2[static_cast<size_t>(i)] = float((i + 1) * (i + 1));
    auto constant = [&](const std::vector<float>& v) { return m.constant_tensor(f32({c}), format::as_bytes(v)); };
    const int32_t out = m.planned_tensor(f32(std::move(sizes)));
    const int32_t save_mean = m.planned_tensor(f32({0}));
    const int32_t save_invstd = m.planned_tensor(f32({0}));
    m.kernel("aten::_native_batch_norm_legit_no_training.out",
             {in, constant(k), constant(k), constant(k2), constant(k2), m.double_value(0.1), m.double_value(1e-5), out,
              save_mean, save_invstd, m.tensor_list({out, save_mean, save_invstd})});
    return out;
  }
  /// max_pool2d_with_indices(in, 3, 2, 1) of a [1, C, 6, 6] input: {values, indices}.
  std::pair<int32_t, int32_t> max_pool(int32_t in, int32_t channels) {
    const int32_t values = m.planned_tensor(f32({1, channels, 3, 3}));
    const int32_t indices = m.planned_tensor({ScalarType::Long, {1, channels, 3, 3}, {}, ShapeDynamism::Static, {}});
    m.kernel("aten::max_pool2d_with_indices.out",
             {in, m.int_list({3, 3}), m.int_list({2, 2}), m.int_list({1, 1}), m.int_list({1, 1}), m.bool_value(false),
              values, indices, m.tensor_list({values, indices})});
    return {values, indices};
  }
};

const std::pair<bool, bool> kNone{false, false}, kOut{false, true}, kIn{true, false};

/// Finishes b's method (input x, `outputs`), loads it and expects exchange 1 to write its result and exchange 2 to
/// read its argument channels-last when `paired`, and neither otherwise.
void expect_paired(Builder& b, int32_t x, const std::vector<int32_t>& outputs, bool paired, int variant) {
  b.m.set_inputs({x});
  b.m.set_outputs(outputs);
  const auto got = decisions(b.writer.serialize());
  EXPECT_EQ(got.at(1), paired ? kOut : kNone) << variant;
  EXPECT_EQ(got.at(2), paired ? kIn : kNone) << variant;
}

TEST(ChannelsLastPairing, AcrossAMaxPoolingWhoseIndicesNothingReads) {
  for (bool indices_out : {false, true}) {
    Builder b;
    const int32_t x = b.m.planned_tensor(f32({1, 4, 6, 6}));
    const int32_t a = b.exchange(x, 1, {1, 4, 6, 6});
    const auto [p, indices] = b.max_pool(a, 4);
    const int32_t y = b.exchange(p, 2, {1, 4, 3, 3});
    // Read indices would have to be NCHW: the pooling, and with it the group, keeps the tensors' order.
    expect_paired(b, x, indices_out ? std::vector<int32_t>{y, indices} : std::vector<int32_t>{y}, !indices_out,
                  indices_out);
  }
}

TEST(ChannelsLastPairing, AcrossAConcatenationAllOrNone) {
  // 0: cat([a, b]) read by an exchange; 1: the cat's result also a method output; 2: b written by a negation of
  // the method input (an element-wise operator, but of a tensor that must stay NCHW): the whole group stays.
  for (int variant = 0; variant < 3; ++variant) {
    Builder b;
    const int32_t x = b.m.planned_tensor(f32({1, 4, 6, 6}));
    const int32_t a = b.exchange(x, 1, {1, 4, 6, 6});
    int32_t second = 0;
    if (variant == 2) {
      second = b.m.planned_tensor(f32({1, 4, 6, 6}));
      b.m.kernel("aten::neg.out", {x, second, second});
    } else {
      second = b.exchange(x, 2, {1, 4, 6, 6});
    }
    const int32_t c = b.m.planned_tensor(f32({1, 8, 6, 6}));
    b.m.kernel("aten::cat.out", {b.m.tensor_list({a, second}), b.m.int_value(1), c, c});
    const int32_t y = b.exchange(c, 3, {1, 8, 6, 6});
    b.m.set_inputs({x});
    b.m.set_outputs(variant == 1 ? std::vector<int32_t>{y, c} : std::vector<int32_t>{y});
    const auto got = decisions(b.writer.serialize());
    EXPECT_EQ(got.at(1), variant == 0 ? kOut : kNone) << variant;
    if (variant != 2) {
      EXPECT_EQ(got.at(2), variant == 0 ? kOut : kNone) << variant;
    }
    EXPECT_EQ(got.at(3), variant == 0 ? kIn : kNone) << variant;
  }
}

TEST(ChannelsLastPairing, AcrossElementwiseOperatorsOfOneShapeOnly) {
  // relu then r + r between two exchanges; with `broadcast`, r + k for a constant k [1, 4, 1, 1] (whose result
  // depends on where a channel's bytes lie): nothing pairs.
  for (bool broadcast : {false, true}) {
    Builder b;
    const int32_t x = b.m.planned_tensor(f32({1, 4, 6, 6}));
    const int32_t a = b.exchange(x, 1, {1, 4, 6, 6});
    const int32_t r = b.m.planned_tensor(f32({1, 4, 6, 6}));
    b.m.kernel("aten::relu.out", {a, r, r});
    const int32_t k = b.m.constant_tensor(f32({1, 4, 1, 1}), format::as_bytes(std::vector<float>{1, 2, 3, 4}));
    const int32_t s = b.m.planned_tensor(f32({1, 4, 6, 6}));
    b.m.kernel("aten::add.out", {r, broadcast ? k : r, b.m.int_value(1), s, s});
    const int32_t y = b.exchange(s, 2, {1, 4, 6, 6});
    expect_paired(b, x, {y}, !broadcast, broadcast);
  }
}

TEST(ChannelsLastPairing, NotWhereAViewSeesTheBytesUnlessAnotherTensorRewroteThemWhole) {
  // After a's last reader, a view planned on a's bytes is read by a negation (0: no view): it would read a's NHWC
  // bytes, so nothing pairs (1), unless a tensor on those bytes is written whole (by a negation of y) between a's last
  // reader and the view (2: the view reads that; a detection head's reshaped outputs, which a cat reads).
  for (int variant = 0; variant < 3; ++variant) {
    Builder b;
    const int32_t x = b.m.planned_tensor(f32({1, 4, 6, 6}));
    const int32_t a = b.exchange(x, 1, {1, 4, 6, 6});
    const int32_t y = b.exchange(a, 2, {1, 4, 6, 6});
    std::vector<int32_t> outputs = {y};
    if (variant == 2) {
      const int32_t u = b.m.planned_alias(a, f32({1, 4, 6, 6}));
      b.m.kernel("aten::neg.out", {y, u, u});
    }
    if (variant > 0) {
      const int32_t flat = b.m.planned_alias(a, f32({1, 144}));
      outputs.push_back(b.unary("aten::neg.out", flat, {1, 144}));
    }
    expect_paired(b, x, outputs, variant != 1, variant);
  }
}

TEST(ChannelsLastPairing, AcrossASqueezeAndExcitationGate) {
  // a -> mean over the pixels -> sigmoid -> a * gate (either order) -> exchange: a pairs, the one-pixel gate (the
  // same bytes in either order) stays as it is. Variant 2: a mean over one dim (a result of several values per
  // channel, which depend on the order): nothing pairs.
  for (int variant = 0; variant < 3; ++variant) {
    Builder b;
    const int32_t x = b.m.planned_tensor(f32({1, 4, 6, 6}));
    const int32_t a = b.exchange(x, 1, {1, 4, 6, 6});
    int32_t gate = 0;
    if (variant == 2) {
      gate = b.unary("aten::sigmoid.out", b.mean(a, {-1}, {1, 4, 6, 1}), {1, 4, 6, 1});
    } else {
      gate = b.unary("aten::sigmoid.out", b.mean(a, {-1, -2}, {1, 4, 1, 1}), {1, 4, 1, 1});
    }
    const int32_t scaled = variant == 1 ? b.binary("aten::mul.out", gate, a, {1, 4, 6, 6})
                                        : b.binary("aten::mul.out", a, gate, {1, 4, 6, 6});
    const int32_t y = b.exchange(scaled, 2, {1, 4, 6, 6});
    // The gate a method output too: its bytes are the same in either order.
    expect_paired(b, x, {y, gate}, variant != 2, variant);
  }
}

TEST(ChannelsLastPairing, AcrossABatchNormUnlessItsOutputIsSeen) {
  for (bool seen : {false, true}) {
    Builder b;
    const int32_t x = b.m.planned_tensor(f32({1, 4, 6, 6}));
    const int32_t a = b.exchange(x, 1, {1, 4, 6, 6});
    const int32_t n = b.batch_norm(a, {1, 4, 6, 6});
    const int32_t y = b.exchange(n, 2, {1, 4, 6, 6});
    expect_paired(b, x, seen ? std::vector<int32_t>{y, n} : std::vector<int32_t>{y}, !seen, seen);
  }
}

// ---- numbers --------------------------------------------------------------------------------------------

struct ConvSpec {
  int32_t cin, cout, k;
};

/// A network on x [1, 6, 9, 9] whose parameters are constants (packed: the NHWC engines, paired where they write
/// 16 channels or more) or method inputs after x (the NCHW paths, nothing paired), in the order they are made.
struct NetWriter {
  format::ProgramWriter writer;
  format::MethodWriter& m = writer.add_method("forward");
  bool as_inputs;
  std::vector<int32_t> inputs;
  std::vector<Value> input_values;  // what the general program's inputs after x take

  explicit NetWriter(bool weights_as_inputs) : as_inputs(weights_as_inputs) {
    inputs.push_back(m.planned_tensor(f32({1, 6, 9, 9})));
  }
  int32_t x() const { return inputs[0]; }
  int32_t param(std::vector<int32_t> sizes, const std::vector<float>& data) {
    if (!as_inputs) return m.constant_tensor(f32(sizes), format::as_bytes(data));
    inputs.push_back(m.planned_tensor(f32(sizes)));
    input_values.push_back(tensor_input(data, std::vector<int64_t>(sizes.begin(), sizes.end())));
    return inputs.back();
  }
  /// convolution(in, weights[0], weights[1]), stride 1, "same" padding, on hw x hw maps.
  int32_t conv(int32_t in, const ConvSpec& c, const std::vector<float>* weights, int32_t hw) {
    const int32_t w = param({c.cout, c.cin, c.k, c.k}, weights[0]);
    const int32_t bias = param({c.cout}, weights[1]);
    const int32_t out = m.planned_tensor(f32({1, c.cout, hw, hw}));
    m.kernel("aten::convolution.out", {in, w, bias, m.int_list({1, 1}), m.int_list({c.k / 2, c.k / 2}),
                                       m.int_list({1, 1}), m.bool_value(false), m.int_list({0, 0}), m.int_value(1),
                                       out, out});
    return out;
  }
  int32_t unary(const char* op, int32_t in, std::vector<int32_t> sizes) {
    const int32_t out = m.planned_tensor(f32(std::move(sizes)));
    m.kernel(op, {in, out, out});
    return out;
  }
  std::vector<uint8_t> finish(int32_t y) {
    m.set_inputs(inputs);
    m.set_outputs({y});
    return writer.serialize();
  }
};

/// Random weights and biases for `convs`, in their order.
std::vector<std::vector<float>> conv_weights(const std::vector<ConvSpec>& convs, uint32_t& seed) {
  std::vector<std::vector<float>> weights;
  for (const ConvSpec& c : convs) {
    weights.push_back(etnp::testing::random_floats(static_cast<size_t>(c.cout) * c.cin * c.k * c.k, -1.0f, 1.0f, ++seed));
    weights.push_back(etnp::testing::random_floats(static_cast<size_t>(c.cout), -1.0f, 1.0f, ++seed));
  }
  return weights;
}

/// At each CPU level, runs the network `write(net)` builds twice on x, packed and paired against the NCHW paths,
/// and hands both outputs to check(got, want, level).
template <class Write, class Check>
void against_the_nchw_paths(Write write, const std::vector<float>& x, Check check) {
  etnp::testing::at_each_cpu_level([&](CpuLevel level) {
    NetWriter packed_net(false), general_net(true);
    Program packed = load_bytes(packed_net.finish(write(packed_net)));
    Program general = load_bytes(general_net.finish(write(general_net)));
    auto a = packed.load_method("forward");
    auto g = general.load_method("forward");
    std::vector<Value> in_g = {tensor_input(x, {1, 6, 9, 9})};
    in_g.insert(in_g.end(), general_net.input_values.begin(), general_net.input_values.end());
    for (int run = 0; run < 2; ++run) {
      const auto got = floats(exec(*a, {tensor_input(x, {1, 6, 9, 9})})[0]);
      const auto want = floats(exec(*g, in_g)[0]);
      ASSERT_EQ(got.size(), want.size());
      check(got, want, level);
    }
  });
}

TEST(ChannelsLastPairing, AFireModuleMatchesTheNchwPathsAtEveryCpuLevel) {
  // A fire module: x -> conv 3x3 + relu -> max pool 3x3 / 2, padding 1, ceil mode -> conv 1x1 -> [conv 1x1,
  // conv 3x3] -> cat -> relu -> r + r -> conv 1x1 -> y. 16 and 20 channels through the pooling (two vector blocks;
  // two and a tail), a NaN in the input (the pooling takes NaN over any number), ceil mode's clipped last windows.
  for (int32_t first : {16, 20}) {
    const std::vector<ConvSpec> convs = {{6, first, 3}, {first, 16, 1}, {16, 16, 1}, {16, 20, 3}, {36, 16, 1}};
    uint32_t seed = static_cast<uint32_t>(first);
    const std::vector<std::vector<float>> weights = conv_weights(convs, seed);
    std::vector<float> x = etnp::testing::random_floats(6 * 9 * 9, -1.0f, 1.0f, ++seed);
    x[3 * 81] = std::numeric_limits<float>::quiet_NaN();  // a corner: its NaN reaches a corner of the output
    auto write = [&](NetWriter& n) {
      auto& m = n.m;
      const int32_t a = n.unary("aten::relu.out", n.conv(n.x(), convs[0], &weights[0], 9), {1, first, 9, 9});
      const int32_t p = m.planned_tensor(f32({1, first, 5, 5}));
      const int32_t indices = m.planned_tensor({ScalarType::Long, {1, first, 5, 5}, {}, ShapeDynamism::Static, {}});
      m.kernel("aten::max_pool2d_with_indices.out",
               {a, m.int_list({3, 3}), m.int_list({2, 2}), m.int_list({1, 1}), m.int_list({1, 1}), m.bool_value(true),
                p, indices, m.tensor_list({p, indices})});
      const int32_t squeeze = n.conv(p, convs[1], &weights[2], 5);
      const int32_t e1 = n.conv(squeeze, convs[2], &weights[4], 5), e3 = n.conv(squeeze, convs[3], &weights[6], 5);
      const int32_t both = convs[2].cout + convs[3].cout;
      const int32_t c = m.planned_tensor(f32({1, both, 5, 5}));
      m.kernel("aten::cat.out", {m.tensor_list({e1, e3}), m.int_value(1), c, c});
      const int32_t r = n.unary("aten::relu.out", c, {1, both, 5, 5});
      const int32_t s = m.planned_tensor(f32({1, both, 5, 5}));
      m.kernel("aten::add.out", {r, r, m.int_value(1), s, s});
      return n.conv(s, convs[4], &weights[8], 5);
    };
    against_the_nchw_paths(write, x, [&](const std::vector<float>& got, const std::vector<float>& want, CpuLevel level) {
      size_t nans = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << cpu_level_name(level) << " " << first << " at " << i;
        if (std::isnan(want[i])) {
          ++nans;
          continue;
        }
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << cpu_level_name(level) << " " << first << " at " << i;
      }
      EXPECT_GT(nans, 0u);              // the NaN reached the output through the pooling
      EXPECT_LT(nans, got.size() / 2);  // and not everywhere
    });
  }
}

TEST(ChannelsLastPairing, ASqueezeAndExcitationBlockMatchesTheNchwPathsAtEveryCpuLevel) {
  // x -> conv 3x3 -> relu -> batch norm (b) -> mean over the pixels -> conv 1x1 -> relu -> conv 1x1 -> sigmoid
  // (gate) -> b * gate -> conv 1x1 -> + b -> conv 1x1 -> y; 16 channels (two vector blocks) and 20 (two and a tail).
  for (int32_t c : {16, 20}) {
    const std::vector<ConvSpec> convs = {{6, c, 3}, {c, 8, 1}, {8, c, 1}, {c, c, 1}, {c, 16, 1}};
    uint32_t seed = 100 + static_cast<uint32_t>(c);
    const std::vector<std::vector<float>> weights = conv_weights(convs, seed);
    std::vector<std::vector<float>> norm;
    for (int i = 0; i < 4; ++i) {
      norm.push_back(etnp::testing::random_floats(static_cast<size_t>(c), i == 3 ? 0.5f : -1.0f, 1.5f, ++seed));
    }
    const std::vector<float> x = etnp::testing::random_floats(6 * 9 * 9, -1.0f, 1.0f, ++seed);
    auto write = [&](NetWriter& n) {
      auto& m = n.m;
      const int32_t r = n.unary("aten::relu.out", n.conv(n.x(), convs[0], &weights[0], 9), {1, c, 9, 9});
      const int32_t b = m.planned_tensor(f32({1, c, 9, 9}));
      const int32_t save_mean = m.planned_tensor(f32({0})), save_invstd = m.planned_tensor(f32({0}));
      m.kernel("aten::_native_batch_norm_legit_no_training.out",
               {r, n.param({c}, norm[0]), n.param({c}, norm[1]), n.param({c}, norm[2]), n.param({c}, norm[3]),
                m.double_value(0.1), m.double_value(1e-5), b, save_mean, save_invstd,
                m.tensor_list({b, save_mean, save_invstd})});
      const int32_t squeezed = m.planned_tensor(f32({1, c, 1, 1}));
      m.kernel("aten::mean.out", {b, m.int_list({-1, -2}), m.bool_value(true), m.none(), squeezed, squeezed});
      const int32_t hidden = n.unary("aten::relu.out", n.conv(squeezed, convs[1], &weights[2], 1), {1, 8, 1, 1});
      const int32_t gate = n.unary("aten::sigmoid.out", n.conv(hidden, convs[2], &weights[4], 1), {1, c, 1, 1});
      const int32_t scaled = m.planned_tensor(f32({1, c, 9, 9}));
      m.kernel("aten::mul.out", {b, gate, scaled, scaled});
      const int32_t projected = n.conv(scaled, convs[3], &weights[6], 9);
      const int32_t sum = m.planned_tensor(f32({1, c, 9, 9}));
      m.kernel("aten::add.out", {projected, b, m.int_value(1), sum, sum});
      return n.conv(sum, convs[4], &weights[8], 9);
    };
    against_the_nchw_paths(write, x, [&](const std::vector<float>& got, const std::vector<float>& want, CpuLevel level) {
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << cpu_level_name(level) << " " << c << " at " << i;
      }
    });
  }
}

}  // namespace
}  // namespace etnp::writer_testing
