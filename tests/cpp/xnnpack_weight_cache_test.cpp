// XnnpackBackend's weight_cache_enabled: with it on, weights the delegate's own kernels pack are held once in
// the process (compute::WeightCache), whichever methods and programs pack them; the proof is by memory and by
// pointer, never by the flag. Off (the default) every delegate keeps its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/xnnpack/xnnpack_backend.h"
#include "compute/int4_gemm.h"
#include "compute/packed_gemm.h"
#include "compute/weight_cache.h"
#include "core/cpu_features.h"
#include "etnp/backend.h"
#include "etnp/etnp.h"
#include "fixtures.h"
#include "kernel_test_util.h"
#include "xnnpack_graph_builder.h"

namespace etnp::xnn {
namespace {

using etnp::testing::OwnedTensor;
using testing::GraphBuilder;
using testing::XNodeUnion;

std::shared_ptr<Backend> xnnpack() { return find_backend("XnnpackBackend"); }

// Sets the process-wide option for a scope, and back to what it was (other tests share the process).
class GlobalCache {
 public:
  explicit GlobalCache(bool on) : was_(std::get<bool>(xnnpack()->get_option("weight_cache_enabled"))) {
    xnnpack()->set_option("weight_cache_enabled", on);
  }
  ~GlobalCache() { xnnpack()->set_option("weight_cache_enabled", was_); }

 private:
  bool was_;
};

std::vector<float> pattern(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>((i * 7 + static_cast<size_t>(seed) * 13) % 23) * 0.125f - 1.25f;
  }
  return v;
}

// Two fully-connected layers (the delegate's packed GEMM): [rows, 64] -> [rows, 48] -> [rows, 32].
struct TwoLayers {
  static constexpr uint32_t kRows = 5, kIn = 64, kMid = 48, kOut = 32;
  std::vector<float> w1 = pattern(kMid * kIn, 1), b1 = pattern(kMid, 2), w2 = pattern(kOut * kMid, 3);

  std::vector<uint8_t> payload() const {
    GraphBuilder g;
    const uint32_t x = g.input({kRows, kIn}, 0), out = g.output({kRows, kOut}, 1);
    const uint32_t mid = g.internal({kRows, kMid});
    g.fully_connected(x, g.f32_constant({kMid, kIn}, w1), g.f32_constant({kMid}, b1), mid);
    g.fully_connected(mid, g.f32_constant({kOut, kMid}, w2), testing::kNoExt, out);
    return g.payload();
  }
  static std::vector<float> run(DelegateHandle& handle);
};

// Executes a delegate of one [rows, in] -> [rows, out] float graph on pattern(rows * in, seed).
std::vector<float> run_rows(DelegateHandle& handle, int32_t rows, int32_t in, int32_t out, int seed) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {rows, in}, pattern(size_t(rows) * size_t(in), seed));
  auto y = OwnedTensor::make<float>(ScalarType::Float, {rows, out}, {});
  std::vector<EValue> args = {EValue::from_tensor(&x->tensor), EValue::from_tensor(&y->tensor)};
  std::vector<EValue*> ptrs = {&args[0], &args[1]};
  xnnpack()->execute(handle, ptrs);
  return y->values<float>();
}

std::vector<float> TwoLayers::run(DelegateHandle& handle) { return run_rows(handle, kRows, kIn, kOut, 4); }

std::unique_ptr<DelegateHandle> init(const std::vector<uint8_t>& payload, std::optional<bool> cache) {
  BackendOptions options;
  if (cache) options["weight_cache_enabled"] = *cache;
  BackendInitContext ctx;
  ctx.load_options = &options;
  return xnnpack()->init(ctx, payload, {});
}

