// llama::* — the custom operators that ExecuTorch's LLM exports (export_llama, extension/llm/export) call:
// attention over a KV cache and the cache updates.
//
//   custom_sdpa.out(query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, *, out)
//       query [B, S, H, D]; key/value are the whole caches [B, L, Hkv, D] with Hkv dividing H (query head h
//       reads kv head h / (H / Hkv)). Query row i sits at position start_pos + i. Causal: row i sees keys
//       [0, start_pos + i]; not causal: keys [0, start_pos + S); with attn_mask (additive, [S, L], not
//       together with is_causal): all L keys. scale defaults to 1 / sqrt(D). out has query's shape and dtype.
//   sdpa_with_kv_cache.out(query, key, value, key_cache, value_cache, start_pos, seq_len, ...)
//       Writes key/value into the caches at start_pos (as update_cache), then custom_sdpa over the caches.
//   custom_quantized_sdpa.out(..., q_zero_points, q_scales, k_zero_points, k_scales, v_zero_points, v_scales,
//                             is_seq_at_dim_2, *, out)
//       int8 query/key/value with per-token float32 scales and int8 zero points ([..., 1]), dequantized as
//       (x - zp) * scale; layout [B, H, S, D] when is_seq_at_dim_2. out is float32, shaped as query.
//   update_cache.out(value, cache, start_pos, *, out)
//       cache[:, start_pos : start_pos + S] = value. `out` is a placeholder the kernel leaves untouched.
//   update_cache_with_indices.out(value, cache, start_pos, indices, *, out)
//       cache[b, indices[b, s]] = value[b, s]; start_pos is not used.
//
// Attention runs in float32 on blocks of query rows that share a kv head (the H / Hkv query heads of a group
// at a few consecutive positions): scores against the keys the block may see (the causal prefix, never the
// rest of the cache) by one GEMM, a softmax per row over its own prefix, then the weighted sum of values by a
// second GEMM. Blocks are split across the thread pool; their shapes depend on the problem alone, so every
// thread count gives the same bits. Other dtypes (half, bfloat16, int8 with parameters) are converted to
// float32 rows per block, only the keys and values the block reads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "compute/gemm.h"
#include "compute/parallel.h"
#include "compute/vector_math.h"
#include "etnp/threadpool.h"
#include "kernels/kernel_util.h"
#include "kernels/register.h"

namespace etnp::kernels {

namespace {

ThreadPool& pool_of(KernelContext& ctx) { return ctx.pool() != nullptr ? *ctx.pool() : ThreadPool::current(); }

// ---------------------------------------------------------------------------------------------------------
// Operands.

/// Logical dims of sequence and heads (batch is 0, the head dim 3).
struct Layout {
  int seq = 1, heads = 2;
};
constexpr Layout kSeqAtDim1{1, 2};
constexpr Layout kSeqAtDim2{2, 1};

/// Scale and zero point tensors of a quantized operand (per token: one pair per (b, s, h)).
struct TokenParams {
  const Tensor* scales = nullptr;
  const Tensor* zero_points = nullptr;
};

/// An attention operand seen as [batch, seq, heads, head_dim]: element (b, s, h, d) at
/// data[b * sb + s * ss + h * sh + d * sd], in elements of `dtype`. An int8 one has a float32 scale and an
/// int8 zero point per (b, s, h) at scales[b * qb + s * qs + h * qh] (zero points likewise, strides z*).
struct Operand {
  const void* data = nullptr;
  ScalarType dtype = ScalarType::Float;
  int64_t sb = 0, ss = 0, sh = 0, sd = 1;
  const float* scales = nullptr;
  const int8_t* zero_points = nullptr;
  int64_t qb = 0, qs = 0, qh = 0, zb = 0, zs = 0, zh = 0;

