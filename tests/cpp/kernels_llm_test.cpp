// The llama::* kernels of ExecuTorch's LLM exports (src/kernels/llm.cpp) and the sub-byte quantized embeddings,
// each against a reference written from the operator's definition in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/half.h"
#include "etnp/error.h"
#include "etnp/program.h"
#include "kernel_test_util.h"
#include "runtime/registry.h"
#include "tools/writer/writer.h"
#include "writer_test_util.h"

namespace etnp {
namespace {

using testing::call_kernel;
using testing::OwnedTensor;
using testing::random_floats;

EValue T(const std::unique_ptr<OwnedTensor>& t) { return EValue::from_tensor(&t->tensor); }
EValue I(int64_t v) { return EValue::from_int(v); }
EValue D(double v) { return EValue::from_double(v); }
EValue B(bool v) { return EValue::from_bool(v); }
EValue DT(ScalarType t) { return EValue::from_int(static_cast<int64_t>(t)); }
EValue None() { return EValue(); }

std::unique_ptr<OwnedTensor> f32(std::vector<int64_t> sizes, std::vector<float> values = {}) {
  return OwnedTensor::make<float>(ScalarType::Float, std::move(sizes), std::move(values));
}

/// The message of the etnp::Error `fn` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

/// Runs kernel `name` with a context on `pool`.
void call_on(ThreadPool& pool, const std::string& name, std::vector<EValue>& args) {
  const KernelEntry* entry = runtime::kernel_registry().find(name);
  ASSERT_NE(entry, nullptr) << name;
  std::vector<EValue*> ptrs;
  for (auto& a : args) ptrs.push_back(&a);
  KernelContext ctx(&pool, nullptr);
  entry->fn(ctx, KernelArgs(ptrs));
}

// ---- reference attention -----------------------------------------------------------------------------------

/// A [B, S, H, D] operand in double, indexed logically (the layout of the kernels' tensors is chosen apart).
struct Heads {
  int64_t b, s, h, d;
  std::vector<double> v;
  double at(int64_t bi, int64_t si, int64_t hi, int64_t di) const { return v[static_cast<size_t>(((bi * s + si) * h + hi) * d + di)]; }
  double& at(int64_t bi, int64_t si, int64_t hi, int64_t di) { return v[static_cast<size_t>(((bi * s + si) * h + hi) * d + di)]; }
};

Heads random_heads(int64_t b, int64_t s, int64_t h, int64_t d, uint32_t seed) {
  const std::vector<float> r = random_floats(static_cast<size_t>(b * s * h * d), -1.5f, 1.5f, seed);
  return Heads{b, s, h, d, std::vector<double>(r.begin(), r.end())};
}

/// SDPA by the definition: row i (position start + i) of query head h against kv head h / (H / Hkv), over keys
/// [0, start + i] (causal), [0, num_keys) otherwise; mask added to the scaled scores.
Heads reference_sdpa(const Heads& q, const Heads& k, const Heads& v, int64_t start, bool causal, int64_t num_keys,
                     const std::vector<double>* mask, double scale) {
  Heads out{q.b, q.s, q.h, q.d, std::vector<double>(q.v.size())};
  const int64_t group = q.h / k.h;
  for (int64_t b = 0; b < q.b; ++b) {
    for (int64_t h = 0; h < q.h; ++h) {
      for (int64_t i = 0; i < q.s; ++i) {
        const int64_t n = causal ? start + i + 1 : num_keys;
        std::vector<double> sc(static_cast<size_t>(n));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < q.d; ++e) dot += q.at(b, i, h, e) * k.at(b, j, h / group, e);
          sc[static_cast<size_t>(j)] = dot * scale + (mask ? (*mask)[static_cast<size_t>(i * num_keys + j)] : 0.0);
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < q.d; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += sc[static_cast<size_t>(j)] / sum * v.at(b, j, h / group, e);
          out.at(b, i, h, e) = acc;
        }
      }
    }
  }
  return out;
}

/// A float32 tensor holding `x` in [B, S, H, D] order, or [B, H, S, D] with `seq_at_dim_2`.
std::unique_ptr<OwnedTensor> to_tensor(const Heads& x, bool seq_at_dim_2 = false) {
  std::vector<int64_t> sizes = seq_at_dim_2 ? std::vector<int64_t>{x.b, x.h, x.s, x.d} : std::vector<int64_t>{x.b, x.s, x.h, x.d};
  auto t = f32(sizes, std::vector<float>(x.v.size()));
  float* p = t->tensor.data_as<float>();
  for (int64_t b = 0; b < x.b; ++b)
    for (int64_t s = 0; s < x.s; ++s)
      for (int64_t h = 0; h < x.h; ++h)
        for (int64_t d = 0; d < x.d; ++d) {
          const int64_t off = seq_at_dim_2 ? ((b * x.h + h) * x.s + s) * x.d + d : ((b * x.s + s) * x.h + h) * x.d + d;
          p[off] = static_cast<float>(x.at(b, s, h, d));
        }
  return t;
}