const std::vector<const void*>& packings(const DelegateHandle& h) {
  return backends::xnnpack_delegate_packed_weights(h);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The bytes both packings of TwoLayers take, from the packings themselves.
size_t two_layers_packed_bytes(const TwoLayers& m) {
  return compute::PackedGemm(m.w1.data(), true, TwoLayers::kIn, TwoLayers::kMid, m.b1.data()).bytes() +
         compute::PackedGemm(m.w2.data(), true, TwoLayers::kMid, TwoLayers::kOut, nullptr).bytes();
}

TEST(WeightCache, HashTellsBytesApart) {
  std::vector<std::byte> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::byte>(i * 31);
  const uint64_t h = compute::hash_bytes(a);
  EXPECT_EQ(compute::hash_bytes(a), h);
  std::set<uint64_t> seen{h};
  for (size_t i : {size_t{0}, size_t{15}, size_t{16}, size_t{63}, size_t{64}, size_t{500}, size_t{999}}) {
    auto b = a;
    b[i] ^= std::byte{1};
    EXPECT_TRUE(seen.insert(compute::hash_bytes(b)).second) << "flipping a bit of byte " << i;
  }
  for (size_t n = 0; n < 80; ++n) EXPECT_TRUE(seen.insert(compute::hash_bytes(std::span(a).first(n))).second) << n;
  EXPECT_NE(compute::hash_bytes(a, 1), h);
}

TEST(WeightCache, EqualPackingsShareUnequalOnesDoNot) {
  auto& cache = compute::WeightCache::global();
  const auto before = cache.counts();
  const std::vector<float> w = pattern(40 * 24, 5);
  auto pack = [](const std::vector<float>& weights) {
    return std::make_shared<const compute::PackedGemm>(weights.data(), true, 40, 24, nullptr);
  };
  auto first = cache.share(pack(w));
  auto second = cache.share(pack(w));  // packed elsewhere in memory (the aligned parts are compared)
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(cache.counts().entries, before.entries + 1);
  EXPECT_EQ(cache.counts().bytes, before.bytes + first->bytes());
  // Same shape, other bytes: a weight changed, and -0.0 for 0.0 (equal as floats, different bits).
  std::vector<float> other = w, signed_zero = w;
  other[17] += 1.0f;
  signed_zero[3] = 0.0f;
  auto with_zero = cache.share(pack(signed_zero));
  signed_zero[3] = -0.0f;
  auto with_negative_zero = cache.share(pack(signed_zero));
  auto different = cache.share(pack(other));
  EXPECT_NE(different.get(), first.get());
  EXPECT_NE(with_zero.get(), with_negative_zero.get());
  EXPECT_EQ(cache.counts().entries, before.entries + 4);
  // Another shape of the same floats is another packing.
  auto reshaped = cache.share(std::make_shared<const compute::PackedGemm>(w.data(), true, 24, 40, nullptr));
  EXPECT_NE(reshaped.get(), first.get());
  first.reset();
  EXPECT_EQ(cache.counts().entries, before.entries + 5);  // `second` still uses it
  second.reset();
  different.reset();
  with_zero.reset();
  with_negative_zero.reset();
  reshaped.reset();
  EXPECT_EQ(cache.counts().entries, before.entries);
  EXPECT_EQ(cache.counts().bytes, before.bytes);
}

TEST(WeightCache, LargePackingsDifferingBetweenHashSamplesStayApart) {
  // A packing over 64 KiB is hashed from samples (64 bytes every 4 KiB): two that differ only between samples
  // land in one bucket, and the byte comparison must still keep them apart. Panels are [k][16] floats, so
  // weight (0, 1) is the packed bytes [64, 128), past the first sample.
  auto& cache = compute::WeightCache::global();
  const auto before = cache.counts();
  static constexpr size_t k = 512, n = 64;  // 128 KiB of panels
  const std::vector<float> w = pattern(k * n, 9);
  std::vector<float> other = w;
  other[1] += 1.0f;
  auto pack = [](const std::vector<float>& weights) {
    return std::make_shared<const compute::PackedGemm>(weights.data(), true, k, n, nullptr);
  };
  auto first = cache.share(pack(w));
  ASSERT_GT(first->bytes(), 64u * 1024u);
  auto second = cache.share(pack(other));
  auto again = cache.share(pack(w));
  EXPECT_NE(first.get(), second.get());
  EXPECT_EQ(first.get(), again.get());
  EXPECT_EQ(cache.counts().entries, before.entries + 2);
  first.reset();
  second.reset();
  again.reset();
  EXPECT_EQ(cache.counts().entries, before.entries);
}

// share_made: within a LoadMemo, a source key seen before returns the packing made for it without packing again;
// another key (a different bias, say) packs; outside a memo, and in a nested memo, every call packs (the content
// cache still holds one copy). The memo's own references go with it.
TEST(WeightCache, ALoadMemoPacksEachSourceOnce) {
  auto& cache = compute::WeightCache::global();
  const auto before = cache.counts();
  const std::vector<float> w = pattern(40 * 24, 11), bias = pattern(24, 12), other_bias = pattern(24, 13);
  int packings = 0;
  auto made = [&](const std::vector<float>& b) {
    return cache.share_made<compute::PackedGemm>(
        {reinterpret_cast<uintptr_t>(w.data()), 40, 24, reinterpret_cast<uintptr_t>(b.data())}, [&] {
          ++packings;
          return std::make_shared<const compute::PackedGemm>(w.data(), true, 40, 24, b.data());
        });
  };
  EXPECT_EQ(compute::LoadMemo::current(), nullptr);
  auto unscoped = made(bias);
  auto unscoped_again = made(bias);
  EXPECT_EQ(packings, 2);
  EXPECT_EQ(unscoped.get(), unscoped_again.get());  // one copy all the same, by content
  std::shared_ptr<const compute::PackedGemm> first, second, third, nested;
  {
    const compute::LoadMemo memo;
    EXPECT_EQ(compute::LoadMemo::current(), &memo);
    first = made(bias);
    second = made(bias);
    EXPECT_EQ(packings, 3);
    EXPECT_EQ(first.get(), second.get());
    third = made(other_bias);
    EXPECT_EQ(packings, 4);
    EXPECT_NE(third.get(), first.get());
    {
      const compute::LoadMemo inner;
      EXPECT_EQ(compute::LoadMemo::current(), &inner);
      nested = made(bias);
      EXPECT_EQ(packings, 5);
      EXPECT_EQ(nested.get(), first.get());  // by content
    }
    EXPECT_EQ(compute::LoadMemo::current(), &memo);
    EXPECT_EQ(made(other_bias).get(), third.get());
    EXPECT_EQ(packings, 5);
  }
  EXPECT_EQ(compute::LoadMemo::current(), nullptr);
  EXPECT_EQ(cache.counts().entries, before.entries + 2);
  unscoped.reset();
  unscoped_again.reset();
  first.reset();
  second.reset();
  nested.reset();
  third.reset();
  EXPECT_EQ(cache.counts().entries, before.entries);  // the closed memo holds nothing
}

TEST(XnnpackWeightCache, OptionValuesAndRefusals) {
  EXPECT_TRUE(std::get<bool>(xnnpack()->get_option("weight_cache_enabled")));  // on by default
  const auto names = xnnpack()->option_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "weight_cache_enabled"), names.end());
  const TwoLayers m;
  for (const BackendOptionValue& bad : {BackendOptionValue(int64_t{1}), BackendOptionValue(std::string("true"))}) {
    const std::string type = std::holds_alternative<int64_t>(bad) ? "int" : "str";
    const Error set = etnp::testing::expect_error([&] { xnnpack()->set_option("weight_cache_enabled", bad); });
    EXPECT_EQ(set.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(set.what()).find("'weight_cache_enabled' must be a bool"), std::string::npos) << set.what();
    EXPECT_NE(std::string(set.what()).find("not " + type), std::string::npos) << set.what();
    BackendOptions options{{"weight_cache_enabled", bad}};
    BackendInitContext ctx;
    ctx.load_options = &options;
    const Error load = etnp::testing::expect_error([&] { xnnpack()->init(ctx, m.payload(), {}); });
    EXPECT_EQ(load.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(load.what()).find("'weight_cache_enabled' must be a bool"), std::string::npos);
    EXPECT_FALSE(xnnpack()->supports(ctx, m.payload(), {}).supported());
  }
  EXPECT_TRUE(std::get<bool>(xnnpack()->get_option("weight_cache_enabled")));  // a refused value changes nothing
  {
    const GlobalCache off(false);
    EXPECT_FALSE(std::get<bool>(xnnpack()->get_option("weight_cache_enabled")));
  }
  EXPECT_TRUE(std::get<bool>(xnnpack()->get_option("weight_cache_enabled")));
}

