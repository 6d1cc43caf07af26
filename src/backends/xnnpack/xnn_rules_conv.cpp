// Rules for windowed nodes: convolutions (regular, depthwise, transposed), pooling (average, max, argmax,
// global average) and bilinear resize.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backends/xnnpack/conv_qs8.h"
#include "backends/xnnpack/xnn_rules.h"
#include "compute/conv_indirect.h"
#include "compute/depthwise.h"
#include "compute/packed_gemm.h"
#include "etnp/error.h"

namespace etnp::xnn {
namespace {

/// The payload's window as the adapter takes it (convolutions: as serialized).
ops::PoolParams window_params(const WindowParams& w) {
  ops::PoolParams p;
  p.pad_top = w.pad_top;
  p.pad_right = w.pad_right;
  p.pad_bottom = w.pad_bottom;
  p.pad_left = w.pad_left;
  p.kernel_h = w.kernel_h;
  p.kernel_w = w.kernel_w;
  p.stride_h = w.stride_h;
  p.stride_w = w.stride_w;
  p.dilation_h = w.dilation_h;
  p.dilation_w = w.dilation_w;
  return p;
}

/// Pooling windows: an unset (0) dilation means none.
ops::PoolParams pool_params(const WindowParams& w) {
  ops::PoolParams p = window_params(w);
  p.dilation_h = std::max<uint32_t>(p.dilation_h, 1);
  p.dilation_w = std::max<uint32_t>(p.dilation_w, 1);
  return p;
}

/// Channels of input 0 (NHWC), at least 1: the create-time parameter of poolings and resizes.
XnnStep::Key channels_key(uint32_t in0) {
  return [in0](const Shape* s) { return std::max<size_t>(s[in0][3], 1); };
}

/// The setup of a pooling over input 0 (NHWC).
XnnStep::Setup pooling_setup(uint32_t in0, uint32_t out0) {
  return [=](ops::Operator& op, const RunContext& c) {
    const Shape& s = c.shapes[in0];
    return ops::setup_pooling(op, s[0], s[1], s[2], c.data[in0], c.data[out0], c.pool);
  };
}

// ---- convolutions ---------------------------------------------------------------------------------------

struct Conv {
  WindowParams w;
  bool depthwise = false, deconv = false;
  ops::ConvParams params;  ///< as XNNPACK takes them (depthwise: one group per input channel, HWGo filter)
  size_t gout = 0, cin = 0, cout = 0;
};

Conv conv_of(const Node& node) {
  Conv c;
  c.w = node.window;
  c.depthwise = node.kind == NodeKind::DepthwiseConv2d;
  c.deconv = node.kind == NodeKind::ConvTranspose2d;
  const size_t gin = c.depthwise ? 1 : c.w.group_input_channels;
  c.gout = c.depthwise ? c.w.group_output_channels / c.w.group_input_channels : c.w.group_output_channels;
  static_cast<ops::PoolParams&>(c.params) = window_params(c.w);
  c.params.groups = c.w.groups;
  c.params.group_input_channels = gin;
  c.params.group_output_channels = c.gout;
  c.params.depthwise = c.depthwise;
  c.cin = c.w.groups * gin;
  c.cout = c.w.groups * c.gout;
  return c;
}

bool conv_is_f32(const NodeView& v) {
  const Value* b = v.optional_in(2);
  return is_f32(v.in(0)) && is_f32(v.in(1)) && is_f32(v.out()) && (b == nullptr || is_f32(*b));
}

bool conv_is_qs8(const NodeView& v) {
  const Value& f = v.in(1);
  const Value* b = v.optional_in(2);
  return is_qs8(v.in(0)) && is_qs8(v.out()) &&
         (f.dtype == DataType::qint8 || f.dtype == DataType::qcint8) &&
         (b == nullptr || b->dtype == DataType::qint32 || b->dtype == DataType::qcint32);
}

/// int8 depthwise convolutions the delegate's kernel runs (channels a multiple of 8, on AVX2 or NEON).
bool own_depthwise_qs8(const Conv& c) {
  return c.depthwise && c.gout == 1 && c.w.dilation_h == 1 && c.w.dilation_w == 1 &&
         DepthwiseConvQS8::supported(c.cin, c.w.kernel_h);
}

/// A transposed convolution with one group on the delegate's GEMM (compute::deconv2d_gemm) under the measured
/// choice with the 2022 library, whose operator runs SSE kernels (the upsampler's two took 84% of its int8
/// program), and always under `own`: XNNPACK's [Cout, KH, KW, Cin] filter reordered at load to the GEMM's
/// [Cin, KH * KW * Cout] weights. (The 2024 library's operator is not measured against it: it keeps the node.)
bool own_deconv(const StepBuilder& b, const Conv& cv) {
  if (!cv.deconv || cv.w.groups != 1) return false;
  return b.engines == Engines::Own || (b.engines == Engines::Measured && !ops::reshape_api());
}

std::shared_ptr<const compute::PackedGemm> pack_deconv(StepBuilder& b, const Conv& cv, const float* kernel) {
  const size_t taps = size_t{cv.w.kernel_h} * cv.w.kernel_w, n = taps * cv.cout;
  std::vector<float> weights(cv.cin * n);
  for (size_t oc = 0; oc < cv.cout; ++oc) {
    for (size_t t = 0; t < taps; ++t) {
      for (size_t ic = 0; ic < cv.cin; ++ic) weights[ic * n + t * cv.cout + oc] = kernel[(oc * taps + t) * cv.cin + ic];
    }
  }
  return b.packed.hold(std::make_shared<const compute::PackedGemm>(weights.data(), false, cv.cin, n, nullptr));
}

/// The geometry of a convolution (or a transposed one) from its input shape `s` and output shape `o` (NHWC).
compute::Conv2dGeometry conv_geometry(const WindowParams& w, size_t cin, const Shape& s, const Shape& o) {
  compute::Conv2dGeometry g;
  g.in_h = s[1];
  g.in_w = s[2];
  g.channels = cin;
  g.kernel_h = w.kernel_h;
  g.kernel_w = w.kernel_w;
  g.stride_h = w.stride_h;
  g.stride_w = w.stride_w;
  g.dilation_h = std::max<uint32_t>(w.dilation_h, 1);
  g.dilation_w = std::max<uint32_t>(w.dilation_w, 1);
  g.pad_top = w.pad_top;
  g.pad_left = w.pad_left;
  g.out_h = o[1];
  g.out_w = o[2];
  return g;
}

/// A 1x1 convolution over NHWC: a GEMM [N*H*W, Cin] x [Cout, Cin]^T (fp32: compute::PackedGemm).
bool is_pointwise(const Conv& cv) {
  const WindowParams& w = cv.w;
  return !cv.depthwise && !cv.deconv && w.groups == 1 && w.kernel_h == 1 && w.kernel_w == 1 && w.stride_h == 1 &&
         w.stride_w == 1 && w.pad_top == 0 && w.pad_right == 0 && w.pad_bottom == 0 && w.pad_left == 0;
}

/// fp32 depthwise convolutions compute::DepthwiseConv runs.
bool own_depthwise_f32(const Conv& cv) {
  const WindowParams& w = cv.w;
  return cv.depthwise && w.dilation_h == 1 && w.dilation_w == 1 && cv.gout == 1 &&
         compute::DepthwiseConv::supported(cv.cin, w.kernel_h, w.stride_h, w.stride_w);
}

const float* filter_of(const NodeView& v) { return reinterpret_cast<const float*>(v.in(1).data); }
const float* bias_of(const NodeView& v) {
  const Value* bv = v.optional_in(2);
  return bv == nullptr ? nullptr : reinterpret_cast<const float*>(bv->data);
}

std::shared_ptr<const compute::PackedGemm> pack_pointwise(StepBuilder& b, const NodeView& v, const Conv& cv) {
  return b.packed.hold(std::make_shared<const compute::PackedGemm>(filter_of(v), true, cv.cin, cv.cout, bias_of(v)));
}

std::shared_ptr<const compute::DepthwiseConv> pack_depthwise(StepBuilder& b, const NodeView& v, const Conv& cv) {
  const WindowParams& w = cv.w;
  return b.packed.hold(std::make_shared<const compute::DepthwiseConv>(
      filter_of(v), bias_of(v), cv.cin, w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.pad_top, w.pad_left));
}

void build_conv_f32(StepBuilder& b, const Conv& cv) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const float out_min = v.node.output_min, out_max = v.node.output_max;
  const WindowParams w = cv.w;
  const size_t cin = cv.cin, cout = cv.cout;
  const float* kernel = filter_of(v);
  const float* bias_data = bias_of(v);
  if (is_pointwise(cv)) {
    auto gemm = pack_pointwise(b, v, cv);
    b.add_own([=](const RunContext& c) {
      const Shape& s = c.shapes[in0];
      gemm->run(static_cast<const float*>(c.data[in0]), s[0] * s[1] * s[2], cin, out_min, out_max,
                static_cast<float*>(c.data[out0]));
    });
    return;
  }
  if (own_depthwise_f32(cv)) {
    auto conv = pack_depthwise(b, v, cv);
    b.add_own([=](const RunContext& c) {
      const Shape& s = c.shapes[in0];
      const Shape& o = c.shapes[out0];
      conv->run(static_cast<const float*>(c.data[in0]), s[0], s[1], s[2], o[1], o[2], out_min, out_max,
                static_cast<float*>(c.data[out0]), c.scratch->floats);
    });
    return;
  }
  if (!cv.depthwise && !cv.deconv && w.groups == 1) {
    // Other single-group convolutions: the same GEMM reading patches in place (indirect).
    auto gemm = b.packed.hold(std::make_shared<const compute::PackedGemm>(
        kernel, true, size_t{w.kernel_h} * w.kernel_w * cin, cout, bias_data));
    b.add_own([=](const RunContext& c) {
      const Shape& s = c.shapes[in0];
      compute::conv2d_indirect(*gemm, conv_geometry(w, cin, s, c.shapes[out0]), s[0],
                               static_cast<const float*>(c.data[in0]), out_min, out_max,
                               static_cast<float*>(c.data[out0]), c.scratch->conv);
    });
    return;
  }
  const ops::ConvParams cp = cv.params;
  if (own_deconv(b, cv)) {
    auto gemm = pack_deconv(b, cv, kernel);
    const std::vector<float> bias = bias_data == nullptr ? std::vector<float>() : std::vector<float>(bias_data, bias_data + cout);
    b.add_own([=](const RunContext& c) {
      const Shape& s = c.shapes[in0];
      compute::deconv2d_gemm(*gemm, conv_geometry(w, cin, s, c.shapes[out0]), s[0],
                             static_cast<const float*>(c.data[in0]), bias.empty() ? nullptr : bias.data(), out_min,
                             out_max, static_cast<float*>(c.data[out0]), c.scratch->floats);
    });
    return;
  }
  if (cv.deconv) {
    b.add_xnn(
        "deconvolution f32",
        [=](const Shape*, ops::Operator& op) {
          return ops::create_deconvolution_f32(cp, kernel, bias_data, out_min, out_max, op);
        },
        [=](ops::Operator& op, const RunContext& c) {
          const Shape& s = c.shapes[in0];
          return ops::setup_deconvolution(op, s[0], s[1], s[2], w.adjustment_h, w.adjustment_w, c.data[in0],
                                          c.data[out0], c.pool);
        });
    return;
  }
  b.add_xnn(
      cv.depthwise ? "depthwise convolution f32" : "convolution f32",
      [=](const Shape*, ops::Operator& op) {
        return ops::create_convolution_f32(cp, kernel, bias_data, out_min, out_max, op);
      },
      [=](ops::Operator& op, const RunContext& c) {
        const Shape& s = c.shapes[in0];
        return ops::setup_convolution(op, s[0], s[1], s[2], c.data[in0], c.data[out0], c.pool);
      });
}

/// A per-channel int8 transposed convolution on the 2022 library, which has none: the weights dequantized at
/// load, the input dequantized, an fp32 transposed convolution (own_deconv's, else XNNPACK's), the output
/// quantized: the result can differ from an int8 operator's by a step where the fp32 sum rounds across a tie.
void build_deconv_qc8_via_f32(StepBuilder& b, const Conv& cv) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const Value& x = v.in(0);
  const Value& f = v.in(1);
  const Value* bv = v.optional_in(2);
  const size_t per_channel = cv.w.kernel_h * cv.w.kernel_w * cv.params.group_input_channels;
  const size_t count = cv.cout * per_channel;
  std::vector<float> kernel(count);
  const auto* codes = reinterpret_cast<const int8_t*>(f.data);
  for (size_t i = 0; i < count; ++i) kernel[i] = float(codes[i]) * f.channel_scales[i / per_channel];
  std::vector<float> bias;
  if (bv != nullptr) {
    const auto* b32 = reinterpret_cast<const int32_t*>(bv->data);
    bias.resize(cv.cout);
    for (size_t c = 0; c < cv.cout; ++c) bias[c] = float(double(b32[c]) * x.scale * f.channel_scales[c]);
  }
  const Quant8 qx = quant8(x), qo = quant8(v.out());
  const WindowParams w = cv.w;
  const float out_min = v.node.output_min, out_max = v.node.output_max;
  if (own_deconv(b, cv)) {
    auto gemm = pack_deconv(b, cv, kernel.data());
    const size_t cin = cv.cin;
    b.add_own([=, fx = std::vector<float>(), fo = std::vector<float>(), scratch = std::vector<float>()](
                  const RunContext& c) mutable {
      const Shape &s_in = c.shapes[in0], &s_out = c.shapes[out0];
      fx.resize(s_in.numel());
      fo.resize(s_out.numel());
      dequantize_q8(c.data[in0], fx.data(), s_in.numel(), qx);
      compute::deconv2d_gemm(*gemm, conv_geometry(w, cin, s_in, s_out), s_in[0], fx.data(),
                             bias.empty() ? nullptr : bias.data(), out_min, out_max, fo.data(), scratch);
      quantize_q8(fo.data(), c.data[out0], fo.size(), qo);
    });
    return;
  }
  auto op = std::make_shared<ops::Operator>();
  const xnn_status s = ops::create_deconvolution_f32(cv.params, kernel.data(), bias.empty() ? nullptr : bias.data(),
                                                     out_min, out_max, *op);
  if (s != xnn_status_success) {
    throw Error(ErrorKind::ProgramLoadError, "XNNPACK payload: " + v.node.describe() +
                                                 ": XNNPACK could not create its deconvolution f32 operator (" +
                                                 ops::status_name(s) + ")");
  }
  const std::string where = v.node.describe();
  b.add_own([=, fx = std::vector<float>(), fo = std::vector<float>()](const RunContext& c) mutable {
    const Shape &s_in = c.shapes[in0], &s_out = c.shapes[out0];
    fx.resize(s_in.numel() + ops::kExtraBytes / sizeof(float));
    fo.resize(s_out.numel());
    dequantize_q8(c.data[in0], fx.data(), s_in.numel(), qx);
    xnn_status st = ops::setup_deconvolution(*op, s_in[0], s_in[1], s_in[2], w.adjustment_h, w.adjustment_w, fx.data(),
                                             fo.data(), c.pool);
    if (st == xnn_status_success) st = op->run(c.pool);
    if (st != xnn_status_success) run_fail(where + ": XNNPACK deconvolution f32 failed (" + ops::status_name(st) + ")");
    quantize_q8(fo.data(), c.data[out0], fo.size(), qo);
  });
}

