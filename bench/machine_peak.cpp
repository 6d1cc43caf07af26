// The physical limits the efficiency section of bench/RESULTS.md measures each model against, on the machine at
// hand: fp32 multiply-add throughput of one core and of all cores (AVX2 FMA, and AVX-512 where the CPU has it),
// the bandwidth of a large memcpy on one thread, and that of a plain read of a large array (what a memory-bound
// matrix-vector product can reach at most: it only reads) on one thread and on all. Prints one JSON object:
//
//   etnp_bench_machine_peak [--threads N]     {"fma_gflops_1": ..., "fma_gflops_all": ..., "memcpy_gbs_1": ...,
//                                              "read_gbs_1": ..., "read_gbs_all": ...}
//
// The FMA loops keep 12 independent accumulators (more than the latency x throughput of any x86 core's FMA
// units), so they run at the issue rate; the best of several timed repetitions is reported.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr long kIterations = 20'000'000;

#if defined(__x86_64__)
// 12 chains of fused multiply-adds on 8 floats: 12 * 8 * 2 flops an iteration.
__attribute__((target("avx2,fma"), noinline)) double fma_loop_avx2(long iterations, float seed) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(seed + static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f"), noinline)) double fma_loop_avx512(long iterations, float seed) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}
#endif

// Best GFLOP/s of `reps` timed runs of `threads` threads each running the loop; 0 where the CPU lacks the ISA.
double fma_gflops(bool avx512, unsigned threads, int reps) {
#if defined(__x86_64__)
  if (avx512 ? !__builtin_cpu_supports("avx512f") : !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    return 0.0;
  }
  const double flops_per_iteration = 12.0 * (avx512 ? 16 : 8) * 2;
  double best = 0.0;
  std::vector<double> sink(threads);
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        sink[t] = avx512 ? fma_loop_avx512(kIterations, 1.0f + t) : fma_loop_avx2(kIterations, 1.0f + t);
      });
    }
    for (std::thread& th : pool) th.join();
    best = std::max(best, flops_per_iteration * kIterations * threads / seconds_since(t0) / 1e9);
  }
  if (sink[0] == 12345.0) std::puts("");  // keeps the results alive
  return best;
#else
  (void)avx512, (void)threads, (void)reps;
  return 0.0;
#endif
}

// Best GB/s (bytes read plus bytes written) of memcpy over 256 MiB, one thread.
double memcpy_gbs(int reps) {
  const size_t bytes = size_t{256} << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds_since(t0) / 1e9);
    src[static_cast<size_t>(r) % bytes] = static_cast<char>(r);
  }
  if (dst[bytes / 2] == 7) std::puts("");
  return best;
}

// Best GB/s of reading 256 MiB (each thread its share), `threads` threads: eight independent XOR chains of 32-byte
// vectors per thread, so that the loads, not the arithmetic, set the pace. On 2 MiB pages where the kernel gives
// them, as the packed weights a decoding step streams are (4 KiB pages read about 20% slower here: TLB misses).
double read_gbs(unsigned threads, int reps) {
  using V = unsigned long long __attribute__((vector_size(32)));
  const size_t bytes = size_t{256} << 20, count = bytes / sizeof(V);
  const std::unique_ptr<V, decltype(&std::free)> owner(static_cast<V*>(std::aligned_alloc(size_t{2} << 20, bytes)),
                                                       &std::free);
  V* data = owner.get();
  if (data == nullptr) return 0.0;
#if defined(__linux__)
  madvise(data, bytes, MADV_HUGEPAGE);
#endif
  for (size_t i = 0; i < count; ++i) data[i] = V{i, i + 1, i + 2, i + 3};  // written: the pages exist
  std::vector<V> sink(threads);
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t share = count / threads / 8 * 8;  // whole rounds of the eight chains; the last thread the rest
        const size_t begin = share * t, end = t + 1 == threads ? count : begin + share;
        V x0{}, x1{}, x2{}, x3{}, x4{}, x5{}, x6{}, x7{};
        for (size_t i = begin; i + 8 <= end; i += 8) {
          x0 ^= data[i], x1 ^= data[i + 1], x2 ^= data[i + 2], x3 ^= data[i + 3];
          x4 ^= data[i + 4], x5 ^= data[i + 5], x6 ^= data[i + 6], x7 ^= data[i + 7];
        }
        sink[t] = x0 ^ x1 ^ x2 ^ x3 ^ x4 ^ x5 ^ x6 ^ x7;
      });
    }
    for (std::thread& th : pool) th.join();
    best = std::max(best, static_cast<double>(count * sizeof(V)) / seconds_since(t0) / 1e9);
  }
  if (sink[0][0] == 12345) std::puts("");  // keeps the reads alive
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
    } else {
      std::fprintf(stderr, "usage: %s [--threads N]\n", argv[0]);
      return 2;
    }
  }
  const double avx2_1 = fma_gflops(false, 1, 5), avx2_all = fma_gflops(false, threads, 5);
  const double avx512_1 = fma_gflops(true, 1, 5), avx512_all = fma_gflops(true, threads, 5);
  std::printf("{\"threads\": %u, \"fma_gflops_1\": %.1f, \"fma_gflops_all\": %.1f, \"avx2_fma_gflops_1\": %.1f, "
              "\"avx2_fma_gflops_all\": %.1f, \"avx512_fma_gflops_1\": %.1f, \"avx512_fma_gflops_all\": %.1f, "
              "\"memcpy_gbs_1\": %.1f, \"read_gbs_1\": %.1f, \"read_gbs_all\": %.1f}\n",
              threads, std::max(avx2_1, avx512_1), std::max(avx2_all, avx512_all), avx2_1, avx2_all, avx512_1,
              avx512_all, memcpy_gbs(7), read_gbs(1, 7), read_gbs(threads, 7));
  return 0;
}