/// Largest |out - ref| over the logical elements, out in [B, S, H, D] (or [B, H, S, D]) order.
double max_error(const OwnedTensor& out, const Heads& ref, bool seq_at_dim_2 = false) {
  const std::vector<float> o = out.values<float>();
  double err = 0;
  for (int64_t b = 0; b < ref.b; ++b)
    for (int64_t s = 0; s < ref.s; ++s)
      for (int64_t h = 0; h < ref.h; ++h)
        for (int64_t d = 0; d < ref.d; ++d) {
          const int64_t off =
              seq_at_dim_2 ? ((b * ref.h + h) * ref.s + s) * ref.d + d : ((b * ref.s + s) * ref.h + h) * ref.d + d;
          const double diff = std::abs(double(o[static_cast<size_t>(off)]) - ref.at(b, s, h, d));
          err = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(err, diff);
        }
  return err;
}

struct SdpaCase {
  int64_t q_len, start, heads, kv_heads, head_dim;
  bool mask;
};

std::string describe(const SdpaCase& c) {
  return "S=" + std::to_string(c.q_len) + " start=" + std::to_string(c.start) + " H=" + std::to_string(c.heads) +
         " Hkv=" + std::to_string(c.kv_heads) + " D=" + std::to_string(c.head_dim) + (c.mask ? " mask" : "");
}

const std::vector<SdpaCase> kSdpaCases = {
    {1, 0, 4, 2, 16, false},  {1, 9, 4, 2, 64, false},  {1, 30, 4, 1, 80, false}, {1, 5, 4, 4, 16, true},
    {64, 0, 4, 2, 64, false}, {70, 3, 4, 1, 16, false}, {64, 0, 4, 2, 80, true},  {7, 4, 4, 1, 64, true},
    {5, 2, 2, 2, 16, false},
};

TEST(LlmKernels, CustomSdpaMatchesReference) {
  uint32_t seed = 1;
  for (const SdpaCase& c : kSdpaCases) {
    for (bool causal : {true, false}) {
      if (causal && c.mask) continue;
      SCOPED_TRACE(describe(c) + (causal ? " causal" : ""));
      const int64_t cache_len = c.start + c.q_len + 6;
      const Heads q = random_heads(1, c.q_len, c.heads, c.head_dim, seed++);
      Heads k = random_heads(1, cache_len, c.kv_heads, c.head_dim, seed++);
      Heads v = random_heads(1, cache_len, c.kv_heads, c.head_dim, seed++);
      std::vector<double> mask;
      if (c.mask) {
        const std::vector<float> m = random_floats(static_cast<size_t>(c.q_len * cache_len), -2.f, 2.f, seed++);
        mask.assign(m.begin(), m.end());
      }
      const int64_t visible = c.mask ? cache_len : c.start + c.q_len;
      const Heads ref = reference_sdpa(q, k, v, c.start, causal, visible, c.mask ? &mask : nullptr,
                                       1.0 / std::sqrt(double(c.head_dim)));
      // Without a mask, cache positions past start + S are never read: NaN there would show.
      if (!c.mask) {
        for (int64_t j = c.start + c.q_len; j < cache_len; ++j)
          for (int64_t h = 0; h < c.kv_heads; ++h)
            for (int64_t e = 0; e < c.head_dim; ++e) k.at(0, j, h, e) = v.at(0, j, h, e) = std::nan("");
      }
      auto qt = to_tensor(q), kt = to_tensor(k), vt = to_tensor(v);
      auto mt = f32({c.q_len, cache_len}, std::vector<float>(mask.begin(), mask.end()));
      auto out = f32({1, c.q_len, c.heads, c.head_dim});
      std::vector<EValue> args = {T(qt), T(kt), T(vt), I(c.start), c.mask ? T(mt) : None(), D(0.0), B(causal),
                                  None(), T(out), T(out)};
      call_kernel("llama::custom_sdpa.out", args);
      EXPECT_LT(max_error(*out, ref), 2e-5);
    }
  }
}