/// The window and quantization fields the own int8 convolutions' parameters share.
template <class Params>
Params int8_window_params(const Conv& cv, ops::QParams in, const Value& out, Q8Range range) {
  Params p;
  p.kernel_h = cv.w.kernel_h;
  p.kernel_w = cv.w.kernel_w;
  p.stride_h = cv.w.stride_h;
  p.stride_w = cv.w.stride_w;
  p.pad_top = cv.w.pad_top;
  p.pad_left = cv.w.pad_left;
  p.in_zero_point = in.zero_point;
  p.out_zero_point = static_cast<int8_t>(out.zero_point);
  p.out_min = range.lo;
  p.out_max = range.hi;
  return p;
}

/// The step of an own int8 convolution over NHWC images (run(in, batch, h, w, out_h, out_w, out, scratch)), on the
/// executor's shared scratch.
template <class Kernel>
void add_conv_qs8_step(StepBuilder& b, std::shared_ptr<const Kernel> conv) {
  const uint32_t in0 = b.view.in_id(0), out0 = b.view.out_id();
  b.add_own([=](const RunContext& c) {
    const Shape& s = c.shapes[in0];
    const Shape& os = c.shapes[out0];
    conv->run(static_cast<const int8_t*>(c.data[in0]), s[0], s[1], s[2], os[1], os[2],
              static_cast<int8_t*>(c.data[out0]), c.scratch->bytes);
  });
}

