// The XNNPACK operator calls of the delegate, for either operator API (xnn_ops.h). CMake defines
// ETNP_XNNPACK_RESHAPE_API=1 where the installed xnnpack.h has the 2024 create/reshape/setup API.
#include "backends/xnnpack/xnn_ops.h"

#include <cpuinfo.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

namespace etnp::xnn::ops {

namespace {

#if ETNP_XNNPACK_RESHAPE_API
constexpr bool kReshapeApi = true;
#else
constexpr bool kReshapeApi = false;
#endif

}  // namespace

bool reshape_api() { return kReshapeApi; }

bool has_unary_f32(UnaryOp op) { return kReshapeApi || op <= UnaryOp::ELU; }
bool has_qd8_fully_connected() { return kReshapeApi; }
bool has_batch_matmul_f32() { return kReshapeApi; }

bool qc4w_fully_connected_is_sound() {
#if ETNP_XNNPACK_RESHAPE_API
  static const bool amx = cpuinfo_initialize() && cpuinfo_has_x86_amx_int8();
  return !amx;
#else
  return true;  // the 2022 library has no such operator (and its cpuinfo no AMX query)
#endif
}

xnn_status initialize() { return xnn_initialize(nullptr); }

const char* status_name(xnn_status s) {
  switch (s) {
    case xnn_status_success: return "success";
    case xnn_status_uninitialized: return "uninitialized";
    case xnn_status_invalid_parameter: return "invalid parameter";
    case xnn_status_invalid_state: return "invalid state";
    case xnn_status_unsupported_parameter: return "unsupported parameter";
    case xnn_status_unsupported_hardware: return "unsupported hardware";
    case xnn_status_out_of_memory: return "out of memory";
    default: return "unknown status";  // the 2024 library adds reallocation_required and deprecated
  }
}

// ---- Operator ----------------------------------------------------------------------------------------------

Operator::~Operator() { reset(); }

Operator::Operator(Operator&& other) noexcept { *this = std::move(other); }

Operator& Operator::operator=(Operator&& other) noexcept {
  if (this != &other) {
    reset();
    kind_ = other.kind_;
    op_ = std::exchange(other.op_, nullptr);
    clamp_ = std::exchange(other.clamp_, nullptr);
    variant_ = other.variant_;
    channels_ = other.channels_;
    out_h_ = other.out_h_;
    out_w_ = other.out_w_;
    constant_ = std::move(other.constant_);
    key_ = other.key_;
    key_pool_ = other.key_pool_;
    key_threads_ = other.key_threads_;
    reshaped_ = std::exchange(other.reshaped_, false);
    workspace_ = std::move(other.workspace_);
    workspace_bytes_ = std::exchange(other.workspace_bytes_, 0);
    workspace_alignment_ = other.workspace_alignment_;
    other.kind_ = Kind::None;
  }
  return *this;
}

void Operator::reset() {
  if (op_ != nullptr) xnn_delete_operator(op_);
  if (clamp_ != nullptr) xnn_delete_operator(clamp_);
  op_ = clamp_ = nullptr;
  kind_ = Kind::None;
  reshaped_ = false;
}

bool Operator::needs_reshape(const std::array<size_t, 16>& key, pthreadpool_t pool) {
  // The thread count too: a pool recreated by set_num_threads may reuse a freed one's address, and a reshape
  // sizes per-thread state for the threads it saw.
  const size_t threads = pool == nullptr ? 1 : pthreadpool_get_threads_count(pool);
  if (reshaped_ && key == key_ && pool == key_pool_ && threads == key_threads_) return false;
  key_ = key;
  key_pool_ = pool;
  key_threads_ = threads;
  reshaped_ = true;
  return true;
}

void Operator::size_workspace(size_t bytes, size_t alignment) {
  workspace_bytes_ = bytes;
  workspace_alignment_ = std::max<size_t>(alignment, 1);
  if (workspace_.size() < bytes + workspace_alignment_) workspace_.assign(bytes + workspace_alignment_, 0);
}

void* Operator::workspace() {
  if (workspace_bytes_ == 0) return nullptr;
  auto address = reinterpret_cast<uintptr_t>(workspace_.data());
  address = (address + workspace_alignment_ - 1) / workspace_alignment_ * workspace_alignment_;
  return reinterpret_cast<void*>(address);
}

xnn_status Operator::run(pthreadpool_t pool) {
  xnn_status s = xnn_run_operator(op_, pool);
  if (s == xnn_status_success && clamp_ != nullptr) s = xnn_run_operator(clamp_, pool);
  return s;
}

namespace {

/// Keeps a freshly created operator only when creation succeeded. `op` is read here, after the create call
/// that fills it (an argument taken by value might be read before the call that is another argument).
xnn_status adopt(xnn_status s, const xnn_operator_t& op, Operator::Kind kind, Operator& out) {
  out.reset();
  if (s != xnn_status_success) {
    if (op != nullptr) xnn_delete_operator(op);
    return s;
  }
  out.op_ = op;
  out.kind_ = kind;
  return s;
}

#if ETNP_XNNPACK_RESHAPE_API

const xnn_quantization_params kIdentityQuant{0, 1.0f};

xnn_quantization_params quant(QParams q) { return xnn_quantization_params{q.zero_point, q.scale}; }

bool unbounded(float lo, float hi) { return std::isinf(lo) && lo < 0 && std::isinf(hi) && hi > 0; }

/// Element count of the numpy-style broadcast of two shapes.
size_t broadcast_numel(size_t rank_a, const size_t* a, size_t rank_b, const size_t* b) {
  const size_t rank = std::max(rank_a, rank_b);
  size_t n = 1;
  for (size_t i = 0; i < rank; ++i) {
    const size_t da = i < rank_a ? a[rank_a - 1 - i] : 1;
    const size_t db = i < rank_b ? b[rank_b - 1 - i] : 1;
    n *= da == 1 ? db : da;
  }
  return n;
}

/// The newer library fuses no clamp into element-wise operators and reductions: a clamp runs over the
/// output, in place. With scale 1 and zero point 0 on both sides an int8 clamp clamps the stored codes.
xnn_status add_output_clamp(Operator& out, bool int8, float lo, float hi) {
  if (!int8 && unbounded(lo, hi)) return xnn_status_success;
  if (int8 && lo <= -128.0f && hi >= 127.0f) return xnn_status_success;
  xnn_unary_params params{};
  params.clamp.min = lo;
  params.clamp.max = hi;
  const xnn_datatype type = int8 ? xnn_datatype_qint8 : xnn_datatype_fp32;
  xnn_operator_t clamp = nullptr;
  const xnn_status s = xnn_create_unary_elementwise_nc(xnn_unary_clamp, type, type, &params,
                                                       int8 ? &kIdentityQuant : nullptr,
                                                       int8 ? &kIdentityQuant : nullptr, 0, &clamp);
  if (s != xnn_status_success) {
    if (clamp != nullptr) xnn_delete_operator(clamp);
    out.reset();
    return s;
  }
  out.clamp_ = clamp;
  return s;
}

/// Reshapes and sets up the output clamp over `count` elements at `data`.
xnn_status setup_output_clamp(Operator& op, bool reshape, size_t count, void* data, pthreadpool_t pool) {
  if (op.clamp_ == nullptr) return xnn_status_success;
  if (reshape) {
    const xnn_status s = xnn_reshape_unary_elementwise_nc(op.clamp_, count, 1, 1, 1, pool);
    if (s != xnn_status_success) return s;
  }
  return xnn_setup_unary_elementwise_nc(op.clamp_, data, data);
}

xnn_binary_operator binary_op(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return xnn_binary_add;
    case BinaryOp::Subtract: return xnn_binary_subtract;
    case BinaryOp::Multiply: return xnn_binary_multiply;
    case BinaryOp::Divide: return xnn_binary_divide;
    case BinaryOp::Minimum: return xnn_binary_minimum;
    case BinaryOp::Maximum: return xnn_binary_maximum;
  }
  return xnn_binary_invalid;
}

xnn_unary_operator unary_op(UnaryOp op) {
  switch (op) {
    case UnaryOp::Sigmoid: return xnn_unary_sigmoid;
    case UnaryOp::Floor: return xnn_unary_floor;
    case UnaryOp::Ceiling: return xnn_unary_ceiling;
    case UnaryOp::SquareRoot: return xnn_unary_square_root;
    case UnaryOp::Square: return xnn_unary_square;
    case UnaryOp::Negate: return xnn_unary_negate;
    case UnaryOp::Abs: return xnn_unary_abs;
    case UnaryOp::Hardswish: return xnn_unary_hardswish;
    case UnaryOp::LeakyReLU: return xnn_unary_leaky_relu;
    case UnaryOp::ELU: return xnn_unary_elu;
    case UnaryOp::Tanh: return xnn_unary_tanh;
    case UnaryOp::Exp: return xnn_unary_exp;
    case UnaryOp::Log: return xnn_unary_log;
    case UnaryOp::Gelu: return xnn_unary_gelu;
    case UnaryOp::ReciprocalSquareRoot: return xnn_unary_reciprocal_square_root;
    case UnaryOp::Sine: return xnn_unary_sine;
    case UnaryOp::Cosine: return xnn_unary_cosine;
  }
  return xnn_unary_invalid;
}

xnn_status create_unary(xnn_unary_operator type, xnn_datatype in, xnn_datatype o, const xnn_unary_params* params,
                        const xnn_quantization_params* in_q, const xnn_quantization_params* out_q, Operator& out) {
  xnn_operator_t op = nullptr;
  return adopt(xnn_create_unary_elementwise_nc(type, in, o, params, in_q, out_q, 0, &op), op, Operator::Kind::Unary,
               out);
}

#else  // the 2022 API

using UnaryCreate = xnn_status (*)(size_t, size_t, size_t, uint32_t, xnn_operator_t*);

UnaryCreate unary_create(UnaryOp op) {
  switch (op) {
    case UnaryOp::Sigmoid: return xnn_create_sigmoid_nc_f32;
    case UnaryOp::Floor: return xnn_create_floor_nc_f32;
    case UnaryOp::Ceiling: return xnn_create_ceiling_nc_f32;
    case UnaryOp::SquareRoot: return xnn_create_square_root_nc_f32;
    case UnaryOp::Square: return xnn_create_square_nc_f32;
    case UnaryOp::Negate: return xnn_create_negate_nc_f32;
    case UnaryOp::Abs: return xnn_create_abs_nc_f32;
    case UnaryOp::Hardswish: return xnn_create_hardswish_nc_f32;
    default: return nullptr;
  }
}

#endif

}  // namespace

