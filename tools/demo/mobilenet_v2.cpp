#include "tools/demo/mobilenet_v2.h"

#include <cmath>
#include <map>

#include "tools/writer/xnnpack_writer.h"

namespace etnp::demo {
namespace {

/// splitmix64: a tiny, portable generator, so the weights do not depend on the standard library's
/// distributions (which differ between implementations).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1).
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal() {  // Box-Muller
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

constexpr double kBatchNormEps = 1e-5;

class NetBuilder {
 public:
  NetBuilder(MobileNetV2& net, uint64_t seed) : net_(net), rng_(seed) {}

  size_t param(std::string name, std::vector<int64_t> shape, std::vector<float> data) {
    net_.parameters.push_back({std::move(name), std::move(shape), std::move(data)});
    return net_.parameters.size() - 1;
  }

  /// Conv (no bias) + BatchNorm (+ ReLU6), folded. He initialisation: variance 2 / fan_in before ReLU6,
  /// 1 / fan_in for the linear projections (so residual sums keep their scale).
  void conv_bn(const std::string& name, int32_t in_channels, int32_t out_channels, int32_t kernel, int32_t stride,
               int32_t groups, bool relu6) {
    ConvLayer c;
    c.in_channels = in_channels;
    c.out_channels = out_channels;
    c.kernel = kernel;
    c.stride = stride;
    c.padding = (kernel - 1) / 2;
    c.groups = groups;
    c.relu6 = relu6;
    c.in_size = size_;
    c.out_size = (size_ + 2 * c.padding - kernel) / stride + 1;
    size_ = c.out_size;

    const int32_t in_per_group = in_channels / groups;
    const int64_t fan_in = static_cast<int64_t>(in_per_group) * kernel * kernel;
    const double std_dev = std::sqrt((relu6 ? 2.0 : 1.0) / static_cast<double>(fan_in));
    std::vector<float> w(static_cast<size_t>(out_channels) * static_cast<size_t>(fan_in));
    for (auto& x : w) x = static_cast<float>(rng_.normal() * std_dev);
    // Batch norm statistics of a plausible trained layer, folded: w' = w * g / sqrt(v + eps),
    // b' = beta - mean * g / sqrt(v + eps).
    std::vector<float> b(static_cast<size_t>(out_channels));
    for (int32_t o = 0; o < out_channels; ++o) {
      const double gamma = rng_.uniform(0.8, 1.2), beta = rng_.normal() * 0.1, mean = rng_.normal() * 0.1,
                   var = rng_.uniform(0.8, 1.2);
      const double scale = gamma / std::sqrt(var + kBatchNormEps);
      for (int64_t k = 0; k < fan_in; ++k) {
        auto& x = w[static_cast<size_t>(o * fan_in + k)];
        x = static_cast<float>(x * scale);
      }
      b[static_cast<size_t>(o)] = static_cast<float>(beta - mean * scale);
    }
    c.weight = param(name + ".weight", {out_channels, in_per_group, kernel, kernel}, std::move(w));
    c.bias = param(name + ".bias", {out_channels}, std::move(b));
    net_.steps.push_back({Step::Kind::Conv, c});
  }

  void mark(Step::Kind kind) { net_.steps.push_back({kind, {}}); }
  void set_size(int32_t s) { size_ = s; }
  Rng& rng() { return rng_; }

 private:
  MobileNetV2& net_;
  Rng rng_;
  int32_t size_ = 0;
};

std::vector<uint32_t> u32(std::initializer_list<int32_t> v) {
  std::vector<uint32_t> out;
  for (int32_t x : v) out.push_back(static_cast<uint32_t>(x));
  return out;
}

/// OIHW -> OHWI (the layout XNNPACK convolution filters use). For depthwise (I = 1) this is [C, H, W, 1], whose
/// bytes are those of the [1, H, W, C] filter XNNPACK wants after also swapping O and I -- so it is handled apart.
std::vector<float> oihw_to_ohwi(const Parameter& p) {
  const int64_t o = p.shape[0], i = p.shape[1], h = p.shape[2], w = p.shape[3];
  std::vector<float> out(p.data.size());
  for (int64_t a = 0; a < o; ++a)
    for (int64_t b = 0; b < i; ++b)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) out[((a * h + y) * w + x) * i + b] = p.data[((a * i + b) * h + y) * w + x];
  return out;
}

/// Depthwise OIHW [C, 1, H, W] -> [1, H, W, C].
std::vector<float> depthwise_to_1hwc(const Parameter& p) {
  const int64_t c = p.shape[0], h = p.shape[2], w = p.shape[3];
  std::vector<float> out(p.data.size());
  for (int64_t a = 0; a < c; ++a)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) out[(y * w + x) * c + a] = p.data[(a * h + y) * w + x];
  return out;
}

format::TensorSpec f32(std::vector<int32_t> sizes) { return {ScalarType::Float, std::move(sizes), {}, {}, {}}; }

}  // namespace