void build_conv_qs8(StepBuilder& b, const Conv& cv) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const Value& x = v.in(0);
  const Value& f = v.in(1);
  const Value* bv = v.optional_in(2);
  const Value o = v.out();
  const ops::QParams in_q = qparams(x);
  const Q8Range r = q8_range(v.node, o);
  const auto* kernel = reinterpret_cast<const int8_t*>(f.data);
  const auto* bias_data = bv == nullptr ? nullptr : reinterpret_cast<const int32_t*>(bv->data);
  const ops::ConvParams cp = cv.params;
  auto setup = [=](ops::Operator& op, const RunContext& c) {
    const Shape& s = c.shapes[in0];
    return ops::setup_convolution(op, s[0], s[1], s[2], c.data[in0], c.data[out0], c.pool);
  };
  if (own_depthwise_qs8(cv)) {
    const std::vector<float> scales = requantization_scales(x, f, o, cv.cin);
    auto p = int8_window_params<DepthwiseConvQS8::Params>(cv, in_q, o, r);
    p.channels = cv.cin;
    add_conv_qs8_step(
        b, b.packed.hold(std::make_shared<const DepthwiseConvQS8>(kernel, bias_data, scales.data(), p)));
    return;
  }
  if (!cv.depthwise && !cv.deconv && cv.w.groups == 1 && ConvQS8::supported() &&
      !b.use_library(measured::library_int8_product_faster())) {
    const std::vector<float> scales = requantization_scales(x, f, o, cv.cout);
    auto p = int8_window_params<ConvQS8::Params>(cv, in_q, o, r);
    p.in_channels = cv.cin;
    p.out_channels = cv.cout;
    p.dilation_h = std::max<size_t>(cv.w.dilation_h, 1);
    p.dilation_w = std::max<size_t>(cv.w.dilation_w, 1);
    add_conv_qs8_step(b, b.packed.hold(std::make_shared<const ConvQS8>(kernel, bias_data, scales.data(), p)));
    return;
  }
  if (cv.deconv) {
    auto setup_deconv = [=, w = cv.w](ops::Operator& op, const RunContext& c) {
      const Shape& s = c.shapes[in0];
      return ops::setup_deconvolution(op, s[0], s[1], s[2], w.adjustment_h, w.adjustment_w, c.data[in0], c.data[out0],
                                      c.pool);
    };
    if (f.quant != QuantKind::PerChannel) {
      const float k_scale = f.scale;
      b.add_xnn(
          "deconvolution qs8",
          [=](const Shape*, ops::Operator& op) {
            return ops::create_deconvolution_qs8(cp, in_q, k_scale, kernel, bias_data, qparams(o), r.lo, r.hi, op);
          },
          setup_deconv);
      return;
    }
    if (!ops::has_qc8_deconvolution()) return build_deconv_qc8_via_f32(b, cv);
    const std::vector<float> scales = f.channel_scales;
    b.add_xnn(
        "deconvolution qc8",
        [=](const Shape*, ops::Operator& op) {
          return ops::create_deconvolution_qc8(cp, in_q, scales.data(), kernel, bias_data, qparams(o), r.lo, r.hi, op);
        },
        setup_deconv);
    return;
  }
  if (f.quant == QuantKind::PerChannel) {
    const std::vector<float> scales = f.channel_scales;
    b.add_xnn(
        cv.depthwise ? "depthwise convolution qc8" : "convolution qc8",
        [=](const Shape*, ops::Operator& op) {
          return ops::create_convolution_qc8(cp, in_q, scales.data(), kernel, bias_data, qparams(o), r.lo, r.hi, op);
        },
        setup);
    return;
  }
  const float k_scale = f.scale;
  b.add_xnn(
      cv.depthwise ? "depthwise convolution qs8" : "convolution qs8",
      [=](const Shape*, ops::Operator& op) {
        return ops::create_convolution_qs8(cp, in_q, k_scale, kernel, bias_data, qparams(o), r.lo, r.hi, op);
      },
      setup);
}

}  // namespace