// ---- element-wise ------------------------------------------------------------------------------------------

xnn_status create_binary_f32(BinaryOp op, float out_min, float out_max, Operator& out) {
  xnn_operator_t o = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_status s = adopt(xnn_create_binary_elementwise_nd(binary_op(op), xnn_datatype_fp32, nullptr, nullptr,
                                                              nullptr, 0, &o),
                             o, Operator::Kind::Binary, out);
  return s == xnn_status_success ? add_output_clamp(out, false, out_min, out_max) : s;
#else
  xnn_status s = xnn_status_invalid_parameter;
  switch (op) {
    case BinaryOp::Add: s = xnn_create_add_nd_f32(out_min, out_max, 0, &o); break;
    case BinaryOp::Subtract: s = xnn_create_subtract_nd_f32(out_min, out_max, 0, &o); break;
    case BinaryOp::Multiply: s = xnn_create_multiply_nd_f32(out_min, out_max, 0, &o); break;
    case BinaryOp::Divide: s = xnn_create_divide_nd_f32(out_min, out_max, 0, &o); break;
    case BinaryOp::Minimum: s = xnn_create_minimum_nd_f32(0, &o); break;
    case BinaryOp::Maximum: s = xnn_create_maximum_nd_f32(0, &o); break;
  }
  s = adopt(s, o, Operator::Kind::Binary, out);
  if (s == xnn_status_success) out.variant_ = static_cast<uint8_t>(op);  // the setup function to call
  return s;
#endif
}

xnn_status create_binary_qs8(BinaryOp op, QParams a, QParams b, QParams o, int8_t lo, int8_t hi, Operator& out) {
  if (op != BinaryOp::Add && op != BinaryOp::Subtract && op != BinaryOp::Multiply) {
    return xnn_status_unsupported_parameter;
  }
  xnn_operator_t x = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_quantization_params qa = quant(a), qb = quant(b), qo = quant(o);
  const xnn_status s = adopt(xnn_create_binary_elementwise_nd(binary_op(op), xnn_datatype_qint8, &qa, &qb, &qo, 0, &x),
                             x, Operator::Kind::Binary, out);
  return s == xnn_status_success ? add_output_clamp(out, true, lo, hi) : s;
#else
  xnn_status s;
  switch (op) {
    case BinaryOp::Add:
      s = xnn_create_add_nd_qs8(a.zero_point, a.scale, b.zero_point, b.scale, o.zero_point, o.scale, lo, hi, 0, &x);
      break;
    case BinaryOp::Subtract:
      s = xnn_create_subtract_nd_qs8(a.zero_point, a.scale, b.zero_point, b.scale, o.zero_point, o.scale, lo, hi, 0,
                                     &x);
      break;
    default:
      s = xnn_create_multiply_nd_qs8(a.zero_point, a.scale, b.zero_point, b.scale, o.zero_point, o.scale, lo, hi, 0,
                                     &x);
      break;
  }
  s = adopt(s, x, Operator::Kind::Binary, out);
  if (s == xnn_status_success) out.variant_ = static_cast<uint8_t>(16 + static_cast<int>(op));  // qs8: 16 + op
  return s;
#endif
}

