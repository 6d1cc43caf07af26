#include "core/cpu_features.h"

#include <cpuinfo.h>

#include <algorithm>
#include <atomic>

namespace etnp {
namespace {

CpuLevel detected_level() {
#if defined(__x86_64__) || defined(__i386__)
  // cpuinfo_initialize() is idempotent; a failure (an unreadable /proc, say) leaves the portable kernels.
  // cpuinfo reports an AVX-512 feature only where the OS saves the 512-bit state.
  if (!cpuinfo_initialize() || !cpuinfo_has_x86_avx2() || !cpuinfo_has_x86_fma3()) return CpuLevel::portable;
  if (cpuinfo_has_x86_avx512f() && cpuinfo_has_x86_avx512bw() && cpuinfo_has_x86_avx512vl() &&
      cpuinfo_has_x86_avx512vnni()) {
    return CpuLevel::avx512_vnni;
  }
  return CpuLevel::avx2_fma;
#else
  return CpuLevel::portable;
#endif
}

std::atomic<CpuLevel> level_cap{CpuLevel::avx512_vnni};

}  // namespace

CpuLevel cpu_level() {
  static const CpuLevel detected = detected_level();
  return std::min(detected, level_cap.load(std::memory_order_relaxed));
}

bool has_avx2_fma() { return cpu_level() >= CpuLevel::avx2_fma; }

void cap_cpu_level(CpuLevel max) { level_cap.store(max, std::memory_order_relaxed); }

const char* cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::portable:
      return "portable";
    case CpuLevel::avx2_fma:
      return "avx2_fma";
    case CpuLevel::avx512_vnni:
      return "avx512_vnni";
  }
  return "unknown";
}

}  // namespace etnp