Refusal check_conv(const NodeView& v) {
  if (Refusal r = check_constant(v, v.in_id(1), "the filter")) return r;
  if (Refusal r = check_constant(v, v.in_id(2), "the bias")) return r;
  if (v.node.flags != 0) return refuse("unsupported flags " + std::to_string(v.node.flags));
  if (conv_is_f32(v)) return kSupported;
  const Conv c = conv_of(v.node);
  if (!conv_is_qs8(v)) return refuse();
  const Value& f = v.in(1);
  if (Refusal r = check_q8_range(v, v.out())) return r;
  if (Refusal r = check_requantization(v.in(0), f, v.out())) return r;
  if (f.quant == QuantKind::PerChannel && f.channel_dim != (c.depthwise ? 3u : 0u)) {
    return refuse("per-channel scales must follow the outputs");
  }
  if (!own_depthwise_qs8(c) && f.quant != QuantKind::PerChannel && f.zero_point != 0) {
    return refuse("per-tensor int8 weights need zero point 0");
  }
  return kSupported;
}

void build_conv(StepBuilder& b) {
  const Conv c = conv_of(b.view.node);
  if (conv_is_f32(b.view)) return build_conv_f32(b, c);
  build_conv_qs8(b, c);
}

bool build_depthwise_pointwise(StepBuilder& b, const NodeView& next) {
  const NodeView& v = b.view;
  if (v.node.kind != NodeKind::DepthwiseConv2d || next.node.kind != NodeKind::Conv2d) return false;
  if (next.in_id(0) != v.out_id() || v.out().is_external() || !conv_is_f32(v) || !conv_is_f32(next)) return false;
  const Conv dw = conv_of(v.node), pw = conv_of(next.node);
  if (!own_depthwise_f32(dw) || !is_pointwise(pw) || pw.cin != dw.cout) return false;
  auto depthwise = pack_depthwise(b, v, dw);
  auto pointwise = pack_pointwise(b, next, pw);
  const uint32_t in0 = v.in_id(0), mid = v.out_id(), out0 = next.out_id();
  const float dw_min = v.node.output_min, dw_max = v.node.output_max;
  const float pw_min = next.node.output_min, pw_max = next.node.output_max;
  const size_t channels = dw.cout;
  b.add_own(
      [=](const RunContext& c) {
        const Shape& s = c.shapes[in0];
        const Shape& m = c.shapes[mid];
        const auto* x = static_cast<const float*>(c.data[in0]);
        auto* y = static_cast<float*>(c.data[out0]);
        if (compute::depthwise_then_pointwise_pays(m[1], m[2], channels)) {
          compute::depthwise_then_pointwise(*depthwise, dw_min, dw_max, *pointwise, pw_min, pw_max, x, s[0], s[1],
                                            s[2], m[1], m[2], y, c.scratch->floats);
          return;
        }
        auto* between = static_cast<float*>(c.data[mid]);
        depthwise->run(x, s[0], s[1], s[2], m[1], m[2], dw_min, dw_max, between, c.scratch->floats);
        pointwise->run(between, m[0] * m[1] * m[2], channels, pw_min, pw_max, y);
      },
      nullptr, "own kernels, with the next XNNConv2d");
  ++b.own_kernels;  // the second node
  return true;
}