  /// float32 rows with a contiguous head dim: read where they are, no copy.
  bool in_place() const { return dtype == ScalarType::Float && sd == 1 && scales == nullptr; }
  const float* row(int64_t b, int64_t s, int64_t h) const {
    return static_cast<const float*>(data) + b * sb + s * ss + h * sh;
  }
};

Operand operand(const Tensor& t, Layout l, const TokenParams* params) {
  Operand x{t.data(), t.dtype(), t.stride(0), t.stride(l.seq), t.stride(l.heads), t.stride(3)};
  if (params != nullptr) {
    const Tensor& sc = *params->scales;
    const Tensor& zp = *params->zero_points;
    x.scales = sc.data_as<float>();
    x.zero_points = zp.data_as<int8_t>();
    x.qb = sc.stride(0), x.qs = sc.stride(l.seq), x.qh = sc.stride(l.heads);
    x.zb = zp.stride(0), x.zs = zp.stride(l.seq), x.zh = zp.stride(l.heads);
  }
  return x;
}

/// Positions [s0, s1) of head h in batch b as float32 rows of `d` (dequantized: (x - zero_point) * scale).
void load_rows(const Operand& x, int64_t b, int64_t h, int64_t s0, int64_t s1, int64_t d, float* dst) {
  for (int64_t s = s0; s < s1; ++s) {
    float* row = dst + (s - s0) * d;
    const int64_t off = b * x.sb + s * x.ss + h * x.sh;
    if (x.scales != nullptr) {
      const float scale = x.scales[b * x.qb + s * x.qs + h * x.qh];
      const auto zero = static_cast<float>(x.zero_points[b * x.zb + s * x.zs + h * x.zh]);
      const int8_t* src = static_cast<const int8_t*>(x.data) + off;
      if (x.sd == 1) {
        for (int64_t i = 0; i < d; ++i) row[i] = (static_cast<float>(src[i]) - zero) * scale;
      } else {
        for (int64_t i = 0; i < d; ++i) row[i] = (static_cast<float>(src[i * x.sd]) - zero) * scale;
      }
      continue;
    }
    dispatch<kFloats | kHalfs>(x.dtype, "attention operand", [&](auto tag) {
      using T = decltype(tag);
      const T* src = static_cast<const T*>(x.data) + off;
      for (int64_t i = 0; i < d; ++i) row[i] = static_cast<float>(static_cast<OpMath<T>>(src[i * x.sd]));
    });
  }
}

/// The output, [batch, seq, heads, head_dim] as Operand (float32, float16 or bfloat16).
struct Output {
  void* data = nullptr;
  ScalarType dtype = ScalarType::Float;
  int64_t sb = 0, ss = 0, sh = 0, sd = 1;
};

void store_row(const Output& o, int64_t b, int64_t s, int64_t h, int64_t d, const float* src) {
  const int64_t off = b * o.sb + s * o.ss + h * o.sh;
  if (o.dtype == ScalarType::Float && o.sd == 1) {
    std::memcpy(static_cast<float*>(o.data) + off, src, static_cast<size_t>(d) * sizeof(float));
    return;
  }
  dispatch<kFloats | kHalfs>(o.dtype, "attention output", [&](auto tag) {
    using T = decltype(tag);
    T* dst = static_cast<T*>(o.data) + off;
    for (int64_t i = 0; i < d; ++i) dst[i * o.sd] = convert<T>(src[i]);
  });
}

// ---------------------------------------------------------------------------------------------------------
// The attention core.

struct Attention {
  int64_t batch = 0, q_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t start_pos = 0;  ///< position of query row 0
  int64_t num_keys = 0;   ///< keys [0, num_keys) exist for the rows (causal rows see fewer)
  bool causal = false;
  const float* mask = nullptr;  ///< additive [q_len, num_keys] scores, row stride mask_stride, or nullptr
  int64_t mask_stride = 0;
  float scale = 1.0f;
  Operand q, k, v;
  Output out;
};

/// Query rows per block: enough for the GEMMs to reuse each key and value they load, few enough that the
/// scores (rows x keys) stay in L2.
constexpr int64_t kBlockRows = 48;
constexpr int64_t kBlockScores = int64_t{1} << 16;

struct BlockBuffers {
  std::vector<float> q, k, v, scores, out;
};

// Pool threads live as long as the process: each keeps its block buffers between calls.
BlockBuffers& block_buffers() {
  thread_local BlockBuffers buffers;
  return buffers;
}

/// Positions [p0, p1) of batch b for the query heads of kv head `kvh`.
void attend_block(const Attention& a, int64_t b, int64_t kvh, int64_t p0, int64_t p1) {
  const int64_t group = a.heads / a.kv_heads, d = a.head_dim;
  const int64_t rows = (p1 - p0) * group;
  const int64_t keys = a.causal ? a.start_pos + p1 : a.num_keys;
  BlockBuffers& buf = block_buffers();
  buf.q.resize(static_cast<size_t>(rows * d));
  buf.scores.resize(static_cast<size_t>(rows * keys));
  buf.out.resize(static_cast<size_t>(rows * d));
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t g = 0; g < group; ++g) load_rows(a.q, b, kvh * group + g, p, p + 1, d, buf.q.data() + ((p - p0) * group + g) * d);
  }
  // Keys and values [0, keys) of this kv head: in place, or converted once for the block.
  auto rows_of = [&](const Operand& x, std::vector<float>& copy, int64_t& stride) -> const float* {
    if (x.in_place()) {
      stride = x.ss;
      return x.row(b, 0, kvh);
    }
    copy.resize(static_cast<size_t>(keys * d));
    load_rows(x, b, kvh, 0, keys, d, copy.data());
    stride = d;
    return copy.data();
  };
  int64_t k_stride = 0, v_stride = 0;
  const float* k = rows_of(a.k, buf.k, k_stride);
  const float* v = rows_of(a.v, buf.v, v_stride);
  // scores = scale * Q K^T: K's rows are the columns of B.
  GemmEpilogue scaled;
  scaled.alpha = a.scale;
  gemm_f32(rows, keys, d, GemmMatrix{buf.q.data(), d, 1}, GemmMatrix{k, 1, k_stride}, buf.scores.data(), keys, 1,
           scaled, nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = p0 + r / group;
    const int64_t visible = a.causal ? a.start_pos + p + 1 : keys;
    float* row = buf.scores.data() + r * keys;
    if (a.mask != nullptr) {
      const float* m = a.mask + p * a.mask_stride;
      for (int64_t j = 0; j < visible; ++j) row[j] += m[j];
    }
    softmax_rows_f32(row, row, 1, static_cast<size_t>(visible));
    std::fill(row + visible, row + keys, 0.0f);
  }
  // out = P V.
  gemm_f32(rows, d, keys, GemmMatrix{buf.scores.data(), keys, 1}, GemmMatrix{v, v_stride, 1}, buf.out.data(), d, 1,
           GemmEpilogue{}, nullptr);
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t g = 0; g < group; ++g) store_row(a.out, b, p, kvh * group + g, d, buf.out.data() + ((p - p0) * group + g) * d);
  }
}