TEST(LlmKernels, CustomSdpaScaleBatchAndHalfPrecision) {
  // An explicit scale, batch 2.
  const Heads q = random_heads(2, 3, 4, 2 * 8, 11), k = random_heads(2, 9, 2, 16, 12), v = random_heads(2, 9, 2, 16, 13);
  const Heads ref = reference_sdpa(q, k, v, 2, true, 5, nullptr, 0.3);
  auto qt = to_tensor(q), kt = to_tensor(k), vt = to_tensor(v);
  auto out = f32({2, 3, 4, 16});
  std::vector<EValue> args = {T(qt), T(kt), T(vt), I(2), None(), D(0.0), B(true), D(0.3), T(out), T(out)};
  call_kernel("llama::custom_sdpa.out", args);
  EXPECT_LT(max_error(*out, ref), 2e-5);

  // float16 operands: converted to float32, the result rounded to float16.
  auto to_half = [](const OwnedTensor& t) {
    const std::vector<float> f = t.values<float>();
    std::vector<Half> h(f.begin(), f.end());
    return OwnedTensor::make<Half>(ScalarType::Half, std::vector<int64_t>(t.tensor.sizes().begin(), t.tensor.sizes().end()), h);
  };
  auto qh = to_half(*qt), kh = to_half(*kt), vh = to_half(*vt);
  auto outh = OwnedTensor::make<Half>(ScalarType::Half, {2, 3, 4, 16}, {});
  std::vector<EValue> hargs = {T(qh), T(kh), T(vh), I(2), None(), D(0.0), B(true), D(0.3), T(outh), T(outh)};
  call_kernel("llama::custom_sdpa.out", hargs);
  const std::vector<Half> oh = outh->values<Half>();
  const std::vector<float> of = out->values<float>();
  for (size_t i = 0; i < of.size(); ++i) ASSERT_NEAR(static_cast<float>(oh[i]), of[i], 1e-2) << i;
}

/// Same bits whatever the thread count: a prefill and a decode step big enough to be split.
TEST(LlmKernels, SdpaSameBitsOnOneAndManyThreads) {
  for (int64_t q_len : {96, 1}) {
    const int64_t cache_len = 256, start = q_len == 1 ? 200 : 40;
    const Heads q = random_heads(1, q_len, 8, 64, 21), k = random_heads(1, cache_len, 2, 64, 22),
                v = random_heads(1, cache_len, 2, 64, 23);
    auto qt = to_tensor(q), kt = to_tensor(k), vt = to_tensor(v);
    auto out1 = f32({1, q_len, 8, 64}), out4 = f32({1, q_len, 8, 64});
    ThreadPool one(1), four(4);
    std::vector<EValue> a1 = {T(qt), T(kt), T(vt), I(start), None(), D(0.0), B(true), None(), T(out1), T(out1)};
    std::vector<EValue> a4 = {T(qt), T(kt), T(vt), I(start), None(), D(0.0), B(true), None(), T(out4), T(out4)};
    call_on(one, "llama::custom_sdpa.out", a1);
    call_on(four, "llama::custom_sdpa.out", a4);
    EXPECT_EQ(std::memcmp(out1->storage.data(), out4->storage.data(), out1->storage.size()), 0) << q_len;
    EXPECT_LT(max_error(*out4, reference_sdpa(q, k, v, start, true, 0, nullptr, 0.125)), 2e-5);
  }
}

TEST(LlmKernels, SdpaWithKvCacheWritesCachesThenAttends) {
  for (bool causal : {true, false}) {
    const int64_t s = 3, start = 4, cache_len = 12;
    const Heads q = random_heads(1, s, 4, 16, 31), key = random_heads(1, s, 2, 16, 32), val = random_heads(1, s, 2, 16, 33);
    Heads kc = random_heads(1, cache_len, 2, 16, 34), vc = random_heads(1, cache_len, 2, 16, 35);
    auto qt = to_tensor(q), keyt = to_tensor(key), valt = to_tensor(val), kct = to_tensor(kc), vct = to_tensor(vc);
    const std::vector<float> kc_before = kct->values<float>(), vc_before = vct->values<float>();
    for (int64_t i = 0; i < s; ++i)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t e = 0; e < 16; ++e) {
          kc.at(0, start + i, h, e) = key.at(0, i, h, e);
          vc.at(0, start + i, h, e) = val.at(0, i, h, e);
        }
    auto out = f32({1, s, 4, 16});
    std::vector<EValue> args = {T(qt), T(keyt), T(valt), T(kct), T(vct), I(start), I(s), None(), D(0.0), B(causal),
                                None(), T(out), T(out)};
    call_kernel("llama::sdpa_with_kv_cache.out", args);
    const std::vector<float> kc_after = kct->values<float>(), vc_after = vct->values<float>();
    const size_t row = 2 * 16;
    for (int64_t p = 0; p < cache_len; ++p) {
      for (size_t e = 0; e < row; ++e) {
        const size_t off = static_cast<size_t>(p) * row + e;
        if (p >= start && p < start + s) {
          const size_t src = static_cast<size_t>(p - start) * row + e;
          EXPECT_EQ(kc_after[off], keyt->values<float>()[src]);
          EXPECT_EQ(vc_after[off], valt->values<float>()[src]);
        } else {
          EXPECT_EQ(kc_after[off], kc_before[off]);
          EXPECT_EQ(vc_after[off], vc_before[off]);
        }
      }
    }
    EXPECT_LT(max_error(*out, reference_sdpa(q, kc, vc, start, causal, start + s, nullptr, 0.25)), 2e-5) << causal;
  }
}

