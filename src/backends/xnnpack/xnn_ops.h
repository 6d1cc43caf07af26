// One interface over the two XNNPACK operator APIs a Debian machine may have (README.md, "Two XNNPACK APIs"):
//   - Debian 12's 2022 snapshot: create, then setup (shapes and pointers together), then run;
//   - Debian 13's 2024 snapshot: create, reshape (shapes, workspace size), setup (pointers), run; element-wise
//     operators are generic (xnn_create_unary_elementwise_nc / xnn_create_binary_elementwise_nd, without fused
//     clamps), global average pooling is a mean reduction, per-channel int8 is "qs8_qc8w".
// CMake detects which one the installed header has and compiles xnn_ops.cpp for it (ETNP_XNNPACK_RESHAPE_API);
// nothing else in the delegate calls an operator function directly. Each operator is created once by a
// `create_*` function and run by its `setup_*` function then `run`; setups take the current shapes, so one
// operator serves every run whatever the input shapes (the newer API reshapes only when they changed).
#pragma once

#include <xnnpack.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace etnp::xnn::ops {

/// Bytes XNNPACK may read past the end of any buffer it is given.
inline constexpr size_t kExtraBytes = XNN_EXTRA_BYTES;

/// True where this build uses the 2024 create/reshape/setup API.
bool reshape_api();

/// Initializes the library once per process; true where it is usable.
xnn_status initialize();

const char* status_name(xnn_status s);

/// One created XNNPACK operator: the library's operator plus what the newer API needs around it (a workspace,
/// a clamp applied to the output in place, a constant second input, the last reshape's arguments). Move-only.
class Operator {
 public:
  Operator() = default;
  ~Operator();
  Operator(Operator&& other) noexcept;
  Operator& operator=(Operator&& other) noexcept;
  Operator(const Operator&) = delete;
  Operator& operator=(const Operator&) = delete;

  bool created() const { return op_ != nullptr; }
  /// Runs what the last setup prepared, on `pool` (nullptr: the calling thread); the pool must be the one the
  /// setup was given.
  xnn_status run(pthreadpool_t pool);

  // Implementation state (xnn_ops.cpp); not for callers.
  enum class Kind : uint8_t {
    None, Binary, Unary, FullyConnectedF32, FullyConnectedQS8, FullyConnectedQD8, BatchMatmulF32, SoftmaxF32,
    ConvF32, ConvQS8, ConvQC8, DeconvF32, DeconvQS8, DeconvQC8, GlobalAvgPoolF32, GlobalAvgPoolQS8, AvgPoolF32, MaxPoolF32, MaxPoolS8,
    ArgMaxPoolF32, ResizeBilinearF32, PReLUF32
  };
  void reset();
  /// True (and the key stored) when `key`, `pool` or its thread count differ from those of the last reshape.
  bool needs_reshape(const std::array<size_t, 16>& key, pthreadpool_t pool);
  /// Sizes the workspace (at a reshape); `workspace()` is its aligned start (nullptr when empty).
  void size_workspace(size_t bytes, size_t alignment);
  void* workspace();

  Kind kind_ = Kind::None;
  uint8_t variant_ = 0;             ///< 2022 API: which of the kind's setup functions applies
  xnn_operator_t op_ = nullptr;
  xnn_operator_t clamp_ = nullptr;  ///< 2024 API: clamps the output in place after op_ (no fused clamps)
  size_t channels_ = 0;             ///< pooling, resize, PReLU: the channel count given at create
  size_t out_h_ = 0, out_w_ = 0;    ///< resize: the output size given at create
  std::vector<float> constant_;     ///< 2024 API: PReLU's slope, an input at setup
  std::array<size_t, 16> key_{};
  pthreadpool_t key_pool_ = nullptr;
  size_t key_threads_ = 0;
  bool reshaped_ = false;
  std::vector<unsigned char> workspace_;
  size_t workspace_bytes_ = 0, workspace_alignment_ = 1;
};

enum class BinaryOp : uint8_t { Add, Subtract, Multiply, Divide, Minimum, Maximum };
enum class UnaryOp : uint8_t {
  Sigmoid, Floor, Ceiling, SquareRoot, Square, Negate, Abs, Hardswish, LeakyReLU, ELU,
  // Only the 2024 library has these (has_unary_f32 says so; the 2022 one answers unsupported_parameter).
  Tanh, Exp, Log, Gelu, ReciprocalSquareRoot, Sine, Cosine
};

/// Whether this build's library has the fp32 unary operator `op`.
bool has_unary_f32(UnaryOp op);
/// Whether this build's library has the operators only the 2024 API brings: fully-connected layers on
/// dynamically quantized int8 (qd8 x qc8w/qc4w/qb4w) and fp32 batch matrix multiplication.
bool has_qd8_fully_connected();
bool has_batch_matmul_f32();
/// Whether the library's qd8 x qc4w (per-channel 4-bit) fully-connected operator computes right on this CPU.
/// Debian 13's XNNPACK (2024-11-08) gives wrong results where it picks its AMX kernels (a Sapphire Rapids Xeon:
/// outputs off by up to 1.2 where they are 0.1-1.3; with AMX hidden from it, right), so there the delegate's
/// own 4-bit kernel runs such layers whatever the engine option says.
bool qc4w_fully_connected_is_sound();