void run_attention(const Attention& a, ThreadPool& pool) {
  const int64_t group = a.heads / a.kv_heads;
  const int64_t max_keys = std::max<int64_t>(a.num_keys, 1);
  int64_t positions = std::max<int64_t>(1, kBlockRows / group);
  positions = std::min(positions, std::max<int64_t>(1, kBlockScores / (group * max_keys)));
  positions = std::min(positions, std::max<int64_t>(a.q_len, 1));
  const int64_t blocks_per_head = (a.q_len + positions - 1) / positions;
  const int64_t tasks = a.batch * a.kv_heads * blocks_per_head;
  auto body = [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const auto task = static_cast<int64_t>(t);
      const int64_t blk = task % blocks_per_head, bh = task / blocks_per_head;
      const int64_t p0 = blk * positions;
      attend_block(a, bh / a.kv_heads, bh % a.kv_heads, p0, std::min(a.q_len, p0 + positions));
    }
  };
  const double work = 2.0 * double(a.batch * a.heads * a.q_len) * double(max_keys) * double(a.head_dim);
  if (tasks <= 1 || pool.num_threads() <= 1 || work < double(kParallelWork)) {
    body(0, static_cast<size_t>(tasks));
  } else {
    pool.parallel_for(static_cast<size_t>(tasks), 1, body);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Argument checks shared by the attention kernels.

const char* dims_name(Layout l) { return l.seq == 1 ? "[B, S, H, D]" : "[B, H, S, D]"; }

void check_rank4(const Tensor& t, const char* what, Layout l, const char* op) {
  ETNP_KERNEL_CHECK(t.dim() == 4, op << ": " << what << " must be 4-D " << dims_name(l) << ", got "
                                     << shape_str(t.sizes()));
}

/// The arguments common to every attention kernel: shapes of query and the caches, start_pos, mask,
/// dropout, causality, scale. Returns the problem with everything but the operands filled in.
Attention attention_problem(const Tensor& q, const Tensor& k, const Tensor& v, int64_t start_pos,
                            const Tensor* mask, double dropout, bool causal, const EValue& scale, Layout l,
                            const char* op) {
  check_rank4(q, "query", l, op);
  check_rank4(k, "key", l, op);
  check_rank4(v, "value", l, op);
  ETNP_KERNEL_CHECK(dropout == 0.0, op << ": drpout_p must be 0 (inference only), got " << dropout);
  for (int d : {0, 3}) {
    ETNP_KERNEL_CHECK(k.size(d) == q.size(d) && v.size(d) == q.size(d),
                      op << ": query " << shape_str(q.sizes()) << ", key " << shape_str(k.sizes()) << " and value "
                         << shape_str(v.sizes()) << " differ in dim " << d);
  }
  ETNP_KERNEL_CHECK(k.size(l.seq) == v.size(l.seq) && k.size(l.heads) == v.size(l.heads),
                    op << ": key " << shape_str(k.sizes()) << " and value " << shape_str(v.sizes())
                       << " must have the same shape");
  Attention a;
  a.batch = q.size(0);
  a.q_len = q.size(l.seq);
  a.heads = q.size(l.heads);
  a.kv_heads = k.size(l.heads);
  a.head_dim = q.size(3);
  ETNP_KERNEL_CHECK(a.kv_heads > 0 && a.heads % a.kv_heads == 0,
                    op << ": " << a.heads << " query heads are not a multiple of " << a.kv_heads << " kv heads");
  ETNP_KERNEL_CHECK(start_pos >= 0, op << ": start_pos " << start_pos << " is negative");
  const int64_t cache_len = k.size(l.seq);
  ETNP_KERNEL_CHECK(start_pos + a.q_len <= cache_len,
                    op << ": start_pos " << start_pos << " + " << a.q_len << " query positions exceeds the "
                       << cache_len << " positions of the key/value cache");
  ETNP_KERNEL_CHECK(mask == nullptr || !causal, op << ": attn_mask and is_causal cannot both be given");
  a.start_pos = start_pos;
  a.causal = causal;
  a.num_keys = mask != nullptr ? cache_len : start_pos + a.q_len;
  if (mask != nullptr) {
    ETNP_KERNEL_CHECK(mask->dim() == 2 && mask->size(0) == a.q_len && mask->size(1) == cache_len,
                      op << ": attn_mask must be [" << a.q_len << ", " << cache_len << "] (query positions x cache "
                         << "positions), got " << shape_str(mask->sizes()));
    ETNP_KERNEL_CHECK(is_floating_type(mask->dtype()),
                      op << ": attn_mask must be a float tensor, got " << scalar_type_name(mask->dtype()));
  }
  if (scale.is_none()) {
    a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  } else {
    a.scale = static_cast<float>(scale.to_double());
  }
  return a;
}

/// Runs `a` over the tensors (quantized with the given parameters) and writes `out`, resized to query's shape.
void attend(KernelContext& ctx, Attention a, const Tensor& q, const Tensor& k, const Tensor& v,
            const Tensor* mask, const TokenParams* qp, const TokenParams* kp, const TokenParams* vp, Layout l,
            Tensor& out, const char* op) {
  resize_output(out, q.sizes(), op);
  a.q = operand(q, l, qp);
  a.k = operand(k, l, kp);
  a.v = operand(v, l, vp);
  a.out = Output{out.data(), out.dtype(), out.stride(0), out.stride(l.seq), out.stride(l.heads), out.stride(3)};
  // The mask as contiguous float32 rows: the tensor itself, or a converted copy.
  std::vector<float> mask_copy;
  if (mask != nullptr && mask->dtype() == ScalarType::Float && mask->stride(1) == 1) {
    a.mask = mask->data_as<float>();
    a.mask_stride = mask->stride(0);
  } else if (mask != nullptr) {
    mask_copy.resize(static_cast<size_t>(mask->numel()));
    for (int64_t i = 0; i < mask->size(0); ++i) {
      for (int64_t j = 0; j < mask->size(1); ++j) {
        mask_copy[static_cast<size_t>(i * mask->size(1) + j)] = static_cast<float>(
            load_as_double(mask->dtype(), mask->data(), i * mask->stride(0) + j * mask->stride(1)));
      }
    }
    a.mask = mask_copy.data();
    a.mask_stride = mask->size(1);
  }
  if (a.q_len > 0) run_attention(a, pool_of(ctx));
}

bool is_attention_float(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Half || t == ScalarType::BFloat16;
}

void check_float_operands(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const char* op) {
  ETNP_KERNEL_CHECK(is_attention_float(q.dtype()),
                    op << ": query must be float32, float16 or bfloat16, got " << scalar_type_name(q.dtype()));
  ETNP_KERNEL_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
                    op << ": key (" << scalar_type_name(k.dtype()) << ") and value (" << scalar_type_name(v.dtype())
                       << ") must have query's dtype " << scalar_type_name(q.dtype()));
  ETNP_KERNEL_CHECK(out.dtype() == q.dtype(), op << ": out dtype " << scalar_type_name(out.dtype())
                                                 << " differs from query dtype " << scalar_type_name(q.dtype()));
}

