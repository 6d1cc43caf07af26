// etnp::triple.out and etnp::lstm.out called directly: hand-computed values, and the LSTM against the
// goldens of the nprt/lstm fixture (weights read from the constant segment of its .pte).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "kernel_test_util.h"
#include "kernels/kernel_util.h"

namespace etnp::testing {
namespace {

EValue T(const std::unique_ptr<OwnedTensor>& t) { return EValue::from_tensor(&t->tensor); }

TEST(CustomKernels, TripleFloatIntAndHalf) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {2, 2}, {1.5f, -2.f, 0.f, 1e-3f});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {2, 2}, {});
  std::vector<EValue> args = {T(x), T(out), T(out)};
  call_kernel("etnp::triple.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{4.5f, -6.f, 0.f, 3.f * 1e-3f}));

  // int32 wraps on overflow like ATen
  auto xi = OwnedTensor::make<int32_t>(ScalarType::Int, {3}, {7, -5, std::numeric_limits<int32_t>::max()});
  auto outi = OwnedTensor::make<int32_t>(ScalarType::Int, {3}, {});
  std::vector<EValue> args2 = {T(xi), T(outi), T(outi)};
  call_kernel("etnp::triple.out", args2);
  EXPECT_EQ(outi->values<int32_t>(), (std::vector<int32_t>{21, -15, 2147483645}));

  auto xl = OwnedTensor::make<int64_t>(ScalarType::Long, {1}, {-40});
  auto outl = OwnedTensor::make<int64_t>(ScalarType::Long, {1}, {});
  std::vector<EValue> args3 = {T(xl), T(outl), T(outl)};
  call_kernel("etnp::triple.out", args3);
  EXPECT_EQ(outl->values<int64_t>()[0], -120);

  // dtype mismatch is an error
  auto outd = OwnedTensor::make<double>(ScalarType::Double, {2, 2}, {});
  std::vector<EValue> bad = {T(x), T(outd), T(outd)};
  EXPECT_THROW(call_kernel("etnp::triple.out", bad), etnp::Error);
}

TEST(CustomKernels, TripleHonoursDimOrder) {
  // logical [[1, 2, 3], [4, 5, 6]] stored column-major; out contiguous
  auto x = OwnedTensor::make<float>(ScalarType::Float, {2, 3}, {1.f, 4.f, 2.f, 5.f, 3.f, 6.f},
                                    ShapeDynamism::Static, -1, {1, 0});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {2, 3}, {});
  std::vector<EValue> args = {T(x), T(out), T(out)};
  call_kernel("etnp::triple.out", args);
  EXPECT_EQ(out->values<float>(), (std::vector<float>{3.f, 6.f, 9.f, 12.f, 15.f, 18.f}));
}

TEST(CustomKernels, LstmHandComputed) {
  // T=2, B=1, I=1, H=1. Expected values from the LSTM equations in float64 (torch.nn.LSTM agrees to 4e-8).
  auto x = OwnedTensor::make<float>(ScalarType::Float, {2, 1, 1}, {1.f, -2.f});
  auto h0 = OwnedTensor::make<float>(ScalarType::Float, {1, 1}, {0.5f});
  auto c0 = OwnedTensor::make<float>(ScalarType::Float, {1, 1}, {-1.f});
  auto w_ih = OwnedTensor::make<float>(ScalarType::Float, {4, 1}, {0.5f, -0.25f, 1.f, 0.75f});
  auto w_hh = OwnedTensor::make<float>(ScalarType::Float, {4, 1}, {0.1f, 0.2f, -0.3f, 0.4f});
  auto b_ih = OwnedTensor::make<float>(ScalarType::Float, {4}, {0.f, 1.f, 0.f, -0.5f});
  auto b_hh = OwnedTensor::make<float>(ScalarType::Float, {4}, {0.1f, 0.f, 0.2f, 0.f});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {2, 1, 1}, {});
  auto h_n = OwnedTensor::make<float>(ScalarType::Float, {1, 1}, {});
  auto c_n = OwnedTensor::make<float>(ScalarType::Float, {1, 1}, {});
  std::vector<EValue> args = {T(x), T(h0), T(c0), T(w_ih), T(w_hh), T(b_ih), T(b_hh), T(out), T(h_n), T(c_n), EValue()};
  call_kernel("etnp::lstm.out", args);
  const auto o = out->values<float>();
  EXPECT_NEAR(o[0], -0.11282507f, 1e-7);
  EXPECT_NEAR(o[1], -0.045719873f, 1e-7);
  EXPECT_NEAR(h_n->values<float>()[0], -0.045719873f, 1e-7);
  EXPECT_NEAR(c_n->values<float>()[0], -0.4226279f, 1e-7);
}

