#include "core/cpu_features.h"

#include <algorithm>
#include <array>
#include <atomic>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace etnp {
namespace {

#if defined(__x86_64__) || defined(__i386__)
constexpr std::array kLevels{CpuLevel::portable, CpuLevel::avx2_fma, CpuLevel::avx512_vnni};
#elif defined(__aarch64__)
constexpr std::array kLevels{CpuLevel::portable, CpuLevel::neon, CpuLevel::neon_dotprod, CpuLevel::neon_i8mm};
#else
constexpr std::array kLevels{CpuLevel::portable};
#endif

// From the CPU's own feature bits, not cpuinfo: cpuinfo_initialize() reads /proc and /sys (0.2 ms on the
// project's machine), which a process paid at its first load of a program that packs weights; these checks
// take microseconds. (The XNNPACK delegate still initializes cpuinfo, through XNNPACK, where it is used.)
CpuLevel detected_level() {
#if defined(__x86_64__) || defined(__i386__)
  // The compiler's runtime reads CPUID and reports an AVX or AVX-512 feature only where the OS saves that
  // register state (XCR0).
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return CpuLevel::portable;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
    return CpuLevel::avx512_vnni;
  }
  return CpuLevel::avx2_fma;
#elif defined(__aarch64__)
  // AArch64 has Advanced SIMD with FMA by definition; the dot-product extensions come from the kernel's hwcaps:
  // bit 20 of AT_HWCAP is ASIMDDP (SDOT/UDOT), bit 13 of AT_HWCAP2 is I8MM (arch/arm64/include/uapi/asm/hwcap.h).
#if defined(__linux__)
  if ((getauxval(AT_HWCAP) & (1ul << 20)) == 0) return CpuLevel::neon;
  if ((getauxval(AT_HWCAP2) & (1ul << 13)) == 0) return CpuLevel::neon_dotprod;
  return CpuLevel::neon_i8mm;
#else
  return CpuLevel::neon;
#endif
#else
  return CpuLevel::portable;
#endif
}

std::atomic<CpuLevel> level_cap{kLevels.back()};

}  // namespace

std::span<const CpuLevel> cpu_levels() { return kLevels; }

CpuLevel cpu_level() {
  static const CpuLevel detected = detected_level();
  return std::min(detected, level_cap.load(std::memory_order_relaxed));
}

bool has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  return cpu_level() >= CpuLevel::avx2_fma;
#else
  return false;
#endif
}

bool has_neon() {
#if defined(__aarch64__)
  return cpu_level() >= CpuLevel::neon;
#else
  return false;
#endif
}

void cap_cpu_level(CpuLevel max) { level_cap.store(max, std::memory_order_relaxed); }

void lift_cpu_level_cap() { level_cap.store(kLevels.back(), std::memory_order_relaxed); }

const char* cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::portable:
      return "portable";
#if defined(__x86_64__) || defined(__i386__)
    case CpuLevel::avx2_fma:
      return "avx2_fma";
    case CpuLevel::avx512_vnni:
      return "avx512_vnni";
#elif defined(__aarch64__)
    case CpuLevel::neon:
      return "neon";
    case CpuLevel::neon_dotprod:
      return "neon_dotprod";
    case CpuLevel::neon_i8mm:
      return "neon_i8mm";
#endif
  }
  return "unknown";
}

}  // namespace etnp
