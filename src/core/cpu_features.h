// The instruction set the vector kernels may use on this CPU, decided once (by cpuinfo) for the whole process.
#pragma once

namespace etnp {

/// True on x86-64 CPUs with both AVX2 and FMA3, the one vector level the hand-written kernels target (their
/// AVX2 code is compiled with target("avx2,fma")); false elsewhere, where the portable loops run.
bool has_avx2_fma();

/// Tests: while on, has_avx2_fma() is false, so that the portable twin of every kernel runs on this CPU too.
/// Set it between calls, never while kernels run on other threads (they read it per call).
void force_portable_kernels(bool on);

}  // namespace etnp