// ---- quantized SDPA ------------------------------------------------------------------------------------------

/// Per-token asymmetric int8 quantization of `x` (any scheme works: the reference dequantizes the same bytes).
struct QuantHeads {
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int8_t> zps;
  Heads dequantized;
};

QuantHeads quantize(const Heads& x) {
  QuantHeads r;
  r.dequantized = x;
  const int64_t tokens = x.b * x.s * x.h;
  r.q.resize(x.v.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const double* row = x.v.data() + t * x.d;
    double lo = 0, hi = 0;
    for (int64_t e = 0; e < x.d; ++e) lo = std::min(lo, row[e]), hi = std::max(hi, row[e]);
    const float scale = static_cast<float>((hi - lo) / 255.0);
    const auto zp = static_cast<int8_t>(std::lround(-128 - lo / scale));
    r.scales.push_back(scale);
    r.zps.push_back(zp);
    for (int64_t e = 0; e < x.d; ++e) {
      const long v = std::clamp(std::lround(row[e] / scale) + zp, -128L, 127L);
      r.q[static_cast<size_t>(t * x.d + e)] = static_cast<int8_t>(v);
      r.dequantized.v[static_cast<size_t>(t * x.d + e)] = (double(v) - zp) * double(scale);
    }
  }
  return r;
}

/// Tensors of a quantized operand in either layout: values [.., D], scales and zero points [.., 1].
struct QuantTensors {
  std::unique_ptr<OwnedTensor> values, scales, zps;
};

QuantTensors quant_tensors(const QuantHeads& x, bool seq_at_dim_2) {
  const Heads& h = x.dequantized;
  auto sizes = [&](int64_t last) {
    return seq_at_dim_2 ? std::vector<int64_t>{h.b, h.h, h.s, last} : std::vector<int64_t>{h.b, h.s, h.h, last};
  };
  QuantTensors t;
  t.values = OwnedTensor::make<int8_t>(ScalarType::Char, sizes(h.d), std::vector<int8_t>(x.q.size()));
  t.scales = f32(sizes(1), std::vector<float>(x.scales.size()));
  t.zps = OwnedTensor::make<int8_t>(ScalarType::Char, sizes(1), std::vector<int8_t>(x.zps.size()));
  for (int64_t b = 0; b < h.b; ++b)
    for (int64_t s = 0; s < h.s; ++s)
      for (int64_t hh = 0; hh < h.h; ++hh) {
        const int64_t token = (b * h.s + s) * h.h + hh;
        const int64_t dst = seq_at_dim_2 ? (b * h.h + hh) * h.s + s : token;
        t.scales->tensor.data_as<float>()[dst] = x.scales[static_cast<size_t>(token)];
        t.zps->tensor.data_as<int8_t>()[dst] = x.zps[static_cast<size_t>(token)];
        std::memcpy(t.values->tensor.data_as<int8_t>() + dst * h.d, x.q.data() + token * h.d, static_cast<size_t>(h.d));
      }
  return t;
}

TEST(LlmKernels, CustomQuantizedSdpaMatchesDequantizedReference) {
  uint32_t seed = 100;
  for (bool seq_at_dim_2 : {false, true}) {
    for (const SdpaCase& c : kSdpaCases) {
      SCOPED_TRACE(describe(c) + (seq_at_dim_2 ? " seq at dim 2" : ""));
      const int64_t cache_len = c.start + c.q_len + 5;
      const QuantHeads q = quantize(random_heads(1, c.q_len, c.heads, c.head_dim, seed++));
      const QuantHeads k = quantize(random_heads(1, cache_len, c.kv_heads, c.head_dim, seed++));
      const QuantHeads v = quantize(random_heads(1, cache_len, c.kv_heads, c.head_dim, seed++));
      // With a mask: not causal, every cache position.
      const std::vector<float> m = random_floats(static_cast<size_t>(c.q_len * cache_len), -2.f, 2.f, seed++);
      const std::vector<double> mask(m.begin(), m.end());
      auto mt = f32({c.q_len, cache_len}, m);
      const Heads ref = reference_sdpa(q.dequantized, k.dequantized, v.dequantized, c.start, !c.mask, cache_len,
                                       c.mask ? &mask : nullptr, 1.0 / std::sqrt(double(c.head_dim)));
      QuantTensors qt = quant_tensors(q, seq_at_dim_2), kt = quant_tensors(k, seq_at_dim_2),
                   vt = quant_tensors(v, seq_at_dim_2);
      auto out = f32(seq_at_dim_2 ? std::vector<int64_t>{1, c.heads, c.q_len, c.head_dim}
                                  : std::vector<int64_t>{1, c.q_len, c.heads, c.head_dim});
      std::vector<EValue> args = {T(qt.values), T(kt.values), T(vt.values), I(c.start), c.mask ? T(mt) : None(), D(0.0), B(!c.mask),
                                  None(), T(qt.zps), T(qt.scales), T(kt.zps), T(kt.scales), T(vt.zps),
                                  T(vt.scales), B(seq_at_dim_2), T(out), T(out)};
      call_kernel("llama::custom_quantized_sdpa.out", args);
      EXPECT_LT(max_error(*out, ref, seq_at_dim_2), 2e-5);
    }
  }
}