TEST(XnnpackWeightCache, DelegatesShareByMemoryAndPointer) {
  const TwoLayers m;
  const auto payload = m.payload();
  const size_t packed = two_layers_packed_bytes(m);
  const auto start = packed_weight_cache_stats();

  const auto off_a = init(payload, false), off_b = init(payload, false);
  ASSERT_EQ(packings(*off_a).size(), 2u);
  EXPECT_NE(packings(*off_a), packings(*off_b));  // two copies
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries);
  const size_t off_bytes = off_a->bytes();
  EXPECT_EQ(off_b->bytes(), off_bytes);
  EXPECT_GE(off_bytes, packed);

  const auto on_a = init(payload, true);
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries + 2);
  EXPECT_EQ(packed_weight_cache_stats().bytes, start.bytes + packed);  // one copy, in the cache
  const auto on_b = init(payload, std::nullopt);  // on by default
  EXPECT_EQ(packings(*on_a), packings(*on_b));  // literally the same buffers
  EXPECT_EQ(packed_weight_cache_stats().bytes, start.bytes + packed);  // still one copy
  // Each delegate reports only what it holds alone: the packed weights are counted once, by the cache.
  EXPECT_EQ(on_a->bytes(), off_bytes - packed);
  EXPECT_EQ(on_b->bytes(), off_bytes - packed);

  // Bit-identical results with and without the cache.
  const std::vector<float> expected = TwoLayers::run(*off_a);
  EXPECT_TRUE(same_bits(TwoLayers::run(*on_a), expected));
  EXPECT_TRUE(same_bits(TwoLayers::run(*on_b), expected));
}

