#include "core/cpu_features.h"

#include <cpuinfo.h>

namespace etnp {

bool has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  // cpuinfo_initialize() is idempotent; a failure (an unreadable /proc, say) leaves the portable kernels.
  static const bool yes = cpuinfo_initialize() && cpuinfo_has_x86_avx2() && cpuinfo_has_x86_fma3();
  return yes;
#else
  return false;
#endif
}

}  // namespace etnp