// ---- cache updates -------------------------------------------------------------------------------------------

TEST(LlmKernels, UpdateCacheWritesOnlyTheRowsInPlace) {
  const std::vector<float> value = random_floats(2 * 3 * 2 * 4, -1, 1, 41);
  auto v = f32({2, 3, 2, 4}, value);
  const std::vector<float> initial = random_floats(2 * 8 * 2 * 4, 5, 6, 42);
  auto cache = f32({2, 8, 2, 4}, initial);
  auto out = f32({1}, {123.f});
  std::vector<EValue> args = {T(v), T(cache), I(5), T(out), T(out)};
  call_kernel("llama::update_cache.out", args);
  const std::vector<float> c = cache->values<float>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t p = 0; p < 8; ++p)
      for (int64_t e = 0; e < 8; ++e) {
        const size_t off = static_cast<size_t>((b * 8 + p) * 8 + e);
        const float want = p >= 5 ? value[static_cast<size_t>((b * 3 + p - 5) * 8 + e)] : initial[off];
        ASSERT_EQ(c[off], want) << b << " " << p << " " << e;
      }
  EXPECT_EQ(out->values<float>()[0], 123.f);  // the placeholder output is left alone

  // int8 caches (the quantized KV cache and its zero points) the same way.
  auto vi = OwnedTensor::make<int8_t>(ScalarType::Char, {1, 1, 1, 2}, {-7, 9});
  auto ci = OwnedTensor::make<int8_t>(ScalarType::Char, {1, 3, 1, 2}, {1, 1, 1, 1, 1, 1});
  std::vector<EValue> iargs = {T(vi), T(ci), I(1), T(out), T(out)};
  call_kernel("llama::update_cache.out", iargs);
  EXPECT_EQ(ci->values<int8_t>(), (std::vector<int8_t>{1, 1, -7, 9, 1, 1}));
}

TEST(LlmKernels, UpdateCacheWithIndicesScattersRows) {
  auto v = f32({1, 2, 1, 2}, {1, 2, 3, 4});
  auto cache = f32({1, 4, 1, 2}, std::vector<float>(8, 0.f));
  auto idx = OwnedTensor::make<int64_t>(ScalarType::Long, {1, 2}, {3, 0});
  auto out = f32({1});
  std::vector<EValue> args = {T(v), T(cache), I(2), T(idx), T(out), T(out)};  // start_pos is not used
  call_kernel("llama::update_cache_with_indices.out", args);
  EXPECT_EQ(cache->values<float>(), (std::vector<float>{3, 4, 0, 0, 0, 0, 1, 2}));

  auto bad = OwnedTensor::make<int64_t>(ScalarType::Long, {1, 2}, {1, 4});
  std::vector<EValue> bargs = {T(v), T(cache), I(0), T(bad), T(out), T(out)};
  EXPECT_EQ(error_of([&] { call_kernel("llama::update_cache_with_indices.out", bargs); }),
            "llama::update_cache_with_indices.out: indices[0, 1] = 4 is outside the 4 positions of the cache");
  EXPECT_EQ(cache->values<float>(), (std::vector<float>{3, 4, 0, 0, 0, 0, 1, 2}));  // nothing written
  auto idx32 = OwnedTensor::make<int32_t>(ScalarType::Int, {1, 2}, {0, 1});
  std::vector<EValue> targs = {T(v), T(cache), I(0), T(idx32), T(out), T(out)};
  EXPECT_EQ(error_of([&] { call_kernel("llama::update_cache_with_indices.out", targs); }),
            "llama::update_cache_with_indices.out: indices must be int64, got int32");
}

TEST(LlmKernels, KernelsDeclareTheArgumentsTheyWrite) {
  auto mutated = [](const char* name) { return runtime::kernel_registry().find(name)->mutated_args; };
  EXPECT_EQ(mutated("llama::update_cache.out"), (std::vector<int>{1}));
  EXPECT_EQ(mutated("llama::update_cache_with_indices.out"), (std::vector<int>{1}));
  EXPECT_EQ(mutated("llama::sdpa_with_kv_cache.out"), (std::vector<int>{3, 4}));
  EXPECT_TRUE(mutated("llama::custom_sdpa.out").empty());
  EXPECT_TRUE(mutated("llama::custom_quantized_sdpa.out").empty());
}