// ---- global average pooling: XNNPACK on fp32, the own kernel on int8 -----------------------------------

Refusal check_global_avg_pooling(const NodeView& v) {
  if (is_f32(v.in(0)) && is_f32(v.out())) return kSupported;
  if (is_qs8(v.in(0)) && is_qs8(v.out())) return check_q8_range(v, v.out());
  return refuse();
}

void build_global_avg_pooling(StepBuilder& b) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const float out_min = v.node.output_min, out_max = v.node.output_max;
  b.keep(in0);
  if (is_f32(v.in(0))) {
    const XnnStep::Key channels_of = channels_key(in0);
    b.add_xnn(
        "global average pooling f32",
        [=](const Shape* s, ops::Operator& op) {
          return ops::create_global_average_pooling_f32(channels_of(s), out_min, out_max, op);
        },
        [=](ops::Operator& op, const RunContext& c) {
          return ops::setup_global_average_pooling(op, c.shapes[in0][0], c.shapes[in0][1] * c.shapes[in0][2],
                                                   c.data[in0], c.data[out0], c.pool);
        },
        channels_of);
    return;
  }
  // Own kernel: the int32 sum of each channel, scaled in fp32, the output zero point added, then rounded
  // half to even, as the official runtime's XNNPACK computes a quantized mean. The 2022 library rounds
  // before adding the zero point, so ties go the other way for an odd zero point; on a 2x2 map (an int8
  // MobileNetV2 at 64x64) a quarter of the outputs are ties.
  const Value x = v.in(0), o = v.out();
  const Q8Range r = q8_range(v.node, o);
  const int32_t in_zero = x.zero_point, out_zero = o.zero_point;
  b.add_own([=, sums = std::vector<int32_t>()](const RunContext& c) mutable {
    const Shape& sh = c.shapes[in0];
    const size_t batch = sh[0], pixels = sh[1] * sh[2], channels = std::max<size_t>(sh[3], 1);
    const float scale = x.scale / (o.scale * static_cast<float>(std::max<size_t>(pixels, 1)));
    const float zero = static_cast<float>(out_zero);
    const auto* in = static_cast<const int8_t*>(c.data[in0]);
    auto* out = static_cast<int8_t*>(c.data[out0]);
    sums.resize(channels);
    for (size_t bi = 0; bi < batch; ++bi, out += channels) {
      std::fill(sums.begin(), sums.end(), -in_zero * static_cast<int32_t>(pixels));
      for (size_t p = 0; p < pixels; ++p, in += channels) {
        for (size_t ch = 0; ch < channels; ++ch) sums[ch] += in[ch];
      }
      for (size_t ch = 0; ch < channels; ++ch) {
        const float q = std::nearbyint(static_cast<float>(sums[ch]) * scale + zero);
        out[ch] = static_cast<int8_t>(std::clamp(q, float(r.lo), float(r.hi)));
      }
    }
  });
}