TEST(XnnpackWeightCache, DelegatesShareFourBitLinears) {
  // An 8da4w linear (dynamically quantized activations, 4-bit weights in groups of 32, bf16 scales): the
  // delegate's 4-bit packing is held once, the same bytes compute::Int4Weights packs, with the same results.
  constexpr uint32_t kRows = 3, kIn = 64, kOut = 24, kGroup = 32;
  std::vector<int8_t> codes(kOut * kIn);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int8_t>(int(i * 7 % 16) - 8);
  std::vector<uint8_t> nibbles(codes.size() / 2);
  for (size_t i = 0; i < nibbles.size(); ++i) {
    nibbles[i] = static_cast<uint8_t>((codes[2 * i] + 8) | ((codes[2 * i + 1] + 8) << 4));
  }
  std::vector<uint16_t> bf16(kOut * kIn / kGroup);
  std::vector<float> scales;
  for (size_t i = 0; i < bf16.size(); ++i) {
    bf16[i] = static_cast<uint16_t>(0x3C00 + i % 61);
    const uint32_t bits = uint32_t(bf16[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    scales.push_back(f);
  }
  GraphBuilder g;
  const uint32_t x = g.input({kRows, kIn}, 0), xq = g.dynamic_quant({kRows, kIn}, 1);
  const uint32_t y = g.output({kRows, kOut}, 1);
  g.unary(XNodeUnion::XNNConvert, x, xq);
  g.fully_connected(xq, g.blockwise({kOut, kIn}, bf16, kGroup, g.constant(nibbles.data(), nibbles.size())),
                    testing::kNoExt, y);
  const auto payload = g.payload();
  const size_t packed = compute::Int4Weights(codes.data(), kOut, kIn, scales.data(), nullptr, kGroup).bytes();
  const auto start = packed_weight_cache_stats();
  const auto off = init(payload, false);
  const auto on_a = init(payload, true), on_b = init(payload, true);
  ASSERT_EQ(packings(*on_a).size(), 1u);
  EXPECT_EQ(packings(*on_a), packings(*on_b));
  EXPECT_NE(packings(*on_a), packings(*off));
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries + 1);
  EXPECT_EQ(packed_weight_cache_stats().bytes, start.bytes + packed);
  EXPECT_EQ(on_a->bytes(), off->bytes() - packed);
  auto run = [&](DelegateHandle& h) { return run_rows(h, kRows, kIn, kOut, 5); };
  const std::vector<float> expected = run(*off);
  EXPECT_TRUE(same_bits(run(*on_a), expected));
  EXPECT_TRUE(same_bits(run(*on_b), expected));
}

TEST(XnnpackWeightCache, EntriesGoWithTheirLastUser) {
  const TwoLayers m;
  const auto payload = m.payload();
  const auto start = packed_weight_cache_stats();
  auto a = init(payload, true);
  auto b = init(payload, true);
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries + 2);
  a.reset();
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries + 2);  // b still uses them
  EXPECT_TRUE(same_bits(TwoLayers::run(*b), TwoLayers::run(*init(payload, false))));
  b.reset();
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries);
  EXPECT_EQ(packed_weight_cache_stats().bytes, start.bytes);
}

