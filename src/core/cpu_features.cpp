#include "core/cpu_features.h"

#include <cpuinfo.h>

#include <atomic>

namespace etnp {
namespace {
std::atomic<bool> portable_forced{false};
}  // namespace

bool has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  // cpuinfo_initialize() is idempotent; a failure (an unreadable /proc, say) leaves the portable kernels.
  static const bool yes = cpuinfo_initialize() && cpuinfo_has_x86_avx2() && cpuinfo_has_x86_fma3();
  return yes && !portable_forced.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void force_portable_kernels(bool on) { portable_forced.store(on, std::memory_order_relaxed); }

}  // namespace etnp