// ---------------------------------------------------------------------------------------------------------
// Cache updates.

/// Checks value [B, S, H, D] against cache [B, L, H, D] (same dtype, same B/H/D).
void check_cache_pair(const Tensor& value, const Tensor& cache, const char* value_name, const char* cache_name,
                      const char* op) {
  check_rank4(value, value_name, kSeqAtDim1, op);
  check_rank4(cache, cache_name, kSeqAtDim1, op);
  ETNP_KERNEL_CHECK(value.dtype() == cache.dtype(), op << ": " << value_name << " dtype "
                                                       << scalar_type_name(value.dtype()) << " differs from "
                                                       << cache_name << " dtype " << scalar_type_name(cache.dtype()));
  for (int d : {0, 2, 3}) {
    ETNP_KERNEL_CHECK(value.size(d) == cache.size(d), op << ": " << value_name << " " << shape_str(value.sizes())
                                                         << " and " << cache_name << " " << shape_str(cache.sizes())
                                                         << " differ in dim " << d);
  }
}

/// cache[b, pos] = value[b, s] for the [H, D] block at one (b, s).
void copy_position(const Tensor& value, Tensor& cache, int64_t b, int64_t s, int64_t pos) {
  const size_t es = value.element_size();
  const int64_t hs = value.size(2), d = value.size(3);
  const auto* src = static_cast<const unsigned char*>(value.data()) +
                    static_cast<size_t>(b * value.stride(0) + s * value.stride(1)) * es;
  auto* dst = static_cast<unsigned char*>(cache.data()) + static_cast<size_t>(b * cache.stride(0) + pos * cache.stride(1)) * es;
  const bool rows_contiguous = value.stride(3) == 1 && cache.stride(3) == 1;
  if (rows_contiguous && value.stride(2) == d && cache.stride(2) == d) {
    std::memmove(dst, src, static_cast<size_t>(hs * d) * es);
    return;
  }
  for (int64_t h = 0; h < hs; ++h) {
    for (int64_t i = 0; i < d; ++i) {
      std::memcpy(dst + static_cast<size_t>(h * cache.stride(2) + i * cache.stride(3)) * es,
                  src + static_cast<size_t>(h * value.stride(2) + i * value.stride(3)) * es, es);
    }
  }
}