// ---- errors --------------------------------------------------------------------------------------------------

TEST(LlmKernels, BadArgumentsNameTheOperatorAndValues) {
  auto q = f32({1, 2, 4, 8}, std::vector<float>(64, 0.1f));
  auto k = f32({1, 6, 2, 8}, std::vector<float>(96, 0.1f));
  auto v = f32({1, 6, 2, 8}, std::vector<float>(96, 0.1f));
  auto out = f32({1, 2, 4, 8});
  const std::string op = "llama::custom_sdpa.out";
  auto sdpa = [&](EValue q_, EValue k_, EValue start, EValue mask, double dropout, bool causal) {
    std::vector<EValue> a = {q_, k_, T(v), start, mask, D(dropout), B(causal), None(), T(out), T(out)};
    return error_of([&] { call_kernel(op, a); });
  };
  EXPECT_EQ(sdpa(T(q), T(k), I(5), None(), 0.0, true),
            op + ": start_pos 5 + 2 query positions exceeds the 6 positions of the key/value cache");
  EXPECT_EQ(sdpa(T(q), T(k), I(-1), None(), 0.0, true), op + ": start_pos -1 is negative");
  EXPECT_EQ(sdpa(T(q), T(k), I(0), None(), 0.5, true), op + ": drpout_p must be 0 (inference only), got 0.5");
  auto q3 = f32({1, 2, 3, 8}, std::vector<float>(48));
  EXPECT_EQ(sdpa(T(q3), T(k), I(0), None(), 0.0, true), op + ": 3 query heads are not a multiple of 2 kv heads");
  auto q3d = f32({2, 4, 8}, std::vector<float>(64));
  EXPECT_EQ(sdpa(T(q3d), T(k), I(0), None(), 0.0, true), op + ": query must be 4-D [B, S, H, D], got [2, 4, 8]");
  auto kd = f32({1, 6, 2, 4}, std::vector<float>(48));
  EXPECT_EQ(sdpa(T(q), T(kd), I(0), None(), 0.0, true),
            op + ": query [1, 2, 4, 8], key [1, 6, 2, 4] and value [1, 6, 2, 8] differ in dim 3");
  auto mask = f32({2, 6}, std::vector<float>(12));
  EXPECT_EQ(sdpa(T(q), T(k), I(0), T(mask), 0.0, true), op + ": attn_mask and is_causal cannot both be given");
  auto mask_short = f32({2, 4}, std::vector<float>(8));
  EXPECT_EQ(sdpa(T(q), T(k), I(0), T(mask_short), 0.0, false),
            op + ": attn_mask must be [2, 6] (query positions x cache positions), got [2, 4]");
  auto kh = OwnedTensor::make<Half>(ScalarType::Half, {1, 6, 2, 8}, std::vector<Half>(96));
  EXPECT_EQ(sdpa(T(q), T(kh), I(0), None(), 0.0, true),
            op + ": key (float16) and value (float32) must have query's dtype float32");
  auto qi = OwnedTensor::make<int32_t>(ScalarType::Int, {1, 2, 4, 8}, std::vector<int32_t>(64));
  EXPECT_EQ(sdpa(T(qi), T(k), I(0), None(), 0.0, true),
            op + ": query must be float32, float16 or bfloat16, got int32");

  // update_cache
  const std::string uc = "llama::update_cache.out";
  auto val = f32({1, 3, 2, 8}, std::vector<float>(48));
  auto small = f32({1});
  std::vector<EValue> a1 = {T(val), T(k), I(4), T(small), T(small)};
  EXPECT_EQ(error_of([&] { call_kernel(uc, a1); }),
            uc + ": start_pos 4 + 3 positions exceeds the 6 positions of cache");
  std::vector<EValue> a2 = {T(val), T(q), I(0), T(small), T(small)};
  EXPECT_EQ(error_of([&] { call_kernel(uc, a2); }),
            uc + ": value [1, 3, 2, 8] and cache [1, 2, 4, 8] differ in dim 2");
  std::vector<EValue> a3 = {T(val), T(kh), I(0), T(small), T(small)};
  EXPECT_EQ(error_of([&] { call_kernel(uc, a3); }), uc + ": value dtype float32 differs from cache dtype float16");
  std::vector<EValue> a4 = {T(val), T(k), I(-2), T(small), T(small)};
  EXPECT_EQ(error_of([&] { call_kernel(uc, a4); }), uc + ": start_pos -2 is negative");

  // sdpa_with_kv_cache: a failing call leaves the caches unchanged.
  const std::string sw = "llama::sdpa_with_kv_cache.out";
  auto key = f32({1, 2, 2, 8}, std::vector<float>(32, 7.f));
  auto kc = f32({1, 6, 2, 8}, std::vector<float>(96, 0.f)), vc = f32({1, 6, 2, 8}, std::vector<float>(96, 0.f));
  std::vector<EValue> s1 = {T(q), T(key), T(key), T(kc), T(vc), I(5), I(2), None(), D(0.0), B(true), None(),
                            T(out), T(out)};
  EXPECT_EQ(error_of([&] { call_kernel(sw, s1); }),
            sw + ": start_pos 5 + 2 query positions exceeds the 6 positions of the key/value cache");
  EXPECT_EQ(kc->values<float>(), std::vector<float>(96, 0.f));
  std::vector<EValue> s2 = {T(q), T(key), T(key), T(kc), T(vc), I(0), I(3), None(), D(0.0), B(true), None(),
                            T(out), T(out)};
  EXPECT_EQ(error_of([&] { call_kernel(sw, s2); }), sw + ": seq_len 3 differs from the query's 2 positions");

  // custom_quantized_sdpa
  const std::string qs = "llama::custom_quantized_sdpa.out";
  auto qq = OwnedTensor::make<int8_t>(ScalarType::Char, {1, 2, 4, 8}, std::vector<int8_t>(64));
  auto kq = OwnedTensor::make<int8_t>(ScalarType::Char, {1, 6, 2, 8}, std::vector<int8_t>(96));
  auto qsc = f32({1, 2, 4, 1}, std::vector<float>(8, 1.f));
  auto qzp = OwnedTensor::make<int8_t>(ScalarType::Char, {1, 2, 4, 1}, std::vector<int8_t>(8));
  auto ksc = f32({1, 6, 2, 1}, std::vector<float>(12, 1.f));
  auto kzp = OwnedTensor::make<int8_t>(ScalarType::Char, {1, 6, 2, 1}, std::vector<int8_t>(12));
  auto bad_sc = f32({1, 6, 1, 1}, std::vector<float>(6, 1.f));
  auto quant = [&](EValue q_, EValue kscales, EValue vscales) {
    std::vector<EValue> a = {q_, T(kq), T(kq), I(0), None(), D(0.0), B(true), None(), T(qzp), T(qsc),
                             T(kzp), kscales, T(kzp), vscales, B(false), T(out), T(out)};
    return error_of([&] { call_kernel(qs, a); });
  };
  EXPECT_EQ(quant(T(qq), T(ksc), None()), qs + ": v_scales and v_zero_points must be given");
  EXPECT_EQ(quant(T(qq), T(bad_sc), T(ksc)),
            qs + ": k_scales [1, 6, 1, 1] must be k's shape [1, 6, 2, 8] with 1 in the last dim");
  EXPECT_EQ(quant(T(q), T(ksc), T(ksc)), qs + ": q must be int8, got float32");
  EXPECT_EQ(quant(T(qq), T(ksc), T(ksc)), "");
}