xnn_status setup_binary(Operator& op, size_t rank_a, const size_t* shape_a, size_t rank_b, const size_t* shape_b,
                        const void* a, const void* b, void* out, pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::Binary) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  std::array<size_t, 16> key{};
  if (rank_a > 7 || rank_b > 7) return xnn_status_unsupported_parameter;
  key[0] = rank_a;
  key[8] = rank_b;
  std::copy(shape_a, shape_a + rank_a, key.begin() + 1);
  std::copy(shape_b, shape_b + rank_b, key.begin() + 9);
  const bool reshape = op.needs_reshape(key, pool);
  if (reshape) {
    const xnn_status s = xnn_reshape_binary_elementwise_nd(op.op_, rank_a, shape_a, rank_b, shape_b, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
  }
  xnn_status s = xnn_setup_binary_elementwise_nd(op.op_, a, b, out);
  if (s == xnn_status_success) {
    s = setup_output_clamp(op, reshape, broadcast_numel(rank_a, shape_a, rank_b, shape_b), out, pool);
  }
  if (s != xnn_status_success) op.reshaped_ = false;
  return s;
#else
  const auto* fa = static_cast<const float*>(a);
  const auto* fb = static_cast<const float*>(b);
  auto* fo = static_cast<float*>(out);
  const auto* qa = static_cast<const int8_t*>(a);
  const auto* qb = static_cast<const int8_t*>(b);
  auto* qo = static_cast<int8_t*>(out);
  xnn_operator_t o = op.op_;
  const size_t ra = rank_a, rb = rank_b;
  switch (op.variant_) {
    case size_t(BinaryOp::Add): return xnn_setup_add_nd_f32(o, ra, shape_a, rb, shape_b, fa, fb, fo, pool);
    case size_t(BinaryOp::Subtract): return xnn_setup_subtract_nd_f32(o, ra, shape_a, rb, shape_b, fa, fb, fo, pool);
    case size_t(BinaryOp::Multiply): return xnn_setup_multiply_nd_f32(o, ra, shape_a, rb, shape_b, fa, fb, fo, pool);
    case size_t(BinaryOp::Divide): return xnn_setup_divide_nd_f32(o, ra, shape_a, rb, shape_b, fa, fb, fo, pool);
    case size_t(BinaryOp::Minimum): return xnn_setup_minimum_nd_f32(o, ra, shape_a, rb, shape_b, fa, fb, fo, pool);
    case size_t(BinaryOp::Maximum): return xnn_setup_maximum_nd_f32(o, ra, shape_a, rb, shape_b, fa, fb, fo, pool);
    case 16 + size_t(BinaryOp::Add): return xnn_setup_add_nd_qs8(o, ra, shape_a, rb, shape_b, qa, qb, qo, pool);
    case 16 + size_t(BinaryOp::Subtract):
      return xnn_setup_subtract_nd_qs8(o, ra, shape_a, rb, shape_b, qa, qb, qo, pool);
    case 16 + size_t(BinaryOp::Multiply):
      return xnn_setup_multiply_nd_qs8(o, ra, shape_a, rb, shape_b, qa, qb, qo, pool);
    default: return xnn_status_invalid_state;
  }
#endif
}

xnn_status create_prelu_f32(size_t channels, const float* slope, Operator& out) {
  xnn_operator_t o = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  std::vector<float> copy(slope, slope + channels);
  const xnn_status s = adopt(xnn_create_binary_elementwise_nd(xnn_binary_prelu, xnn_datatype_fp32, nullptr, nullptr,
                                                              nullptr, 0, &o),
                             o, Operator::Kind::PReLUF32, out);
  if (s == xnn_status_success) {
    copy.resize(channels + kExtraBytes / sizeof(float) + 1);  // the library may over-read its inputs
    out.constant_ = std::move(copy);
  }
#else
  const xnn_status s = adopt(xnn_create_prelu_nc_f32(channels, channels, channels, slope, 0, &o), o,
                             Operator::Kind::PReLUF32, out);
#endif
  if (s == xnn_status_success) out.channels_ = channels;
  return s;
}

xnn_status setup_prelu_f32(Operator& op, size_t rows, const float* in, float* out, pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::PReLUF32) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  const size_t x_shape[2] = {rows, op.channels_};
  const size_t slope_shape[1] = {op.channels_};
  if (op.needs_reshape({rows}, pool)) {
    const xnn_status s = xnn_reshape_binary_elementwise_nd(op.op_, 2, x_shape, 1, slope_shape, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
  }
  return xnn_setup_binary_elementwise_nd(op.op_, in, op.constant_.data(), out);
#else
  return xnn_setup_prelu_nc_f32(op.op_, rows, in, out, pool);
#endif
}

xnn_status create_clamp_f32(float out_min, float out_max, Operator& out) {
#if ETNP_XNNPACK_RESHAPE_API
  xnn_unary_params params{};
  params.clamp.min = out_min;
  params.clamp.max = out_max;
  const xnn_status s = create_unary(xnn_unary_clamp, xnn_datatype_fp32, xnn_datatype_fp32, &params, nullptr,
                                    nullptr, out);
#else
  xnn_operator_t o = nullptr;
  const xnn_status s =
      adopt(xnn_create_clamp_nc_f32(1, 1, 1, out_min, out_max, 0, &o), o, Operator::Kind::Unary, out);
#endif
  if (s == xnn_status_success) out.variant_ = 0;  // f32 clamp
  return s;
}

xnn_status create_clamp_s8(int8_t lo, int8_t hi, Operator& out) {
#if ETNP_XNNPACK_RESHAPE_API
  xnn_unary_params params{};
  params.clamp.min = lo;
  params.clamp.max = hi;
  const xnn_status s = create_unary(xnn_unary_clamp, xnn_datatype_qint8, xnn_datatype_qint8, &params,
                                    &kIdentityQuant, &kIdentityQuant, out);
#else
  xnn_operator_t o = nullptr;
  const xnn_status s = adopt(xnn_create_clamp_nc_s8(1, 1, 1, lo, hi, 0, &o), o, Operator::Kind::Unary, out);
#endif
  if (s == xnn_status_success) out.variant_ = 1;  // s8 clamp
  return s;
}

xnn_status create_unary_f32(UnaryOp op, float scalar, Operator& out) {
#if ETNP_XNNPACK_RESHAPE_API
  xnn_unary_params params{};
  if (op == UnaryOp::LeakyReLU) params.leaky_relu.negative_slope = scalar;
  if (op == UnaryOp::ELU) params.elu.alpha = scalar;
  const xnn_status s =
      create_unary(unary_op(op), xnn_datatype_fp32, xnn_datatype_fp32, &params, nullptr, nullptr, out);
#else
  if (!has_unary_f32(op)) return xnn_status_unsupported_parameter;
  xnn_operator_t o = nullptr;
  xnn_status s;
  if (op == UnaryOp::LeakyReLU) {
    s = xnn_create_leaky_relu_nc_f32(1, 1, 1, scalar, 0, &o);
  } else if (op == UnaryOp::ELU) {
    s = xnn_create_elu_nc_f32(1, 1, 1, scalar, 0, &o);
  } else {
    s = unary_create(op)(1, 1, 1, 0, &o);
  }
  s = adopt(s, o, Operator::Kind::Unary, out);
#endif
  if (s == xnn_status_success) out.variant_ = static_cast<uint8_t>(8 + static_cast<int>(op));  // f32 unary: 8 + op
  return s;
}