/// cache[:, start_pos : start_pos + S] = value, after the checks of update_cache.
void write_cache(const Tensor& value, Tensor& cache, int64_t start_pos, const char* value_name,
                 const char* cache_name, const char* op) {
  check_cache_pair(value, cache, value_name, cache_name, op);
  const int64_t len = value.size(1), cache_len = cache.size(1);
  ETNP_KERNEL_CHECK(start_pos >= 0, op << ": start_pos " << start_pos << " is negative");
  ETNP_KERNEL_CHECK(start_pos + len <= cache_len, op << ": start_pos " << start_pos << " + " << len
                                                     << " positions exceeds the " << cache_len << " positions of "
                                                     << cache_name);
  for (int64_t b = 0; b < value.size(0); ++b) {
    for (int64_t s = 0; s < len; ++s) copy_position(value, cache, b, s, start_pos + s);
  }
}

// update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, *, Tensor(b!) out) -> Tensor(b!)
void update_cache_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "llama::update_cache.out";
  write_cache(args[0]->to_tensor(), args[1]->to_tensor(), args[2]->to_int(), "value", "cache", op);
}

// update_cache_with_indices.out(Tensor value, Tensor(a!) cache, SymInt start_pos, Tensor indices, *,
//                               Tensor(b!) out) -> Tensor(b!)
void update_cache_with_indices_out(KernelContext&, KernelArgs args) {
  constexpr const char* op = "llama::update_cache_with_indices.out";
  const Tensor& value = args[0]->to_tensor();
  Tensor& cache = args[1]->to_tensor();
  const Tensor& indices = args[3]->to_tensor();
  check_cache_pair(value, cache, "value", "cache", op);
  ETNP_KERNEL_CHECK(indices.dim() == 2 && indices.size(0) == value.size(0) && indices.size(1) == value.size(1),
                    op << ": indices must be [" << value.size(0) << ", " << value.size(1) << "] (value's batch and "
                       << "sequence), got " << shape_str(indices.sizes()));
  ETNP_KERNEL_CHECK(indices.dtype() == ScalarType::Long,
                    op << ": indices must be int64, got " << scalar_type_name(indices.dtype()));
  const int64_t cache_len = cache.size(1);
  const int64_t* idx = indices.data_as<int64_t>();
  // All indices first, so that a bad one leaves the cache as it was.
  for (int64_t b = 0; b < value.size(0); ++b) {
    for (int64_t s = 0; s < value.size(1); ++s) {
      const int64_t pos = idx[b * indices.stride(0) + s * indices.stride(1)];
      ETNP_KERNEL_CHECK(pos >= 0 && pos < cache_len, op << ": indices[" << b << ", " << s << "] = " << pos
                                                        << " is outside the " << cache_len
                                                        << " positions of the cache");
    }
  }
  for (int64_t b = 0; b < value.size(0); ++b) {
    for (int64_t s = 0; s < value.size(1); ++s) {
      copy_position(value, cache, b, s, idx[b * indices.stride(0) + s * indices.stride(1)]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Attention kernels.

// custom_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None,
//                 float drpout_p=0., bool is_causal=False, float? scale=None, *, Tensor(a!) out) -> Tensor(a!)
void custom_sdpa_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "llama::custom_sdpa.out";
  const Tensor& q = args[0]->to_tensor();
  const Tensor& k = args[1]->to_tensor();
  const Tensor& v = args[2]->to_tensor();
  const Tensor* mask = args[4]->to_optional_tensor();
  Tensor& out = args[8]->to_tensor();
  const Attention a = attention_problem(q, k, v, args[3]->to_int(), mask, args[5]->to_double(), args[6]->to_bool(),
                                        *args[7], kSeqAtDim1, op);
  check_float_operands(q, k, v, out, op);
  attend(ctx, a, q, k, v, mask, nullptr, nullptr, nullptr, kSeqAtDim1, out, op);
}

// sdpa_with_kv_cache.out(Tensor query, Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache,
//                        SymInt start_pos, SymInt seq_len, Tensor? attn_mask=None, float drpout_p=0.,
//                        bool is_causal=False, float? scale=None, *, Tensor(c!) out) -> Tensor(c!)
void sdpa_with_kv_cache_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "llama::sdpa_with_kv_cache.out";
  const Tensor& q = args[0]->to_tensor();
  const Tensor& key = args[1]->to_tensor();
  const Tensor& value = args[2]->to_tensor();
  Tensor& key_cache = args[3]->to_tensor();
  Tensor& value_cache = args[4]->to_tensor();
  const int64_t start_pos = args[5]->to_int(), seq_len = args[6]->to_int();
  const Tensor* mask = args[7]->to_optional_tensor();
  Tensor& out = args[11]->to_tensor();
  check_rank4(q, "query", kSeqAtDim1, op);
  ETNP_KERNEL_CHECK(seq_len == q.size(1),
                    op << ": seq_len " << seq_len << " differs from the query's " << q.size(1) << " positions");
  // Every check before the caches are written, so that a failing call leaves them as they were.
  const Attention a = attention_problem(q, key_cache, value_cache, start_pos, mask, args[8]->to_double(),
                                        args[9]->to_bool(), *args[10], kSeqAtDim1, op);
  check_float_operands(q, key_cache, value_cache, out, op);
  check_cache_pair(key, key_cache, "key", "key_cache", op);
  check_cache_pair(value, value_cache, "value", "value_cache", op);
  ETNP_KERNEL_CHECK(key.size(1) == seq_len && value.size(1) == seq_len,
                    op << ": key " << shape_str(key.sizes()) << " and value " << shape_str(value.sizes()) << " must have "
                       << seq_len << " positions, as query");
  write_cache(key, key_cache, start_pos, "key", "key_cache", op);
  write_cache(value, value_cache, start_pos, "value", "value_cache", op);
  attend(ctx, a, q, key_cache, value_cache, mask, nullptr, nullptr, nullptr, kSeqAtDim1, out, op);
}

/// The scale and zero point tensors of a quantized operand: float32 and int8, shaped as `t` but 1 in the head
/// dim.
TokenParams token_params(const Tensor& t, const Tensor* zero_points, const Tensor* scales, const char* name,
                         const char* op) {
  ETNP_KERNEL_CHECK(zero_points != nullptr && scales != nullptr,
                    op << ": " << name << "_scales and " << name << "_zero_points must be given");
  ETNP_KERNEL_CHECK(t.dtype() == ScalarType::Char, op << ": " << name << " must be int8, got "
                                                       << scalar_type_name(t.dtype()));
  ETNP_KERNEL_CHECK(scales->dtype() == ScalarType::Float,
                    op << ": " << name << "_scales must be float32, got " << scalar_type_name(scales->dtype()));
  ETNP_KERNEL_CHECK(zero_points->dtype() == ScalarType::Char, op << ": " << name << "_zero_points must be int8, got "
                                                                 << scalar_type_name(zero_points->dtype()));
  for (const Tensor* p : {scales, zero_points}) {
    bool ok = p->dim() == 4 && p->size(3) == 1;
    for (int d = 0; ok && d < 3; ++d) ok = p->size(d) == t.size(d);
    ETNP_KERNEL_CHECK(ok, op << ": " << name << (p == scales ? "_scales " : "_zero_points ") << shape_str(p->sizes())
                             << " must be " << name << "'s shape " << shape_str(t.sizes()) << " with 1 in the last dim");
  }
  return TokenParams{scales, zero_points};
}

// custom_quantized_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None,
//     float drpout_p=0., bool is_causal=False, float? scale=None, Tensor? q_zero_points=None,
//     Tensor? q_scales=None, Tensor? k_zero_points=None, Tensor? k_scales=None, Tensor? v_zero_points=None,
//     Tensor? v_scales=None, bool is_seq_at_dim_2=False, *, Tensor(a!) out) -> Tensor(a!)
void custom_quantized_sdpa_out(KernelContext& ctx, KernelArgs args) {
  constexpr const char* op = "llama::custom_quantized_sdpa.out";
  const Tensor& q = args[0]->to_tensor();
  const Tensor& k = args[1]->to_tensor();
  const Tensor& v = args[2]->to_tensor();
  const Tensor* mask = args[4]->to_optional_tensor();
  const Layout l = args[14]->to_bool() ? kSeqAtDim2 : kSeqAtDim1;
  Tensor& out = args[15]->to_tensor();
  const Attention a = attention_problem(q, k, v, args[3]->to_int(), mask, args[5]->to_double(), args[6]->to_bool(),
                                        *args[7], l, op);
  const TokenParams qp = token_params(q, args[8]->to_optional_tensor(), args[9]->to_optional_tensor(), "q", op);
  const TokenParams kp = token_params(k, args[10]->to_optional_tensor(), args[11]->to_optional_tensor(), "k", op);
  const TokenParams vp = token_params(v, args[12]->to_optional_tensor(), args[13]->to_optional_tensor(), "v", op);
  ETNP_KERNEL_CHECK(out.dtype() == ScalarType::Float,
                    op << ": out must be float32, got " << scalar_type_name(out.dtype()));
  attend(ctx, a, q, k, v, mask, &qp, &kp, &vp, l, out, op);
}

}  // namespace

void register_llm_kernels(KernelRegistry& registry) {
  const std::string ns = "llama::";
  registry.add(KernelEntry{ns + "custom_sdpa.out", custom_sdpa_out, 10});
  registry.add(KernelEntry{ns + "sdpa_with_kv_cache.out", sdpa_with_kv_cache_out, 13, nullptr, {3, 4}});
  registry.add(KernelEntry{ns + "custom_quantized_sdpa.out", custom_quantized_sdpa_out, 17});
  registry.add(KernelEntry{ns + "update_cache.out", update_cache_out, 5, nullptr, {1}});
  registry.add(KernelEntry{ns + "update_cache_with_indices.out", update_cache_with_indices_out, 6, nullptr, {1}});
}

}  // namespace etnp::kernels