// ---- quantized embeddings (quantized.cpp) ---------------------------------------------------------------------

/// Packs values in [-2^(nbit-1), 2^(nbit-1)) as the official definition unpacks them: 4-bit two per byte, the
/// first in the high nibble; 2-bit four per byte, the first in the lowest bits; each stored + 2^(nbit-1).
std::vector<uint8_t> pack(const std::vector<int>& values, int nbit) {
  const int per_byte = 8 / nbit, offset = 1 << (nbit - 1);
  std::vector<uint8_t> bytes(values.size() / static_cast<size_t>(per_byte), 0);
  for (size_t i = 0; i < values.size(); ++i) {
    const auto u = static_cast<unsigned>(values[i] + offset);
    const size_t j = i % static_cast<size_t>(per_byte);
    const unsigned shift = nbit == 4 ? (j == 0 ? 4u : 0u) : static_cast<unsigned>(2 * j);
    bytes[i / static_cast<size_t>(per_byte)] = static_cast<uint8_t>(bytes[i / static_cast<size_t>(per_byte)] | (u << shift));
  }
  return bytes;
}

TEST(LlmKernels, SubByteEmbeddingsMatchReferenceUnpacking) {
  const int64_t rows = 5, dim = 16, groups = 2;
  for (int nbit : {4, 2}) {
    const int lo = -(1 << (nbit - 1)), hi = (1 << (nbit - 1)) - 1;
    std::vector<int> values(static_cast<size_t>(rows * dim));
    for (size_t i = 0; i < values.size(); ++i) values[i] = lo + static_cast<int>((i * 7 + i / 3) % static_cast<size_t>(hi - lo + 1));
    const std::vector<float> scales = random_floats(rows * groups, 0.1f, 2.f, 51);
    const std::vector<float> zps = random_floats(rows * groups, -2.f, 2.f, 52);
    auto w = OwnedTensor::make<uint8_t>(ScalarType::Byte, {rows, dim * nbit / 8}, pack(values, nbit));
    auto sc = f32({rows, groups}, scales);
    auto zp = f32({rows, groups}, zps);
    auto idx = OwnedTensor::make<int64_t>(ScalarType::Long, {2, 2}, {4, 0, 2, 4});
    const std::string name = "quantized_decomposed::embedding_" + std::to_string(nbit) + "bit";
    for (bool with_zp : {false, true}) {
      for (int variant = 0; variant < 3; ++variant) {  // .out, .dtype_out with None, .dtype_out with Half
        SCOPED_TRACE(name + (with_zp ? " zp" : "") + " variant " + std::to_string(variant));
        const bool half = variant == 2;
        auto sc_h = OwnedTensor::make<Half>(ScalarType::Half, {rows, groups}, std::vector<Half>(scales.begin(), scales.end()));
        auto zp_h = OwnedTensor::make<Half>(ScalarType::Half, {rows, groups}, std::vector<Half>(zps.begin(), zps.end()));
        auto out = half ? OwnedTensor::make<Half>(ScalarType::Half, {2, 2, dim}, {}) : f32({2, 2, dim});
        EValue zarg = with_zp ? (half ? T(zp_h) : T(zp)) : None();
        std::vector<EValue> args = {T(w), half ? T(sc_h) : T(sc), zarg, I(lo), I(hi), T(idx)};
        if (variant > 0) args.push_back(half ? DT(ScalarType::Half) : None());
        args.push_back(T(out));
        args.push_back(T(out));
        call_kernel(name + (variant > 0 ? ".dtype_out" : ".out"), args);
        const int64_t* ix = idx->tensor.data_as<int64_t>();
        for (int64_t t = 0; t < 4; ++t) {
          for (int64_t j = 0; j < dim; ++j) {
            const size_t g = static_cast<size_t>(ix[t] * groups + j / (dim / groups));
            const double s = half ? double(float(Half(scales[g]))) : scales[g];
            const double z = with_zp ? (half ? double(float(Half(zps[g]))) : zps[g]) : 0.0;
            const double want = (values[static_cast<size_t>(ix[t] * dim + j)] - z) * s;
            const double got = half ? double(float(out->values<Half>()[static_cast<size_t>(t * dim + j)]))
                                    : out->values<float>()[static_cast<size_t>(t * dim + j)];
            ASSERT_NEAR(got, want, half ? 2e-2 * std::abs(want) + 1e-3 : 1e-5) << t << " " << j;
          }
        }
      }
    }
    auto bad = OwnedTensor::make<int64_t>(ScalarType::Long, {1}, {rows});
    auto out = f32({1, dim});
    std::vector<EValue> args = {T(w), T(sc), None(), I(lo), I(hi), T(bad), T(out), T(out)};
    EXPECT_EQ(error_of([&] { call_kernel(name + ".out", args); }),
              name + ".out: index 5 is out of range for 5 embeddings");
  }
}