xnn_status create_convert_f32_qs8(QParams o, Operator& out) {
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_quantization_params qo = quant(o);
  const xnn_status s = create_unary(xnn_unary_convert, xnn_datatype_fp32, xnn_datatype_qint8, nullptr, nullptr, &qo,
                                    out);
#else
  xnn_operator_t x = nullptr;
  const xnn_status s = adopt(xnn_create_convert_nc_f32_qs8(1, 1, 1, o.scale, o.zero_point, -128, 127, 0, &x), x,
                             Operator::Kind::Unary, out);
#endif
  if (s == xnn_status_success) out.variant_ = 2;  // f32 -> qs8
  return s;
}

xnn_status create_convert_qs8_f32(QParams i, Operator& out) {
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_quantization_params qi = quant(i);
  const xnn_status s = create_unary(xnn_unary_convert, xnn_datatype_qint8, xnn_datatype_fp32, nullptr, &qi, nullptr,
                                    out);
#else
  xnn_operator_t x = nullptr;
  const xnn_status s =
      adopt(xnn_create_convert_nc_qs8_f32(1, 1, 1, i.scale, i.zero_point, 0, &x), x, Operator::Kind::Unary, out);
#endif
  if (s == xnn_status_success) out.variant_ = 3;  // qs8 -> f32
  return s;
}

xnn_status setup_unary(Operator& op, size_t count, const void* in, void* out, pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::Unary) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  if (op.needs_reshape({count}, pool)) {
    const xnn_status s = xnn_reshape_unary_elementwise_nc(op.op_, count, 1, 1, 1, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
  }
  return xnn_setup_unary_elementwise_nc(op.op_, in, out);
#else
  xnn_operator_t o = op.op_;
  const auto* f = static_cast<const float*>(in);
  switch (op.variant_) {
    case 0: return xnn_setup_clamp_nc_f32(o, count, f, static_cast<float*>(out), pool);
    case 1: return xnn_setup_clamp_nc_s8(o, count, static_cast<const int8_t*>(in), static_cast<int8_t*>(out), pool);
    case 2: return xnn_setup_convert_nc_f32_qs8(o, count, f, static_cast<int8_t*>(out), pool);
    case 3:
      return xnn_setup_convert_nc_qs8_f32(o, count, static_cast<const int8_t*>(in), static_cast<float*>(out), pool);
    default: break;
  }
  auto* y = static_cast<float*>(out);
  switch (static_cast<UnaryOp>(op.variant_ - 8)) {
    case UnaryOp::Sigmoid: return xnn_setup_sigmoid_nc_f32(o, count, f, y, pool);
    case UnaryOp::Floor: return xnn_setup_floor_nc_f32(o, count, f, y, pool);
    case UnaryOp::Ceiling: return xnn_setup_ceiling_nc_f32(o, count, f, y, pool);
    case UnaryOp::SquareRoot: return xnn_setup_square_root_nc_f32(o, count, f, y, pool);
    case UnaryOp::Square: return xnn_setup_square_nc_f32(o, count, f, y, pool);
    case UnaryOp::Negate: return xnn_setup_negate_nc_f32(o, count, f, y, pool);
    case UnaryOp::Abs: return xnn_setup_abs_nc_f32(o, count, f, y, pool);
    case UnaryOp::Hardswish: return xnn_setup_hardswish_nc_f32(o, count, f, y, pool);
    case UnaryOp::LeakyReLU: return xnn_setup_leaky_relu_nc_f32(o, count, f, y, pool);
    case UnaryOp::ELU: return xnn_setup_elu_nc_f32(o, count, f, y, pool);
    default: break;  // never created with this library
  }
  return xnn_status_invalid_state;
#endif
}

xnn_status create_softmax_f32(size_t channels, Operator& out) {
  xnn_operator_t x = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_status s = adopt(xnn_create_softmax_nc_f32(0, &x), x, Operator::Kind::SoftmaxF32, out);
#else
  const xnn_status s =
      adopt(xnn_create_softmax_nc_f32(channels, channels, channels, 0, &x), x, Operator::Kind::SoftmaxF32, out);
#endif
  if (s == xnn_status_success) out.channels_ = channels;
  return s;
}

xnn_status setup_softmax_f32(Operator& op, size_t rows, const float* in, float* out, pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::SoftmaxF32) return xnn_status_invalid_state;
  const size_t c = op.channels_;
#if ETNP_XNNPACK_RESHAPE_API
  if (op.needs_reshape({rows}, pool)) {
    const xnn_status s = xnn_reshape_softmax_nc_f32(op.op_, c, c, c, rows, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
  }
  return xnn_setup_softmax_nc_f32(op.op_, in, out);
#else
  (void)c;
  return xnn_setup_softmax_nc_f32(op.op_, rows, in, out, pool);
#endif
}

// ---- matrix products and convolutions ----------------------------------------------------------------------

#if ETNP_XNNPACK_RESHAPE_API
#define ETNP_XNN_CACHES nullptr, nullptr,  // code cache, weights cache
#else
#define ETNP_XNN_CACHES
#endif

xnn_status create_fully_connected_qs8(size_t k, size_t units, QParams in, float kernel_scale, const int8_t* kernel,
                                      const int32_t* bias, QParams o, int8_t lo, int8_t hi, bool transposed,
                                      Operator& out) {
  xnn_operator_t x = nullptr;
  const uint32_t flags = transposed ? XNN_FLAG_TRANSPOSE_WEIGHTS : 0;
  const xnn_status s =
      xnn_create_fully_connected_nc_qs8(k, units, k, units, in.zero_point, in.scale, kernel_scale, kernel, bias,
                                        o.zero_point, o.scale, lo, hi, flags, ETNP_XNN_CACHES & x);
  return adopt(s, x, Operator::Kind::FullyConnectedQS8, out);
}

xnn_status setup_fully_connected_qs8(Operator& op, size_t rows, const int8_t* in, int8_t* out, pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::FullyConnectedQS8) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  if (op.needs_reshape({rows}, pool)) {
    const xnn_status s = xnn_reshape_fully_connected_nc_qs8(op.op_, rows, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
  }
  return xnn_setup_fully_connected_nc_qs8(op.op_, in, out);
#else
  return xnn_setup_fully_connected_nc_qs8(op.op_, rows, in, out, pool);
#endif
}

xnn_status create_fully_connected_f32(size_t k, size_t units, const float* kernel, const float* bias, float out_min,
                                      float out_max, bool transposed, Operator& out) {
  xnn_operator_t x = nullptr;
  const uint32_t flags = transposed ? XNN_FLAG_TRANSPOSE_WEIGHTS : 0;
  const xnn_status s = xnn_create_fully_connected_nc_f32(k, units, k, units, kernel, bias, out_min, out_max, flags,
                                                         ETNP_XNN_CACHES & x);
  return adopt(s, x, Operator::Kind::FullyConnectedF32, out);
}