// ---- average and max pooling ----------------------------------------------------------------------------

Refusal check_pooling(const NodeView& v) {
  if (is_f32(v.in(0)) && is_f32(v.out())) return kSupported;
  if (v.node.kind == NodeKind::MaxPooling2d && is_qs8(v.in(0)) && is_qs8(v.out()) && same_quant(v.in(0), v.out())) {
    return check_q8_range(v, v.out());
  }
  return refuse();
}

void build_pooling(StepBuilder& b) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  const float out_min = v.node.output_min, out_max = v.node.output_max;
  b.keep(in0);
  const bool is_max = v.node.kind == NodeKind::MaxPooling2d;
  const ops::PoolParams pp = pool_params(v.node.window);
  const XnnStep::Key channels_of = channels_key(in0);
  if (is_f32(v.in(0))) {
    b.add_xnn(
        is_max ? "max pooling f32" : "average pooling f32",
        [=](const Shape* s, ops::Operator& op) {
          if (is_max) return ops::create_max_pooling_f32(pp, channels_of(s), out_min, out_max, op);
          return ops::create_average_pooling_f32(pp, channels_of(s), out_min, out_max, op);
        },
        pooling_setup(in0, out0), channels_of);
    return;
  }
  const Q8Range r = q8_range(v.node, v.out());
  b.add_xnn(
      "max pooling s8",
      [=](const Shape* s, ops::Operator& op) { return ops::create_max_pooling_s8(pp, channels_of(s), r.lo, r.hi, op); },
      pooling_setup(in0, out0), channels_of);
}