// ---- a method whose update_cache writes its input ------------------------------------------------------------

std::vector<uint8_t> cache_update_program(bool cache_planned) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t value = m.planned_tensor(writer_testing::f32({1, 1, 1, 2}));
  const int32_t cache = cache_planned ? m.planned_tensor(writer_testing::f32({1, 3, 1, 2}))
                                      : m.unplanned_tensor(writer_testing::f32({1, 3, 1, 2}));
  const int32_t placeholder = m.planned_tensor(writer_testing::f32({1}));
  const int32_t copy = m.planned_tensor(writer_testing::f32({1, 3, 1, 2}));
  m.kernel("llama::update_cache.out", {value, cache, m.int_value(1), placeholder, placeholder});
  m.kernel("aten::clone.out", {cache, m.none(), copy, copy});
  m.set_inputs({value, cache});
  m.set_outputs({copy});
  return w.serialize();
}

TEST(LlmKernels, MethodWhoseUpdateCacheWritesAnInputSaysSo) {
  for (bool planned : {false, true}) {
    Program program = writer_testing::load_bytes(cache_update_program(planned));
    std::unique_ptr<Method> method = program.load_method("forward");
    EXPECT_FALSE(method->writes_input(0));
    EXPECT_EQ(method->writes_input(1), !planned);
    const std::vector<float> value = {7, 8};
    std::vector<float> cache = {1, 2, 3, 4, 5, 6};
    const std::vector<Value> outs = writer_testing::exec(
        *method, {writer_testing::tensor_input(value, {1, 1, 1, 2}), writer_testing::tensor_input(cache, {1, 3, 1, 2})});
    EXPECT_EQ(writer_testing::floats(outs.at(0)), (std::vector<float>{1, 2, 7, 8, 5, 6}));
    EXPECT_EQ(cache, planned ? (std::vector<float>{1, 2, 3, 4, 5, 6}) : (std::vector<float>{1, 2, 7, 8, 5, 6}));
  }
}

}  // namespace
}  // namespace etnp