xnn_status setup_fully_connected_f32(Operator& op, size_t rows, const float* in, float* out, pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::FullyConnectedF32) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  if (op.needs_reshape({rows}, pool)) {
    const xnn_status s = xnn_reshape_fully_connected_nc_f32(op.op_, rows, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
  }
  return xnn_setup_fully_connected_nc_f32(op.op_, in, out);
#else
  return xnn_setup_fully_connected_nc_f32(op.op_, rows, in, out, pool);
#endif
}

#if ETNP_XNNPACK_RESHAPE_API
static_assert(kExtraQuantizationParams >= XNN_EXTRA_QUANTIZATION_PARAMS);
static_assert(sizeof(xnn_quantization_params) == 8 && offsetof(xnn_quantization_params, zero_point) == 0 &&
              offsetof(xnn_quantization_params, scale) == 4);
#endif

xnn_status create_fully_connected_qd8(size_t k, size_t units, const QD8Kernel& kernel, const float* bias,
                                      float out_min, float out_max, Operator& out) {
#if ETNP_XNNPACK_RESHAPE_API
  xnn_operator_t x = nullptr;
  xnn_status s = xnn_status_invalid_parameter;
  switch (kernel.type) {
    case QD8Kernel::Type::QC8W:
      s = xnn_create_fully_connected_nc_qd8_f32_qc8w(k, units, k, units, kernel.channel_scales,
                                                     static_cast<const int8_t*>(kernel.data), bias, out_min, out_max,
                                                     0, ETNP_XNN_CACHES & x);
      break;
    case QD8Kernel::Type::QC4W:
      s = xnn_create_fully_connected_nc_qd8_f32_qc4w(k, units, k, units, 8, kernel.channel_scales, kernel.data, bias,
                                                     out_min, out_max, 0, ETNP_XNN_CACHES & x);
      break;
    case QD8Kernel::Type::QB4W:
      s = xnn_create_fully_connected_nc_qd8_f32_qb4w(k, units, k, units, kernel.block_size, 8, kernel.block_scales,
                                                     kernel.data, bias, out_min, out_max, 0, ETNP_XNN_CACHES & x);
      break;
  }
  s = adopt(s, x, Operator::Kind::FullyConnectedQD8, out);
  if (s == xnn_status_success) out.variant_ = static_cast<uint8_t>(kernel.type);
  return s;
#else
  (void)k, (void)units, (void)kernel, (void)bias, (void)out_min, (void)out_max, (void)out;
  return xnn_status_unsupported_parameter;
#endif
}

xnn_status setup_fully_connected_qd8(Operator& op, size_t rows, const int8_t* in, const void* row_params, float* out,
                                     pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::FullyConnectedQD8) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  const auto type = static_cast<QD8Kernel::Type>(op.variant_);
  const auto* params = static_cast<const xnn_quantization_params*>(row_params);
  if (op.needs_reshape({rows}, pool)) {
    xnn_status s;
    switch (type) {
      case QD8Kernel::Type::QC8W: s = xnn_reshape_fully_connected_nc_qd8_f32_qc8w(op.op_, rows, pool); break;
      case QD8Kernel::Type::QC4W: s = xnn_reshape_fully_connected_nc_qd8_f32_qc4w(op.op_, rows, pool); break;
      default: s = xnn_reshape_fully_connected_nc_qd8_f32_qb4w(op.op_, rows, pool); break;
    }
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
  }
  switch (type) {
    case QD8Kernel::Type::QC8W: return xnn_setup_fully_connected_nc_qd8_f32_qc8w(op.op_, in, out, params);
    case QD8Kernel::Type::QC4W: return xnn_setup_fully_connected_nc_qd8_f32_qc4w(op.op_, in, out, params);
    default: return xnn_setup_fully_connected_nc_qd8_f32_qb4w(op.op_, in, out, params);
  }
#else
  (void)rows, (void)in, (void)row_params, (void)out, (void)pool;
  return xnn_status_invalid_state;
#endif
}

xnn_status create_batch_matmul_f32(bool transpose_b, Operator& out) {
#if ETNP_XNNPACK_RESHAPE_API
  xnn_operator_t x = nullptr;
  return adopt(xnn_create_batch_matrix_multiply_nc_f32(transpose_b ? XNN_FLAG_TRANSPOSE_B : 0, &x), x,
               Operator::Kind::BatchMatmulF32, out);
#else
  (void)transpose_b, (void)out;
  return xnn_status_unsupported_parameter;
#endif
}

xnn_status setup_batch_matmul_f32(Operator& op, size_t batch_rank, const size_t* batch_a, const size_t* batch_b,
                                  size_t m, size_t k, size_t n, const float* a, const float* b, float* out,
                                  pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::BatchMatmulF32) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  if (batch_rank > 6) return xnn_status_unsupported_parameter;
  std::array<size_t, 16> key{};
  key[0] = m, key[1] = k, key[2] = n, key[3] = batch_rank;
  std::copy(batch_a, batch_a + batch_rank, key.begin() + 4);
  std::copy(batch_b, batch_b + batch_rank, key.begin() + 10);
  if (op.needs_reshape(key, pool)) {
    size_t ws_size = 0, ws_align = 1;
    const xnn_status s = xnn_reshape_batch_matrix_multiply_nc_f32(op.op_, batch_rank, batch_a, batch_b, m, k, n,
                                                                  &ws_size, &ws_align, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
    op.size_workspace(ws_size, ws_align);
  }
  return xnn_setup_batch_matrix_multiply_nc_f32(op.op_, op.workspace(), a, b, out);
#else
  (void)batch_rank, (void)batch_a, (void)batch_b, (void)m, (void)k, (void)n, (void)a, (void)b, (void)out, (void)pool;
  return xnn_status_invalid_state;
#endif
}

#define ETNP_XNN_CONV_GEOMETRY(p)                                                                                \
  p.pad_top, p.pad_right, p.pad_bottom, p.pad_left, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.dilation_h, \
      p.dilation_w, p.groups, p.group_input_channels, p.group_output_channels,                                   \
      p.groups * p.group_input_channels, p.groups * p.group_output_channels

xnn_status create_convolution_f32(const ConvParams& p, const float* kernel, const float* bias, float out_min,
                                  float out_max, Operator& out) {
  xnn_operator_t x = nullptr;
  const uint32_t flags = p.depthwise ? XNN_FLAG_DEPTHWISE_CONVOLUTION : 0;
  const xnn_status s = xnn_create_convolution2d_nhwc_f32(ETNP_XNN_CONV_GEOMETRY(p), kernel, bias, out_min, out_max,
                                                         flags, ETNP_XNN_CACHES & x);
  return adopt(s, x, Operator::Kind::ConvF32, out);
}