TEST(CustomKernels, LstmRejectsInconsistentShapes) {
  auto x = OwnedTensor::make<float>(ScalarType::Float, {2, 1, 3}, {});
  auto h0 = OwnedTensor::make<float>(ScalarType::Float, {1, 2}, {});
  auto c0 = OwnedTensor::make<float>(ScalarType::Float, {1, 2}, {});
  auto w_ih = OwnedTensor::make<float>(ScalarType::Float, {8, 2}, {});  // should be [8, 3]
  auto w_hh = OwnedTensor::make<float>(ScalarType::Float, {8, 2}, {});
  auto b = OwnedTensor::make<float>(ScalarType::Float, {8}, {});
  auto out = OwnedTensor::make<float>(ScalarType::Float, {2, 1, 2}, {});
  auto h_n = OwnedTensor::make<float>(ScalarType::Float, {1, 2}, {});
  auto c_n = OwnedTensor::make<float>(ScalarType::Float, {1, 2}, {});
  std::vector<EValue> args = {T(x), T(h0), T(c0), T(w_ih), T(w_hh), T(b), T(b), T(out), T(h_n), T(c_n), EValue()};
  EXPECT_THROW(call_kernel("etnp::lstm.out", args), etnp::Error);
}

TEST(CustomKernels, LstmBatchRowsAreIndependent) {
  // Large enough for the multi-threaded path: each batch row must equal a batch-of-one run of that row.
  const int64_t steps = 20, batch = 4, in_size = 16, hidden = 32;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = dist(rng);
    return v;
  };
  const auto xv = random(steps * batch * in_size), h0v = random(batch * hidden), c0v = random(batch * hidden);
  auto w_ih = OwnedTensor::make<float>(ScalarType::Float, {4 * hidden, in_size}, random(4 * hidden * in_size));
  auto w_hh = OwnedTensor::make<float>(ScalarType::Float, {4 * hidden, hidden}, random(4 * hidden * hidden));
  auto b_ih = OwnedTensor::make<float>(ScalarType::Float, {4 * hidden}, random(4 * hidden));
  auto b_hh = OwnedTensor::make<float>(ScalarType::Float, {4 * hidden}, random(4 * hidden));
  auto run = [&](int64_t first_row, int64_t rows, std::vector<float>& out_v, std::vector<float>& hn_v) {
    std::vector<float> x, h, c;
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t b = first_row; b < first_row + rows; ++b)
        x.insert(x.end(), xv.begin() + (t * batch + b) * in_size, xv.begin() + (t * batch + b + 1) * in_size);
    h.assign(h0v.begin() + first_row * hidden, h0v.begin() + (first_row + rows) * hidden);
    c.assign(c0v.begin() + first_row * hidden, c0v.begin() + (first_row + rows) * hidden);
    auto xt = OwnedTensor::make<float>(ScalarType::Float, {steps, rows, in_size}, x);
    auto ht = OwnedTensor::make<float>(ScalarType::Float, {rows, hidden}, h);
    auto ct = OwnedTensor::make<float>(ScalarType::Float, {rows, hidden}, c);
    auto out = OwnedTensor::make<float>(ScalarType::Float, {steps, rows, hidden}, {});
    auto h_n = OwnedTensor::make<float>(ScalarType::Float, {rows, hidden}, {});
    auto c_n = OwnedTensor::make<float>(ScalarType::Float, {rows, hidden}, {});
    std::vector<EValue> args = {T(xt),  T(ht),  T(ct),  T(w_ih), T(w_hh), T(b_ih),
                                T(b_hh), T(out), T(h_n), T(c_n), EValue()};
    call_kernel("etnp::lstm.out", args);
    out_v = out->values<float>();
    hn_v = h_n->values<float>();
  };
  std::vector<float> all_out, all_hn;
  run(0, batch, all_out, all_hn);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<float> one_out, one_hn;
    run(b, 1, one_out, one_hn);
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t k = 0; k < hidden; ++k)
        ASSERT_EQ(all_out[static_cast<size_t>((t * batch + b) * hidden + k)],
                  one_out[static_cast<size_t>(t * hidden + k)]);
    for (int64_t k = 0; k < hidden; ++k)
      ASSERT_EQ(all_hn[static_cast<size_t>(b * hidden + k)], one_hn[static_cast<size_t>(k)]);
  }
}