TEST(XnnpackWeightCache, DifferentWeightsNeverShare) {
  const TwoLayers m;
  TwoLayers last_bit = m, larger = m;  // same shapes; one weight of the first layer differs
  uint32_t bits;
  std::memcpy(&bits, &last_bit.w1[100], sizeof(bits));
  bits ^= 1u;
  std::memcpy(&last_bit.w1[100], &bits, sizeof(bits));
  larger.w1[100] += 0.5f;
  const auto start = packed_weight_cache_stats();
  const auto a = init(m.payload(), true);
  const auto b = init(last_bit.payload(), true);
  const auto c = init(larger.payload(), true);
  EXPECT_NE(packings(*a)[0], packings(*b)[0]);  // the first layers differ
  EXPECT_NE(packings(*a)[0], packings(*c)[0]);
  EXPECT_EQ(packings(*a)[1], packings(*b)[1]);  // the second layers are the same bytes
  EXPECT_EQ(packings(*a)[1], packings(*c)[1]);
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries + 4);
  // c runs its own weights: as without the cache, and not as a.
  const std::vector<float> c_alone = TwoLayers::run(*init(larger.payload(), false));
  EXPECT_TRUE(same_bits(TwoLayers::run(*c), c_alone));
  EXPECT_FALSE(same_bits(TwoLayers::run(*a), c_alone));
}

TEST(XnnpackWeightCache, GlobalOptionAppliesToLaterLoads) {
  const TwoLayers m;
  const auto payload = m.payload();
  std::unique_ptr<DelegateHandle> before, off_a, off_b;
  {
    const GlobalCache off(false);
    before = init(payload, std::nullopt);
    off_a = init(payload, std::nullopt);
    off_b = init(payload, std::nullopt);
    EXPECT_NE(packings(*off_a)[0], packings(*off_b)[0]);  // off: each its own
    EXPECT_EQ(packings(*init(payload, true))[0], packings(*init(payload, true))[0]);  // a load option overrides it
  }
  const auto after_a = init(payload, std::nullopt), after_b = init(payload, std::nullopt);
  EXPECT_EQ(packings(*after_a), packings(*after_b));
  EXPECT_NE(packings(*before)[0], packings(*after_a)[0]);  // loaded while off: keeps its own
  EXPECT_NE(packings(*init(payload, false))[0], packings(*after_a)[0]);  // a load option overrides it
}

// In the Concurrency suite: the full test run repeats that suite under TSan.
TEST(Concurrency, XnnpackWeightCacheLoadsShareOneCopy) {
  const TwoLayers m;
  const auto payload = m.payload();
  const auto start = packed_weight_cache_stats();
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<DelegateHandle>> handles(kThreads);
  {
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ++ready;
        while (ready.load() < kThreads) std::this_thread::yield();
        for (int i = 0; i < 20; ++i) init(payload, true);  // loads and drops, racing the others' lookups
        handles[static_cast<size_t>(t)] = init(payload, true);
      });
    }
    for (auto& th : threads) th.join();
  }
  for (const auto& h : handles) EXPECT_EQ(packings(*h), packings(*handles[0]));
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries + 2);
  EXPECT_EQ(packed_weight_cache_stats().bytes, start.bytes + two_layers_packed_bytes(m));
  handles.clear();
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries);
}

// ---- programs from the shared fixtures -----------------------------------------------------------------

LoadOptions cache_option(bool on) {
  LoadOptions options;
  options.backend_options["XnnpackBackend"] = {{"weight_cache_enabled", on}};
  return options;
}

struct Loaded {
  Program program;
  std::unique_ptr<Method> method;
};

Loaded load(const std::string& id, const std::string& method, bool cache) {
  Program program = Program::load_file(etnp::testing::fixtures_dir() + "/" + id + ".pte", cache_option(cache));
  auto m = program.load_method(method);
  return {std::move(program), std::move(m)};
}