xnn_status create_convolution_qs8(const ConvParams& p, QParams in, float kernel_scale, const int8_t* kernel,
                                  const int32_t* bias, QParams o, int8_t lo, int8_t hi, Operator& out) {
  xnn_operator_t x = nullptr;
  const uint32_t flags = p.depthwise ? XNN_FLAG_DEPTHWISE_CONVOLUTION : 0;
  const xnn_status s =
      xnn_create_convolution2d_nhwc_qs8(ETNP_XNN_CONV_GEOMETRY(p), in.zero_point, in.scale, kernel_scale, kernel, bias,
                                        o.zero_point, o.scale, lo, hi, flags, ETNP_XNN_CACHES & x);
  return adopt(s, x, Operator::Kind::ConvQS8, out);
}

xnn_status create_convolution_qc8(const ConvParams& p, QParams in, const float* kernel_scales, const int8_t* kernel,
                                  const int32_t* bias, QParams o, int8_t lo, int8_t hi, Operator& out) {
  xnn_operator_t x = nullptr;
  const uint32_t flags = p.depthwise ? XNN_FLAG_DEPTHWISE_CONVOLUTION : 0;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_status s = xnn_create_convolution2d_nhwc_qs8_qc8w(ETNP_XNN_CONV_GEOMETRY(p), in.zero_point, in.scale,
                                                              kernel_scales, kernel, bias, o.zero_point, o.scale, lo,
                                                              hi, flags, ETNP_XNN_CACHES & x);
#else
  const xnn_status s = xnn_create_convolution2d_nhwc_qc8(ETNP_XNN_CONV_GEOMETRY(p), in.zero_point, in.scale,
                                                         kernel_scales, kernel, bias, o.zero_point, o.scale, lo, hi,
                                                         flags, &x);
#endif
  return adopt(s, x, Operator::Kind::ConvQC8, out);
}

xnn_status setup_convolution(Operator& op, size_t batch, size_t h, size_t w, const void* in, void* out,
                             pthreadpool_t pool) {
  const auto* f = static_cast<const float*>(in);
  const auto* q = static_cast<const int8_t*>(in);
  xnn_operator_t o = op.op_;
#if ETNP_XNNPACK_RESHAPE_API
  size_t ws_size = 0, ws_align = 1, oh = 0, ow = 0;
  const bool reshape = op.needs_reshape({batch, h, w}, pool);
  xnn_status s = xnn_status_success;
  switch (op.kind_) {
    case Operator::Kind::ConvF32:
      if (reshape) s = xnn_reshape_convolution2d_nhwc_f32(o, batch, h, w, &ws_size, &ws_align, &oh, &ow, pool);
      break;
    case Operator::Kind::ConvQS8:
      if (reshape) s = xnn_reshape_convolution2d_nhwc_qs8(o, batch, h, w, &ws_size, &ws_align, &oh, &ow, pool);
      break;
    case Operator::Kind::ConvQC8:
      if (reshape) s = xnn_reshape_convolution2d_nhwc_qs8_qc8w(o, batch, h, w, &ws_size, &ws_align, &oh, &ow, pool);
      break;
    default: return xnn_status_invalid_state;
  }
  if (s != xnn_status_success) {
    op.reshaped_ = false;
    return s;
  }
  if (reshape) op.size_workspace(ws_size, ws_align);  // kept for the setups without a reshape
  void* ws = op.workspace();
  switch (op.kind_) {
    case Operator::Kind::ConvF32: return xnn_setup_convolution2d_nhwc_f32(o, ws, f, static_cast<float*>(out));
    case Operator::Kind::ConvQS8: return xnn_setup_convolution2d_nhwc_qs8(o, ws, q, static_cast<int8_t*>(out));
    default: return xnn_setup_convolution2d_nhwc_qs8_qc8w(o, ws, q, static_cast<int8_t*>(out));
  }
#else
  switch (op.kind_) {
    case Operator::Kind::ConvF32:
      return xnn_setup_convolution2d_nhwc_f32(o, batch, h, w, f, static_cast<float*>(out), pool);
    case Operator::Kind::ConvQS8:
      return xnn_setup_convolution2d_nhwc_qs8(o, batch, h, w, q, static_cast<int8_t*>(out), pool);
    case Operator::Kind::ConvQC8:
      return xnn_setup_convolution2d_nhwc_qc8(o, batch, h, w, q, static_cast<int8_t*>(out), pool);
    default: return xnn_status_invalid_state;
  }
#endif
}

xnn_status create_deconvolution_f32(const ConvParams& p, const float* kernel, const float* bias, float out_min,
                                    float out_max, Operator& out) {
  xnn_operator_t x = nullptr;
  const xnn_status s = xnn_create_deconvolution2d_nhwc_f32(ETNP_XNN_CONV_GEOMETRY(p), kernel, bias, out_min, out_max,
                                                           0, ETNP_XNN_CACHES & x);
  return adopt(s, x, Operator::Kind::DeconvF32, out);
}

xnn_status create_deconvolution_qs8(const ConvParams& p, QParams in, float kernel_scale, const int8_t* kernel,
                                    const int32_t* bias, QParams o, int8_t lo, int8_t hi, Operator& out) {
  xnn_operator_t x = nullptr;
  const xnn_status s = xnn_create_deconvolution2d_nhwc_qs8(ETNP_XNN_CONV_GEOMETRY(p), in.zero_point, in.scale,
                                                           kernel_scale, kernel, bias, o.zero_point, o.scale, lo, hi,
                                                           0, ETNP_XNN_CACHES & x);
  return adopt(s, x, Operator::Kind::DeconvQS8, out);
}

bool has_qc8_deconvolution() { return kReshapeApi; }

xnn_status create_deconvolution_qc8(const ConvParams& p, QParams in, const float* kernel_scales, const int8_t* kernel,
                                    const int32_t* bias, QParams o, int8_t lo, int8_t hi, Operator& out) {
#if ETNP_XNNPACK_RESHAPE_API
  xnn_operator_t x = nullptr;
  const xnn_status s = xnn_create_deconvolution2d_nhwc_qs8_qc8w(ETNP_XNN_CONV_GEOMETRY(p), in.zero_point, in.scale,
                                                                kernel_scales, kernel, bias, o.zero_point, o.scale,
                                                                lo, hi, 0, ETNP_XNN_CACHES & x);
  return adopt(s, x, Operator::Kind::DeconvQC8, out);
#else
  (void)p, (void)in, (void)kernel_scales, (void)kernel, (void)bias, (void)o, (void)lo, (void)hi, (void)out;
  return xnn_status_unsupported_parameter;
#endif
}

