// Mutated real delegate payloads (taken from the fixture programs) must load and run or fail with a clean
// etnp::Error: never crash, abort inside XNNPACK, or throw anything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "backends/xnnpack/xnn_executor.h"
#include "backends/xnnpack/xnn_graph.h"
#include "fixtures.h"

namespace etnp::xnn {
namespace {

// Every key maps to the same filler bytes (0x3C: as fp32 a small positive scale, as int8 a weight of 60):
// the payloads' real weights are not needed to exercise the loader.
class FillerNamedData final : public NamedDataMap {
 public:
  std::optional<std::span<const uint8_t>> get(std::string_view) const override {
    static const std::vector<uint8_t> filler(8u << 20, 0x3C);
    return std::span<const uint8_t>(filler);
  }
  std::optional<TensorLayout> layout(std::string_view) const override { return std::nullopt; }
  size_t num_keys() const override { return 0; }
  std::string_view key(size_t) const override { return {}; }
  std::string describe() const override { return "filler"; }
};

uint32_t u32_at(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

// The delegate payloads in a .pte: each starts with 4 zero bytes and the "XH00" header magic.
std::vector<std::vector<uint8_t>> payloads_in(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i + 30 <= bytes.size(); ++i) {
    if (std::memcmp(bytes.data() + i + 4, "XH00", 4) != 0 || u32_at(bytes, i) != 0) continue;
    const uint64_t fb_end = uint64_t{u32_at(bytes, i + 10)} + u32_at(bytes, i + 14);
    uint64_t const_size;
    std::memcpy(&const_size, bytes.data() + i + 22, 8);
    const uint64_t end = std::max(fb_end, uint64_t{u32_at(bytes, i + 18)} + const_size);
    if (end > bytes.size() - i) continue;
    out.emplace_back(bytes.begin() + static_cast<std::ptrdiff_t>(i), bytes.begin() + static_cast<std::ptrdiff_t>(i + end));
  }
  return out;
}

struct Args {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<Tensor> tensors;
  std::vector<EValue> values;
  std::vector<EValue*> ptrs;
};

// Zero-filled tensors for every external value at its serialized shape; false when that would be huge.
bool make_args(const Graph& g, Args& a) {
  a.storage.resize(g.num_externs);
  a.tensors.resize(g.num_externs);
  size_t total = 0;
  for (const Value& v : g.values) {
    if (!v.is_external()) continue;
    ScalarType st = ScalarType::Float;
    switch (v.dtype) {
      case DataType::fp32: st = ScalarType::Float; break;
      case DataType::qint8: st = ScalarType::Char; break;
      case DataType::quint8: st = ScalarType::Byte; break;
      case DataType::int32:
      case DataType::qint32: st = ScalarType::Int; break;
      default: return false;
    }
    std::vector<int64_t> sizes(v.dims.dims, v.dims.dims + v.dims.rank);
    const size_t bytes = v.dims.numel() * element_size(st);
    total += bytes;
    if (total > (4u << 20)) return false;
    a.storage[v.external_id].assign(std::max<size_t>(bytes, 1), 0);
    a.tensors[v.external_id] = Tensor(st, sizes, {}, a.storage[v.external_id].data());
  }
  for (auto& t : a.tensors) a.values.push_back(EValue::from_tensor(&t));
  for (auto& v : a.values) a.ptrs.push_back(&v);
  return true;
}

// Loads and runs `payload`; returns false only when it was rejected with an etnp::Error.
bool load_and_run(const std::vector<uint8_t>& payload, const NamedDataMap& named) {
  try {
    Graph g = parse_graph(payload, &named);
    Args args;
    const bool runnable = make_args(g, args);
    Executor ex(std::move(g));
    if (runnable) ex.execute(args.ptrs);
    return true;
  } catch (const Error&) {
    return false;
  }
}

class XnnpackFuzz : public ::testing::TestWithParam<const char*> {};

TEST_P(XnnpackFuzz, MutatedPayloadsFailCleanly) {
  ETNP_REQUIRE_FIXTURES();
  const std::vector<std::vector<uint8_t>> payloads = payloads_in(::etnp::testing::fixtures_dir() + "/" + GetParam());
  ASSERT_FALSE(payloads.empty());
  FillerNamedData named;
  std::mt19937 rng(1234);
  size_t rejected = 0, total = 0;
  for (const auto& original : payloads) {
    ASSERT_TRUE(load_and_run(original, named)) << "the unmodified payload must run";
    const uint32_t fb_offset = u32_at(original, 10), fb_size = u32_at(original, 14);
    // About 300 mutations per fixture ($ETNP_XNNPACK_FUZZ_ROUNDS scales it up for a longer search).
    const char* env = std::getenv("ETNP_XNNPACK_FUZZ_ROUNDS");
    const int budget = env != nullptr ? std::max(1, std::atoi(env)) : 300;
    int rounds = std::max(10, budget / static_cast<int>(payloads.size()));
    if (original.size() > 20000) rounds = std::max(1, rounds / 12);  // whole networks are slow to build
    for (int round = 0; round < rounds; ++round) {
      std::vector<uint8_t> p = original;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        const size_t at = fb_offset + rng() % fb_size;
        switch (rng() % 3) {
          case 0: p[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
          case 1: p[at] = static_cast<uint8_t>(rng()); break;
          default: p[at] = (rng() % 2) ? 0xFF : 0x00; break;
        }
      }
      rejected += load_and_run(p, named) ? 0 : 1;
      ++total;
    }
    // Truncations anywhere must be rejected or harmless too.
    for (size_t cut : {size_t{8}, size_t{31}, original.size() / 2, original.size() - 1}) {
      load_and_run(std::vector<uint8_t>(original.begin(), original.begin() + static_cast<std::ptrdiff_t>(cut)), named);
    }
  }
  // Sanity: the mutations do reach the validation (a test that never rejects anything proves little).
  EXPECT_GT(rejected, 0u) << "of " << total;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, XnnpackFuzz,
                         ::testing::Values("nprt/quantized.pte", "djl/conv.pte", "xnnpack/simpleconv.pte", "exported/mlp_dq8_xnnpack.pte",
                                           "exported/transformer_encoder_xnnpack_fp32.pte",
                                           "exported/tiny_llama_kv_xnnpack_fp32.pte",
                                           "exported/mobilenet_v2_xnnpack_int8.pte"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace etnp::xnn