// Two programs from the same file: with the cache, the packed weights once (the cache's bytes are exactly
// what each method stops reporting); without, two copies; the results bit-identical; all gone with them.
void expect_programs_share(const std::string& id) {
  const auto start = packed_weight_cache_stats();
  Loaded off = load(id, "forward", false);
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries);
  const size_t off_bytes = off.method->load_time_bytes();
  size_t cached = 0;
  {
    Loaded a = load(id, "forward", true);
    cached = packed_weight_cache_stats().bytes - start.bytes;
    const size_t entries = packed_weight_cache_stats().entries - start.entries;
    EXPECT_GT(cached, 0u) << id;
    EXPECT_EQ(a.method->load_time_bytes() + cached, off_bytes) << id;
    Loaded b = load(id, "forward", true);
    EXPECT_EQ(packed_weight_cache_stats().bytes - start.bytes, cached) << id << ": a second copy was made";
    EXPECT_EQ(packed_weight_cache_stats().entries - start.entries, entries) << id;
    EXPECT_EQ(b.method->load_time_bytes(), a.method->load_time_bytes()) << id;
    const auto expected = etnp::testing::run_first_case(id, "forward", *off.method);
    EXPECT_EQ(etnp::testing::run_first_case(id, "forward", *a.method), expected) << id;
    EXPECT_EQ(etnp::testing::run_first_case(id, "forward", *b.method), expected) << id;
  }
  EXPECT_EQ(packed_weight_cache_stats().entries, start.entries) << id;
  EXPECT_EQ(packed_weight_cache_stats().bytes, start.bytes) << id;
  std::printf("[ info ] %s: load_time_bytes %zu without the cache, of which %zu shared\n", id.c_str(), off_bytes,
              cached);
}

TEST(XnnpackWeightCache, ProgramsShareMobileNetFp32) {
  ETNP_REQUIRE_FIXTURES();
  expect_programs_share("exported/mobilenet_v2_xnnpack_fp32");  // packed GEMMs, depthwise convolutions
}

TEST(XnnpackWeightCache, ProgramsShareMobileNetInt8) {
  ETNP_REQUIRE_FIXTURES();
  // etnp packs the int8 depthwise convolutions with its own kernel (AVX2 or NEON); elsewhere every int8
  // convolution runs in XNNPACK's own operators, which keep their packed weights themselves: nothing of etnp's
  // to share.
  if (!has_avx2_fma() && !has_neon()) {  // (DepthwiseConvQS8::supported's condition)
    GTEST_SKIP() << "no int8 kernel of etnp's own on this CPU (its depthwise qs8 needs AVX2 or NEON)";
  }
  expect_programs_share("exported/mobilenet_v2_xnnpack_int8");  // int8 depthwise convolutions
}

TEST(XnnpackWeightCache, ProgramsShareDynamicallyQuantizedLinears) {
  ETNP_REQUIRE_FIXTURES();
  // The delegate's int8 GEMM's packed weights (the 2024 library's qd8 operators, which it would pick here,
  // pack their own, which the cache does not hold).
  struct OwnEngine {
    OwnEngine() { setenv("ETNP_XNNPACK_ENGINE", "own", 1); }
    ~OwnEngine() { unsetenv("ETNP_XNNPACK_ENGINE"); }  // also when an assertion returns early
  } own;
  expect_programs_share("exported/mlp_dq8_xnnpack");
}

TEST(XnnpackWeightCache, MethodsOfOneProgramShare) {
  ETNP_REQUIRE_FIXTURES();
  // forward and features run the same convolutions (the same named data) in delegates of their own.
  const std::string id = "exported/smallcnn_multimethod_xnnpack_fp32";
  const std::string path = etnp::testing::fixtures_dir() + "/" + id + ".pte";
  const auto start = packed_weight_cache_stats();
  Program off = Program::load_file(path, cache_option(false));
  const size_t off_forward = off.load_method("forward")->load_time_bytes();
  const size_t off_features = off.load_method("features")->load_time_bytes();
  Program on = Program::load_file(path, cache_option(true));
  auto forward = on.load_method("forward");
  const size_t forward_packed = packed_weight_cache_stats().bytes - start.bytes;
  auto features = on.load_method("features");
  const size_t both_packed = packed_weight_cache_stats().bytes - start.bytes;
  const size_t features_packed = off_features - features->load_time_bytes();
  EXPECT_GT(features_packed, 0u);
  // features packs the convolutions forward packed already: they are not added again.
  EXPECT_LT(both_packed, forward_packed + features_packed);
  EXPECT_EQ(forward->load_time_bytes() + forward_packed, off_forward);
  EXPECT_EQ(etnp::testing::run_first_case(id, "features", *features), etnp::testing::run_first_case(id, "features", *off.load_method("features")));
  EXPECT_EQ(etnp::testing::run_first_case(id, "forward", *forward), etnp::testing::run_first_case(id, "forward", *off.load_method("forward")));
}

}  // namespace
}  // namespace etnp::xnn