xnn_status setup_deconvolution(Operator& op, size_t batch, size_t h, size_t w, uint32_t adjustment_h,
                               uint32_t adjustment_w, const void* in, void* out, pthreadpool_t pool) {
  const auto* f = static_cast<const float*>(in);
  const auto* q = static_cast<const int8_t*>(in);
  auto* fo = static_cast<float*>(out);
  auto* qo = static_cast<int8_t*>(out);
  xnn_operator_t o = op.op_;
#if ETNP_XNNPACK_RESHAPE_API
  if (op.needs_reshape({batch, h, w, adjustment_h, adjustment_w}, pool)) {
    size_t oh = 0, ow = 0;
    xnn_status s;
    switch (op.kind_) {
      case Operator::Kind::DeconvF32:
        s = xnn_reshape_deconvolution2d_nhwc_f32(o, batch, h, w, adjustment_h, adjustment_w, &oh, &ow, pool);
        break;
      case Operator::Kind::DeconvQS8:
        s = xnn_reshape_deconvolution2d_nhwc_qs8(o, batch, h, w, adjustment_h, adjustment_w, &oh, &ow, pool);
        break;
      case Operator::Kind::DeconvQC8:
        s = xnn_reshape_deconvolution2d_nhwc_qs8_qc8w(o, batch, h, w, adjustment_h, adjustment_w, &oh, &ow, pool);
        break;
      default: return xnn_status_invalid_state;
    }
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
  }
  switch (op.kind_) {
    case Operator::Kind::DeconvF32: return xnn_setup_deconvolution2d_nhwc_f32(o, f, fo);
    case Operator::Kind::DeconvQS8: return xnn_setup_deconvolution2d_nhwc_qs8(o, q, qo);
    default: return xnn_setup_deconvolution2d_nhwc_qs8_qc8w(o, q, qo);
  }
#else
  switch (op.kind_) {
    case Operator::Kind::DeconvF32:
      return xnn_setup_deconvolution2d_nhwc_f32(o, batch, h, w, adjustment_h, adjustment_w, f, fo, pool);
    case Operator::Kind::DeconvQS8:
      return xnn_setup_deconvolution2d_nhwc_qs8(o, batch, h, w, adjustment_h, adjustment_w, q, qo, pool);
    default: return xnn_status_invalid_state;
  }
#endif
}

// ---- pooling and resizing ----------------------------------------------------------------------------------

xnn_status create_global_average_pooling_f32(size_t channels, float out_min, float out_max, Operator& out) {
  xnn_operator_t x = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  xnn_status s = adopt(xnn_create_reduce_nd(xnn_reduce_mean, xnn_datatype_fp32, nullptr, nullptr, 0, &x), x,
                       Operator::Kind::GlobalAvgPoolF32, out);
  if (s == xnn_status_success) s = add_output_clamp(out, false, out_min, out_max);
#else
  const xnn_status s =
      adopt(xnn_create_global_average_pooling_nwc_f32(channels, channels, channels, out_min, out_max, 0, &x), x,
            Operator::Kind::GlobalAvgPoolF32, out);
#endif
  if (s == xnn_status_success) out.channels_ = channels;
  return s;
}

xnn_status create_global_average_pooling_qs8(size_t channels, QParams in, QParams o, int8_t lo, int8_t hi,
                                             Operator& out) {
  xnn_operator_t x = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_quantization_params qi = quant(in), qo = quant(o);
  xnn_status s = adopt(xnn_create_reduce_nd(xnn_reduce_mean, xnn_datatype_qint8, &qi, &qo, 0, &x), x,
                       Operator::Kind::GlobalAvgPoolQS8, out);
  if (s == xnn_status_success) s = add_output_clamp(out, true, lo, hi);
#else
  const xnn_status s = adopt(xnn_create_global_average_pooling_nwc_qs8(channels, channels, channels, in.zero_point,
                                                                       in.scale, o.zero_point, o.scale, lo, hi, 0, &x),
                             x, Operator::Kind::GlobalAvgPoolQS8, out);
#endif
  if (s == xnn_status_success) out.channels_ = channels;
  return s;
}