// ---- nprt/lstm fixture --------------------------------------------------------------------------------------

std::string fixtures_dir() {
  if (const char* env = std::getenv("ETNP_FIXTURES")) return env;
  return ETNP_FIXTURES_DIR;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Data bytes of a little-endian .npy file (header skipped), or empty when unreadable.
std::vector<uint8_t> npy_data(const std::string& path) {
  const auto bytes = read_file(path);
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) return {};
  size_t header_len, start;
  if (bytes[6] == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    start = 10;
  } else {
    if (bytes.size() < 12) return {};
    header_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (size_t(bytes[11]) << 24);
    start = 12;
  }
  if (start + header_len > bytes.size()) return {};
  return std::vector<uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(start + header_len), bytes.end());
}

std::unique_ptr<OwnedTensor> float_tensor(std::vector<int64_t> sizes, const uint8_t* data, size_t nbytes) {
  std::vector<float> v(nbytes / 4);
  std::memcpy(v.data(), data, nbytes);
  return OwnedTensor::make<float>(ScalarType::Float, std::move(sizes), v);
}

TEST(CustomKernels, LstmMatchesNprtFixtureGoldens) {
  const std::string dir = fixtures_dir() + "/nprt/";
  const auto pte = read_file(dir + "lstm.pte");
  if (pte.empty()) GTEST_SKIP() << "fixture nprt/lstm.pte not available";
  // Extended header 'eh00' at 8: length u32, program_size u64, segment_base_offset u64. The single constant
  // segment holds w_ih [12,4], w_hh [12,3], b_ih [12], b_hh [12] back to back (offsets 0, 192, 336, 384).
  ASSERT_GE(pte.size(), 32u);
  ASSERT_EQ(std::memcmp(pte.data() + 8, "eh00", 4), 0);
  uint64_t base;
  std::memcpy(&base, pte.data() + 24, 8);
  ASSERT_LE(base + 432, pte.size());
  const uint8_t* seg = pte.data() + base;
  auto w_ih = float_tensor({12, 4}, seg, 192);
  auto w_hh = float_tensor({12, 3}, seg + 192, 144);
  auto b_ih = float_tensor({12}, seg + 336, 48);
  auto b_hh = float_tensor({12}, seg + 384, 48);

  const std::string g = dir + "lstm.golden/forward/";
  const auto in0 = npy_data(g + "input_0.npy"), in1 = npy_data(g + "input_1.npy"), in2 = npy_data(g + "input_2.npy");
  const auto out0 = npy_data(g + "output_0.npy"), out1 = npy_data(g + "output_1.npy"),
             out2 = npy_data(g + "output_2.npy");
  ASSERT_EQ(in0.size(), 5u * 2 * 4 * 4);
  ASSERT_EQ(in1.size(), 2u * 3 * 4);
  ASSERT_EQ(out0.size(), 5u * 2 * 3 * 4);
  auto x = float_tensor({5, 2, 4}, in0.data(), in0.size());
  auto h0 = float_tensor({2, 3}, in1.data(), in1.size());
  auto c0 = float_tensor({2, 3}, in2.data(), in2.size());
  auto out = OwnedTensor::make<float>(ScalarType::Float, {5, 2, 3}, {});
  auto h_n = OwnedTensor::make<float>(ScalarType::Float, {2, 3}, {});
  auto c_n = OwnedTensor::make<float>(ScalarType::Float, {2, 3}, {});
  std::vector<EValue> args = {T(x), T(h0), T(c0), T(w_ih), T(w_hh), T(b_ih), T(b_hh), T(out), T(h_n), T(c_n), EValue()};
  call_kernel("etnp::lstm.out", args);

  // The manifest's tolerance for this case: atol 1e-6, rtol 1e-5.
  auto expect_close = [](const std::vector<float>& actual, const std::vector<uint8_t>& golden_bytes, const char* what) {
    ASSERT_EQ(actual.size() * 4, golden_bytes.size()) << what;
    std::vector<float> golden(actual.size());
    std::memcpy(golden.data(), golden_bytes.data(), golden_bytes.size());
    for (size_t i = 0; i < actual.size(); ++i)
      EXPECT_LE(std::fabs(actual[i] - golden[i]), 1e-6 + 1e-5 * std::fabs(golden[i])) << what << "[" << i << "]";
  };
  expect_close(out->values<float>(), out0, "output");
  expect_close(h_n->values<float>(), out1, "h_n");
  expect_close(c_n->values<float>(), out2, "c_n");
}

}  // namespace
}  // namespace etnp::testing
