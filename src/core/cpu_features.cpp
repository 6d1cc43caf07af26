#include "core/cpu_features.h"

#include <cpuinfo.h>

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

CpuLevel detected_level() {
  // cpuinfo_initialize() is idempotent; a failure (an unreadable /proc, say) leaves the portable kernels.
#if defined(__x86_64__) || defined(__i386__)
  // cpuinfo reports an AVX-512 feature only where the OS saves the 512-bit state.
  if (!cpuinfo_initialize() || !cpuinfo_has_x86_avx2() || !cpuinfo_has_x86_fma3()) return CpuLevel::portable;
  if (cpuinfo_has_x86_avx512f() && cpuinfo_has_x86_avx512bw() && cpuinfo_has_x86_avx512vl() &&
      cpuinfo_has_x86_avx512vnni()) {
    return CpuLevel::avx512_vnni;
  }
  return CpuLevel::avx2_fma;
#elif defined(__aarch64__)
  // AArch64 has Advanced SIMD with FMA by definition; the dot-product extensions come from the kernel's hwcaps.
  if (!cpuinfo_initialize()) return CpuLevel::neon;
  if (!cpuinfo_has_arm_neon_dot()) return CpuLevel::neon;
  // Debian 12's cpuinfo (2022) predates its I8MM query: the kernel's hwcap bit (HWCAP2_I8MM, bit 13) is read.
#if defined(__linux__)
  if ((getauxval(AT_HWCAP2) & (1ul << 13)) == 0) return CpuLevel::neon_dotprod;
  return CpuLevel::neon_i8mm;
#else
  return CpuLevel::neon_dotprod;
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