xnn_status setup_global_average_pooling(Operator& op, size_t batch, size_t width, const void* in, void* out,
                                        pthreadpool_t pool) {
  const bool f32 = op.kind_ == Operator::Kind::GlobalAvgPoolF32;
  if (!f32 && op.kind_ != Operator::Kind::GlobalAvgPoolQS8) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  // A mean over the pixels of [batch, width, channels].
  const bool reshape = op.needs_reshape({batch, width}, pool);
  if (reshape) {
    const size_t shape[3] = {batch, width, op.channels_};
    const int64_t axes[1] = {1};
    size_t ws_size = 0, ws_align = 1;
    const xnn_status s = xnn_reshape_reduce_nd(op.op_, 1, axes, 3, shape, &ws_size, &ws_align, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
    op.size_workspace(ws_size, ws_align);
  }
  // The fp32 mean accumulates in the output itself; given a workspace it would convert from it with a
  // conversion kernel only the quantized types have (a null call in this library version).
  xnn_status s = xnn_setup_reduce_nd(op.op_, f32 ? nullptr : op.workspace(), in, out);
  if (s == xnn_status_success) s = setup_output_clamp(op, reshape, batch * op.channels_, out, pool);
  if (s != xnn_status_success) op.reshaped_ = false;
  return s;
#else
  if (f32) {
    return xnn_setup_global_average_pooling_nwc_f32(op.op_, batch, width, static_cast<const float*>(in),
                                                    static_cast<float*>(out), pool);
  }
  return xnn_setup_global_average_pooling_nwc_qs8(op.op_, batch, width, static_cast<const int8_t*>(in),
                                                  static_cast<int8_t*>(out), pool);
#endif
}

xnn_status create_average_pooling_f32(const PoolParams& p, size_t channels, float out_min, float out_max,
                                      Operator& out) {
  xnn_operator_t x = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_status s = xnn_create_average_pooling2d_nhwc_f32(p.pad_top, p.pad_right, p.pad_bottom, p.pad_left,
                                                             p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, out_min,
                                                             out_max, 0, &x);
#else
  const xnn_status s = xnn_create_average_pooling2d_nhwc_f32(p.pad_top, p.pad_right, p.pad_bottom, p.pad_left,
                                                             p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, channels,
                                                             channels, channels, out_min, out_max, 0, &x);
#endif
  const xnn_status r = adopt(s, x, Operator::Kind::AvgPoolF32, out);
  if (r == xnn_status_success) out.channels_ = channels;
  return r;
}

xnn_status create_max_pooling_f32(const PoolParams& p, size_t channels, float out_min, float out_max, Operator& out) {
  xnn_operator_t x = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_status s = xnn_create_max_pooling2d_nhwc_f32(p.pad_top, p.pad_right, p.pad_bottom, p.pad_left, p.kernel_h,
                                                         p.kernel_w, p.stride_h, p.stride_w, p.dilation_h,
                                                         p.dilation_w, out_min, out_max, 0, &x);
#else
  const xnn_status s = xnn_create_max_pooling2d_nhwc_f32(p.pad_top, p.pad_right, p.pad_bottom, p.pad_left, p.kernel_h,
                                                         p.kernel_w, p.stride_h, p.stride_w, p.dilation_h,
                                                         p.dilation_w, channels, channels, channels, out_min, out_max,
                                                         0, &x);
#endif
  const xnn_status r = adopt(s, x, Operator::Kind::MaxPoolF32, out);
  if (r == xnn_status_success) out.channels_ = channels;
  return r;
}

xnn_status create_max_pooling_s8(const PoolParams& p, size_t channels, int8_t lo, int8_t hi, Operator& out) {
  xnn_operator_t x = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_status s = xnn_create_max_pooling2d_nhwc_s8(p.pad_top, p.pad_right, p.pad_bottom, p.pad_left, p.kernel_h,
                                                        p.kernel_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w,
                                                        lo, hi, 0, &x);
#else
  const xnn_status s = xnn_create_max_pooling2d_nhwc_s8(p.pad_top, p.pad_right, p.pad_bottom, p.pad_left, p.kernel_h,
                                                        p.kernel_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w,
                                                        channels, channels, channels, lo, hi, 0, &x);
#endif
  const xnn_status r = adopt(s, x, Operator::Kind::MaxPoolS8, out);
  if (r == xnn_status_success) out.channels_ = channels;
  return r;
}

xnn_status setup_pooling(Operator& op, size_t batch, size_t h, size_t w, const void* in, void* out,
                         pthreadpool_t pool) {
  xnn_operator_t o = op.op_;
  const auto* f = static_cast<const float*>(in);
  const size_t c = op.channels_;
#if ETNP_XNNPACK_RESHAPE_API
  const bool reshape = op.needs_reshape({batch, h, w}, pool);
  size_t oh = 0, ow = 0, ws_size = 0, ws_align = 1;
  xnn_status s = xnn_status_success;
  switch (op.kind_) {
    case Operator::Kind::AvgPoolF32:
      if (reshape) {
        s = xnn_reshape_average_pooling2d_nhwc_f32(o, batch, h, w, c, c, c, &ws_size, &ws_align, &oh, &ow, pool);
        if (s == xnn_status_success) op.size_workspace(ws_size, ws_align);
      }
      if (s == xnn_status_success) {
        s = xnn_setup_average_pooling2d_nhwc_f32(o, op.workspace(), f, static_cast<float*>(out));
      }
      break;
    case Operator::Kind::MaxPoolF32:
      if (reshape) s = xnn_reshape_max_pooling2d_nhwc_f32(o, batch, h, w, c, c, c, &oh, &ow, pool);
      if (s == xnn_status_success) s = xnn_setup_max_pooling2d_nhwc_f32(o, f, static_cast<float*>(out));
      break;
    case Operator::Kind::MaxPoolS8:
      if (reshape) s = xnn_reshape_max_pooling2d_nhwc_s8(o, batch, h, w, c, c, c, &oh, &ow, pool);
      if (s == xnn_status_success) {
        s = xnn_setup_max_pooling2d_nhwc_s8(o, static_cast<const int8_t*>(in), static_cast<int8_t*>(out));
      }
      break;
    default: return xnn_status_invalid_state;
  }
  if (s != xnn_status_success) op.reshaped_ = false;
  return s;
#else
  (void)c;
  switch (op.kind_) {
    case Operator::Kind::AvgPoolF32:
      return xnn_setup_average_pooling2d_nhwc_f32(o, batch, h, w, f, static_cast<float*>(out), pool);
    case Operator::Kind::MaxPoolF32:
      return xnn_setup_max_pooling2d_nhwc_f32(o, batch, h, w, f, static_cast<float*>(out), pool);
    case Operator::Kind::MaxPoolS8:
      return xnn_setup_max_pooling2d_nhwc_s8(o, batch, h, w, static_cast<const int8_t*>(in),
                                             static_cast<int8_t*>(out), pool);
    default: return xnn_status_invalid_state;
  }
#endif
}

xnn_status create_argmax_pooling_f32(const PoolParams& p, size_t channels, Operator& out) {
  xnn_operator_t x = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_status s = xnn_create_argmax_pooling2d_nhwc_f32(p.pad_top, p.pad_right, p.pad_bottom, p.pad_left,
                                                            p.kernel_h, p.kernel_w, 0, &x);
#else
  const xnn_status s = xnn_create_argmax_pooling2d_nhwc_f32(p.pad_top, p.pad_right, p.pad_bottom, p.pad_left,
                                                            p.kernel_h, p.kernel_w, channels, channels, channels, 0, &x);
#endif
  const xnn_status r = adopt(s, x, Operator::Kind::ArgMaxPoolF32, out);
  if (r == xnn_status_success) out.channels_ = channels;
  return r;
}

xnn_status setup_argmax_pooling_f32(Operator& op, size_t batch, size_t h, size_t w, const float* in, float* out,
                                    uint32_t* index, pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::ArgMaxPoolF32) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  const size_t c = op.channels_;
  if (op.needs_reshape({batch, h, w}, pool)) {
    size_t ws_size = 0, ws_align = 1, oh = 0, ow = 0;
    const xnn_status s =
        xnn_reshape_argmax_pooling2d_nhwc_f32(op.op_, batch, h, w, c, c, c, &ws_size, &ws_align, &oh, &ow, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
    op.size_workspace(ws_size, ws_align);
  }
  return xnn_setup_argmax_pooling2d_nhwc_f32(op.op_, op.workspace(), in, out, index);
#else
  return xnn_setup_argmax_pooling2d_nhwc_f32(op.op_, batch, h, w, in, out, index, pool);
#endif
}

xnn_status create_resize_bilinear_f32(size_t channels, size_t new_h, size_t new_w, uint32_t flags, Operator& out) {
  xnn_operator_t x = nullptr;
#if ETNP_XNNPACK_RESHAPE_API
  const xnn_status s = xnn_create_resize_bilinear2d_nhwc_f32(new_h, new_w, flags, &x);
#else
  const xnn_status s = xnn_create_resize_bilinear2d_nhwc_f32(channels, channels, channels, flags, &x);
#endif
  const xnn_status r = adopt(s, x, Operator::Kind::ResizeBilinearF32, out);
  if (r == xnn_status_success) {
    out.channels_ = channels;
    out.out_h_ = new_h;  // the 2022 API takes the output size at setup
    out.out_w_ = new_w;
  }
  return r;
}

xnn_status setup_resize_bilinear_f32(Operator& op, size_t batch, size_t h, size_t w, const float* in, float* out,
                                     pthreadpool_t pool) {
  if (op.kind_ != Operator::Kind::ResizeBilinearF32) return xnn_status_invalid_state;
#if ETNP_XNNPACK_RESHAPE_API
  const size_t c = op.channels_;
  if (op.needs_reshape({batch, h, w}, pool)) {
    size_t ws_size = 0, ws_align = 1;
    const xnn_status s =
        xnn_reshape_resize_bilinear2d_nhwc_f32(op.op_, batch, h, w, c, c, c, &ws_size, &ws_align, pool);
    if (s != xnn_status_success) {
      op.reshaped_ = false;
      return s;
    }
    op.size_workspace(ws_size, ws_align);
  }
  return xnn_setup_resize_bilinear2d_nhwc_f32(op.op_, op.workspace(), in, out);
#else
  return xnn_setup_resize_bilinear2d_nhwc_f32(op.op_, batch, h, w, op.out_h_, op.out_w_, in, out, pool);
#endif
}

}  // namespace etnp::xnn::ops
