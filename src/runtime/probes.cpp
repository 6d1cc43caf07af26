// The semaphores of the USDT probes (probes.h). perf finds them in the ".probes" section, where SystemTap's
// tools put them too; hidden (probes.h), so that each module linking etnp statically counts its own.
#include "runtime/probes.h"

#if ETNP_USDT
extern "C" {
#define ETNP_PROBE_SEMAPHORE_DEFINITION(name) \
  __attribute__((section(".probes"))) volatile unsigned short etnp_##name##_semaphore = 0;
ETNP_PROBES(ETNP_PROBE_SEMAPHORE_DEFINITION)
#undef ETNP_PROBE_SEMAPHORE_DEFINITION
}
#endif