// ---- argmax pooling: values and their window indices (widened to int64 when the output is) --------------

Refusal check_argmax_pooling(const NodeView& v) {
  const Value& index = v.out(1);
  if (!is_f32(v.in(0)) || !is_f32(v.out(0)) || datatype_size(index.dtype) != 4 || is_f32(index)) return refuse();
  return kSupported;
}

void build_argmax_pooling(StepBuilder& b) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id(0), index_out = v.out_id(1);
  b.keep(in0);
  const ops::PoolParams pp = pool_params(v.node.window);
  const XnnStep::Key channels_of = channels_key(in0);
  b.add_xnn(
      "argmax pooling f32",
      [=](const Shape* s, ops::Operator& op) { return ops::create_argmax_pooling_f32(pp, channels_of(s), op); },
      [=](ops::Operator& op, const RunContext& c) {
        const Shape& s = c.shapes[in0];
        return ops::setup_argmax_pooling_f32(op, s[0], s[1], s[2], static_cast<const float*>(c.data[in0]),
                                             static_cast<float*>(c.data[out0]),
                                             static_cast<uint32_t*>(c.data[index_out]), c.pool);
      },
      channels_of);
}

// ---- bilinear resize ------------------------------------------------------------------------------------

Refusal check_resize(const NodeView& v) { return is_f32(v.in(0)) && is_f32(v.out()) ? kSupported : refuse(); }

void build_resize(StepBuilder& b) {
  const NodeView& v = b.view;
  const uint32_t in0 = v.in_id(0), out0 = v.out_id();
  b.keep(in0);
  const uint32_t flags = v.node.flags;
  const size_t new_h = v.node.new_height, new_w = v.node.new_width;
  const XnnStep::Key channels_of = channels_key(in0);
  b.add_xnn(
      "resize bilinear f32",
      [=](const Shape* s, ops::Operator& op) {
        return ops::create_resize_bilinear_f32(channels_of(s), new_h, new_w, flags, op);
      },
      [=](ops::Operator& op, const RunContext& c) {
        const Shape& s = c.shapes[in0];
        return ops::setup_resize_bilinear_f32(op, s[0], s[1], s[2], static_cast<const float*>(c.data[in0]),
                                              static_cast<float*>(c.data[out0]), c.pool);
      },
      channels_of);
}

}  // namespace etnp::xnn
