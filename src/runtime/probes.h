// USDT probes (docs/tracing.md): static trace points of provider "etnp" that perf, bpftrace or SystemTap
// attach to without rebuilding. Each probe has a semaphore, a counter that a tracer raises while attached;
// ETNP_PROBE reads it first, so with nobody tracing a probe costs one load and a branch not taken, and its
// arguments (c_str(), sizes) are not evaluated. Built with ETNP_USDT (CMake finds <sys/sdt.h>); without it
// the probes compile to nothing. The only file that includes <sys/sdt.h> (tests/layering/check_layers.py).
#pragma once

// Every probe, for the semaphores (probes.cpp); their arguments are listed in docs/tracing.md and checked
// against the ELF notes by tests/usdt/check_probes.py.
#define ETNP_PROBES(X) \
  X(program_load_begin) X(program_load_end) X(method_load_begin) X(method_load_end) \
  X(execute_begin) X(execute_end) X(delegate_begin) X(delegate_end)

#if ETNP_USDT

#if defined(_SYS_SDT_H) && !defined(_SDT_HAS_SEMAPHORES)
#error "<sys/sdt.h> was included without semaphores before runtime/probes.h: its probes would never fire"
#endif
#define _SDT_HAS_SEMAPHORES 1
#define SDT_USE_VARIADIC 1  // STAP_PROBEV
#include <sys/sdt.h>

// The names sdt.h gives the semaphores: unmangled, as its assembly refers to them by symbol; hidden, so that
// the runtime reads them without going through the GOT.
extern "C" {
#define ETNP_PROBE_SEMAPHORE_DECLARATION(name) \
  extern __attribute__((visibility("hidden"))) volatile unsigned short etnp_##name##_semaphore;
ETNP_PROBES(ETNP_PROBE_SEMAPHORE_DECLARATION)
#undef ETNP_PROBE_SEMAPHORE_DECLARATION
}

/// True while some tracer is attached to probe `name`: guards work done only to feed a probe.
#define ETNP_PROBE_ENABLED(name) __builtin_expect(etnp_##name##_semaphore != 0, 0)
/// Fires probe `name` with its arguments (integers or pointers), evaluated only when a tracer is attached.
#define ETNP_PROBE(name, ...)                                        \
  do {                                                               \
    if (ETNP_PROBE_ENABLED(name)) STAP_PROBEV(etnp, name, __VA_ARGS__); \
  } while (0)

#else

namespace etnp::runtime {
template <class... Args>
constexpr int probe_arguments(const Args&...) { return 0; }
}  // namespace etnp::runtime

#define ETNP_PROBE_ENABLED(name) false
// The arguments stay type-checked (and count as used) in an unevaluated operand; no code is emitted.
#define ETNP_PROBE(name, ...) static_cast<void>(sizeof(::etnp::runtime::probe_arguments(__VA_ARGS__)))

#endif