/// 8-bit quantization of a tensor (scale, zero point).
struct QParams {
  float scale = 1.0f;
  int8_t zero_point = 0;
};

/// A 2-D convolution's geometry (XNNPACK's argument order; channel strides are groups x group channels).
/// A pooling window, and the window part of a convolution.
struct PoolParams {
  uint32_t pad_top = 0, pad_right = 0, pad_bottom = 0, pad_left = 0;
  uint32_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
};

struct ConvParams : PoolParams {
  uint32_t groups = 1;
  size_t group_input_channels = 0, group_output_channels = 0;
  bool depthwise = false;  ///< the filter is [1, kh, kw, channels * multiplier] (XNN_FLAG_DEPTHWISE_CONVOLUTION)
};


// ---- element-wise -----------------------------------------------------------------------------------------
// Binary operators broadcast numpy-style over shapes of rank 1 to XNN_MAX_TENSOR_DIMS.
xnn_status create_binary_f32(BinaryOp op, float out_min, float out_max, Operator& out);
/// Add, Subtract or Multiply on int8 with per-tensor quantization; the output clamped to [lo, hi].
xnn_status create_binary_qs8(BinaryOp op, QParams a, QParams b, QParams o, int8_t lo, int8_t hi, Operator& out);
xnn_status setup_binary(Operator& op, size_t rank_a, const size_t* shape_a, size_t rank_b, const size_t* shape_b,
                        const void* a, const void* b, void* out, pthreadpool_t pool);

/// PReLU over rows of `channels` with a per-channel slope (copied).
xnn_status create_prelu_f32(size_t channels, const float* slope, Operator& out);
xnn_status setup_prelu_f32(Operator& op, size_t rows, const float* in, float* out, pthreadpool_t pool);

// Unary operators run over `count` contiguous elements (setup_unary).
xnn_status create_clamp_f32(float out_min, float out_max, Operator& out);
xnn_status create_clamp_s8(int8_t lo, int8_t hi, Operator& out);
/// `scalar`: the negative slope of LeakyReLU, alpha of ELU; unused otherwise.
xnn_status create_unary_f32(UnaryOp op, float scalar, Operator& out);
xnn_status create_convert_f32_qs8(QParams o, Operator& out);
xnn_status create_convert_qs8_f32(QParams i, Operator& out);
xnn_status setup_unary(Operator& op, size_t count, const void* in, void* out, pthreadpool_t pool);

/// Softmax over rows of `channels` (the 2022 library fixes the channel count at create).
xnn_status create_softmax_f32(size_t channels, Operator& out);
xnn_status setup_softmax_f32(Operator& op, size_t rows, const float* in, float* out, pthreadpool_t pool);

// ---- matrix products and convolutions (weights packed at create; bias optional) ---------------------------
/// fp32 [rows, k] x kernel [units, k] (or, transposed, [k, units]) + bias -> [rows, units], clamped.
xnn_status create_fully_connected_f32(size_t k, size_t units, const float* kernel, const float* bias, float out_min,
                                      float out_max, bool transposed, Operator& out);
xnn_status setup_fully_connected_f32(Operator& op, size_t rows, const float* in, float* out, pthreadpool_t pool);

/// The int8 weights of a fully-connected layer on dynamically quantized activations (2024 library only).
struct QD8Kernel {
  enum class Type : uint8_t { QC8W, QC4W, QB4W } type = Type::QC8W;
  /// [units, k] int8 (QC8W) or [units, k / 2] bytes of two 4-bit codes stored +8, the even k in the low nibble.
  const void* data = nullptr;
  const float* channel_scales = nullptr;  ///< QC8W, QC4W: one per unit
  const uint16_t* block_scales = nullptr;  ///< QB4W: bf16 [units, k / block_size]
  size_t block_size = 0;                   ///< QB4W: a multiple of 32 dividing k
};
/// Entries of {int32 zero point, float scale} a qd8 input's per-row parameters must be padded with.
inline constexpr size_t kExtraQuantizationParams = 10;
xnn_status create_fully_connected_qd8(size_t k, size_t units, const QD8Kernel& kernel, const float* bias,
                                      float out_min, float out_max, Operator& out);
/// `row_params`: rows + kExtraQuantizationParams entries of {int32 zero point, float scale}, one per input row.
xnn_status setup_fully_connected_qd8(Operator& op, size_t rows, const int8_t* in, const void* row_params, float* out,
                                     pthreadpool_t pool);