MobileNetV2 build_mobilenet_v2(uint64_t seed, int32_t num_classes) {
  MobileNetV2 net;
  net.num_classes = num_classes;
  NetBuilder b(net, seed);
  b.set_size(net.image_size);
  b.conv_bn("features.0.0", 3, 32, 3, 2, 1, true);
  // torchvision's inverted residual settings: expansion t, channels c, repeats n, first stride s.
  const int32_t settings[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                  {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int32_t in = 32, index = 1;
  for (const auto& s : settings) {
    for (int32_t r = 0; r < s[2]; ++r, ++index) {
      const int32_t stride = r == 0 ? s[3] : 1, out = s[1], hidden = in * s[0];
      const bool residual = stride == 1 && in == out;
      const std::string prefix = "features." + std::to_string(index) + ".conv.";
      if (residual) b.mark(Step::Kind::SaveResidual);
      int32_t layer = 0;
      if (s[0] != 1) b.conv_bn(prefix + std::to_string(layer++) + ".0", in, hidden, 1, 1, 1, true);
      b.conv_bn(prefix + std::to_string(layer++) + ".0", hidden, hidden, 3, stride, hidden, true);
      b.conv_bn(prefix + std::to_string(layer), hidden, out, 1, 1, 1, false);
      if (residual) b.mark(Step::Kind::AddResidual);
      in = out;
    }
  }
  b.conv_bn("features.18.0", in, net.last_channels, 1, 1, 1, true);
  std::vector<float> w(static_cast<size_t>(num_classes) * static_cast<size_t>(net.last_channels));
  const double std_dev = 1.0 / std::sqrt(static_cast<double>(net.last_channels));
  for (auto& x : w) x = static_cast<float>(b.rng().normal() * std_dev);
  std::vector<float> bias(static_cast<size_t>(num_classes));
  for (auto& x : bias) x = static_cast<float>(b.rng().normal() * 0.01);
  net.classifier_weight = b.param("classifier.1.weight", {num_classes, net.last_channels}, std::move(w));
  net.classifier_bias = b.param("classifier.1.bias", {num_classes}, std::move(bias));
  return net;
}

void write_xnnpack_program(const MobileNetV2& net, format::ProgramWriter& writer, bool constants_in_ptd) {
  using format::XnnConv2dParams;
  using format::XnnpackGraphWriter;
  XnnpackGraphWriter g;
  const int32_t s = net.image_size;
  const uint32_t input = g.input(u32({1, 3, s, s}), 0);
  const uint32_t output = g.output(u32({1, net.num_classes}), 1);
  uint32_t x = g.internal(u32({1, s, s, 3}));
  g.static_transpose({0, 2, 3, 1}, input, x);
  uint32_t residual = XnnpackGraphWriter::kInvalidId;
  for (const Step& step : net.steps) {
    if (step.kind == Step::Kind::SaveResidual) {
      residual = x;
      continue;
    }
    if (step.kind == Step::Kind::AddResidual) continue;  // added right after the projection, below
    const ConvLayer& c = step.conv;
    const Parameter& w = net.parameters[c.weight];
    const Parameter& bias = net.parameters[c.bias];
    const uint32_t b = g.constant(u32({c.out_channels}), bias.data);
    const uint32_t y = g.internal(u32({1, c.out_size, c.out_size, c.out_channels}));
    XnnConv2dParams p;
    p.kernel_h = p.kernel_w = static_cast<uint32_t>(c.kernel);
    p.stride_h = p.stride_w = static_cast<uint32_t>(c.stride);
    p.pad_top = p.pad_right = p.pad_bottom = p.pad_left = static_cast<uint32_t>(c.padding);
    const float lo = c.relu6 ? 0.0f : XnnpackGraphWriter::kNoMin, hi = c.relu6 ? 6.0f : XnnpackGraphWriter::kNoMax;
    if (c.groups == c.in_channels && c.groups == c.out_channels && c.groups > 1) {
      p.groups = static_cast<uint32_t>(c.groups);
      p.group_input_channels = 1;
      p.group_output_channels = 1;
      const uint32_t f = g.constant(u32({1, c.kernel, c.kernel, c.out_channels}), depthwise_to_1hwc(w));
      g.depthwise_conv2d(p, x, f, b, y, lo, hi);
    } else {
      p.groups = 1;
      p.group_input_channels = static_cast<uint32_t>(c.in_channels);
      p.group_output_channels = static_cast<uint32_t>(c.out_channels);
      const uint32_t f = g.constant(u32({c.out_channels, c.kernel, c.kernel, c.in_channels}), oihw_to_ohwi(w));
      g.conv2d(p, x, f, b, y, lo, hi);
    }
    x = y;
    // A residual block ends with its projection: add the block input now if the next step asks for it.
    const size_t i = static_cast<size_t>(&step - net.steps.data());
    if (i + 1 < net.steps.size() && net.steps[i + 1].kind == Step::Kind::AddResidual) {
      const uint32_t sum = g.internal(u32({1, c.out_size, c.out_size, c.out_channels}));
      g.add(x, residual, sum);
      x = sum;
    }
  }
  const int32_t ch = net.last_channels;
  const uint32_t pooled = g.internal(u32({1, 1, 1, ch}));
  g.global_avg_pool2d(x, pooled);
  const uint32_t flat = g.internal(u32({1, ch}));
  g.static_reshape(u32({1, ch}), pooled, flat);
  const uint32_t fw = g.constant(u32({net.num_classes, ch}), net.parameters[net.classifier_weight].data);
  const uint32_t fb = g.constant(u32({net.num_classes}), net.parameters[net.classifier_bias].data);
  g.fully_connected(flat, fw, fb, output);

  format::MethodWriter& m = writer.add_method("forward");
  const int32_t in_value = m.planned_tensor(f32({1, 3, s, s}));
  const int32_t out_value = m.planned_tensor(f32({1, net.num_classes}));
  format::add_xnnpack_delegate(writer, m, g.finish(), {in_value, out_value}, constants_in_ptd);
  m.set_inputs({in_value});
  m.set_outputs({out_value});
}

void write_portable_program(const MobileNetV2& net, format::ProgramWriter& writer) {
  format::MethodWriter& m = writer.add_method("forward");
  const int32_t s = net.image_size;
  const int32_t input = m.planned_tensor(f32({1, 3, s, s}));
  // Argument values shared by every call (values are read-only, so one of each is enough).
  std::map<int64_t, int32_t> pair_lists, ints;
  auto pair = [&](int64_t v) {
    auto it = pair_lists.find(v);
    if (it == pair_lists.end()) it = pair_lists.emplace(v, m.int_list({v, v})).first;
    return it->second;
  };
  auto int_value = [&](int64_t v) {
    auto it = ints.find(v);
    if (it == ints.end()) it = ints.emplace(v, m.int_value(v)).first;
    return it->second;
  };
  const int32_t not_transposed = m.bool_value(false);
  const int32_t zero = m.double_value(0.0), six = m.double_value(6.0);

  int32_t x = input, residual = -1;
  for (size_t i = 0; i < net.steps.size(); ++i) {
    const Step& step = net.steps[i];
    if (step.kind == Step::Kind::SaveResidual) {
      residual = x;
      continue;
    }
    if (step.kind == Step::Kind::AddResidual) continue;
    const ConvLayer& c = step.conv;
    const Parameter& w = net.parameters[c.weight];
    const Parameter& b = net.parameters[c.bias];
    const int32_t weight = m.constant_tensor(
        f32({c.out_channels, c.in_channels / c.groups, c.kernel, c.kernel}), format::as_bytes(w.data));
    const int32_t bias = m.constant_tensor(f32({c.out_channels}), format::as_bytes(b.data));
    const int32_t y = m.planned_tensor(f32({1, c.out_channels, c.out_size, c.out_size}));
    // convolution.out(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups, out)
    m.kernel("aten::convolution.out", {x, weight, bias, pair(c.stride), pair(c.padding), pair(1), not_transposed,
                                        pair(0), int_value(c.groups), y, y});
    x = y;
    if (c.relu6) {
      const int32_t a = m.planned_tensor(f32({1, c.out_channels, c.out_size, c.out_size}));
      m.kernel("aten::hardtanh.out", {x, zero, six, a, a});
      x = a;
    }
    if (i + 1 < net.steps.size() && net.steps[i + 1].kind == Step::Kind::AddResidual) {
      const int32_t sum = m.planned_tensor(f32({1, c.out_channels, c.out_size, c.out_size}));
      m.kernel("aten::add.out", {x, residual, int_value(1), sum, sum});
      x = sum;
    }
  }
  const int32_t ch = net.last_channels;
  const int32_t pooled = m.planned_tensor(f32({1, ch, 1, 1}));
  m.kernel("aten::mean.out", {x, m.int_list({-1, -2}), m.bool_value(true), m.none(), pooled, pooled});
  const int32_t flat = m.planned_alias(pooled, f32({1, ch}));
  // The classifier weight is stored transposed ([in, out]), so addmm needs no permute at run time.
  const Parameter& fw = net.parameters[net.classifier_weight];
  std::vector<float> wt(fw.data.size());
  for (int32_t o = 0; o < net.num_classes; ++o)
    for (int32_t k = 0; k < ch; ++k) wt[static_cast<size_t>(k * net.num_classes + o)] = fw.data[static_cast<size_t>(o * ch + k)];
  const int32_t weight_t = m.constant_tensor(f32({ch, net.num_classes}), format::as_bytes(wt));
  const int32_t bias = m.constant_tensor(f32({net.num_classes}), format::as_bytes(net.parameters[net.classifier_bias].data));
  const int32_t out = m.planned_tensor(f32({1, net.num_classes}));
  m.kernel("aten::addmm.out", {bias, flat, weight_t, int_value(1), int_value(1), out, out});
  m.set_inputs({input});
  m.set_outputs({out});
}

void write_weights(const MobileNetV2& net, uint64_t seed, const std::string& bin_path, const std::string& json_path) {
  std::vector<uint8_t> bytes;
  std::string json = "{\n  \"seed\": " + std::to_string(seed) + ",\n  \"num_classes\": " +
                     std::to_string(net.num_classes) + ",\n  \"dtype\": \"float32\",\n  \"parameters\": [\n";
  for (size_t i = 0; i < net.parameters.size(); ++i) {
    const Parameter& p = net.parameters[i];
    json += "    {\"name\": \"" + p.name + "\", \"shape\": [";
    for (size_t d = 0; d < p.shape.size(); ++d) json += (d ? ", " : "") + std::to_string(p.shape[d]);
    json += "], \"offset\": " + std::to_string(bytes.size()) + "}" + (i + 1 < net.parameters.size() ? ",\n" : "\n");
    const auto b = format::as_bytes(p.data);
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  json += "  ]\n}\n";
  format::write_file(bin_path, bytes);
  format::write_file(json_path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size()));
}

}  // namespace etnp::demo