/// fp32 a [batch..., m, k] x b [batch..., k, n] (or, transpose_b, [batch..., n, k]); the batch dims (as many
/// in both, 1 where broadcast) broadcast numpy-style (2024 library only).
xnn_status create_batch_matmul_f32(bool transpose_b, Operator& out);
xnn_status setup_batch_matmul_f32(Operator& op, size_t batch_rank, const size_t* batch_a, const size_t* batch_b,
                                  size_t m, size_t k, size_t n, const float* a, const float* b, float* out,
                                  pthreadpool_t pool);

/// int8 x int8 (per-tensor kernel scale, kernel zero point 0) -> int8; kernel [units, k] or, transposed, [k, units].
xnn_status create_fully_connected_qs8(size_t k, size_t units, QParams in, float kernel_scale, const int8_t* kernel,
                                      const int32_t* bias, QParams o, int8_t lo, int8_t hi, bool transposed,
                                      Operator& out);
xnn_status setup_fully_connected_qs8(Operator& op, size_t rows, const int8_t* in, int8_t* out, pthreadpool_t pool);

xnn_status create_convolution_f32(const ConvParams& p, const float* kernel, const float* bias, float out_min,
                                  float out_max, Operator& out);
/// Per-tensor int8 kernel (zero point 0).
xnn_status create_convolution_qs8(const ConvParams& p, QParams in, float kernel_scale, const int8_t* kernel,
                                  const int32_t* bias, QParams o, int8_t lo, int8_t hi, Operator& out);
/// Per-output-channel int8 kernel scales.
xnn_status create_convolution_qc8(const ConvParams& p, QParams in, const float* kernel_scales, const int8_t* kernel,
                                  const int32_t* bias, QParams o, int8_t lo, int8_t hi, Operator& out);
/// Any of the three convolutions above: NHWC input [batch, h, w, channels].
xnn_status setup_convolution(Operator& op, size_t batch, size_t h, size_t w, const void* in, void* out,
                             pthreadpool_t pool);

/// Transposed convolution (ConvParams' padding is the output padding, stride the upsampling).
xnn_status create_deconvolution_f32(const ConvParams& p, const float* kernel, const float* bias, float out_min,
                                    float out_max, Operator& out);
/// int8 transposed convolutions: a per-tensor kernel (zero point 0), or per-output-channel scales (2024 library
/// only: has_qc8_deconvolution).
xnn_status create_deconvolution_qs8(const ConvParams& p, QParams in, float kernel_scale, const int8_t* kernel,
                                    const int32_t* bias, QParams o, int8_t lo, int8_t hi, Operator& out);
xnn_status create_deconvolution_qc8(const ConvParams& p, QParams in, const float* kernel_scales, const int8_t* kernel,
                                    const int32_t* bias, QParams o, int8_t lo, int8_t hi, Operator& out);
bool has_qc8_deconvolution();
/// Any of the three transposed convolutions above: NHWC input [batch, h, w, channels].
xnn_status setup_deconvolution(Operator& op, size_t batch, size_t h, size_t w, uint32_t adjustment_h,
                               uint32_t adjustment_w, const void* in, void* out, pthreadpool_t pool);

// ---- pooling and resizing (NHWC) ------------------------------------------------------------------------
/// Mean over the `width` pixels of each of `batch` images [width, channels].
xnn_status create_global_average_pooling_f32(size_t channels, float out_min, float out_max, Operator& out);
xnn_status create_global_average_pooling_qs8(size_t channels, QParams in, QParams o, int8_t lo, int8_t hi,
                                             Operator& out);
xnn_status setup_global_average_pooling(Operator& op, size_t batch, size_t width, const void* in, void* out,
                                        pthreadpool_t pool);

xnn_status create_average_pooling_f32(const PoolParams& p, size_t channels, float out_min, float out_max,
                                      Operator& out);
xnn_status create_max_pooling_f32(const PoolParams& p, size_t channels, float out_min, float out_max, Operator& out);
xnn_status create_max_pooling_s8(const PoolParams& p, size_t channels, int8_t lo, int8_t hi, Operator& out);
/// Any of the three poolings above.
xnn_status setup_pooling(Operator& op, size_t batch, size_t h, size_t w, const void* in, void* out,
                         pthreadpool_t pool);

/// Max pooling that also writes each maximum's index in its window (stride = window, no dilation).
xnn_status create_argmax_pooling_f32(const PoolParams& p, size_t channels, Operator& out);
xnn_status setup_argmax_pooling_f32(Operator& op, size_t batch, size_t h, size_t w, const float* in, float* out,
                                    uint32_t* index, pthreadpool_t pool);

/// `flags`: XNNPACK's resize flags as serialized (XNN_FLAG_ALIGN_CORNERS, XNN_FLAG_TENSORFLOW_LEGACY_MODE).
xnn_status create_resize_bilinear_f32(size_t channels, size_t new_h, size_t new_w, uint32_t flags, Operator& out);
xnn_status setup_resize_bilinear_f32(Operator& op, size_t batch, size_t h, size_t w, const float* in, float* out,
                                     pthreadpool_t pool);

}  // namespace etnp::xnn::ops
