// The instruction set the vector kernels may use on this CPU, decided once for the whole process (from CPUID, or
// the kernel's hwcaps on aarch64).
// This is the one place that decides: a kernel asks cpu_level() and runs the implementation for that level,
// or the highest one it has below it, down to its portable twin.
#pragma once

#include <span>

namespace etnp {

/// The vector levels the hand-written kernels target on this architecture, lowest first; each includes the
/// ones before it. Only this architecture's levels exist, so that code for another one cannot name them.
///   x86-64:  avx2_fma: AVX2 and FMA3 (code compiled with target("avx2,fma")). avx512_vnni: AVX-512 F, BW and
///            VL with VNNI, whose byte dot products (vpdpbusd, on 256-bit vectors too) the integer GEMMs use.
///   aarch64: neon: Advanced SIMD with FMA, which every AArch64 CPU has. neon_dotprod: SDOT/UDOT (Armv8.2
///            DotProd: Cortex-A55/A76 and later). neon_i8mm: SMMLA/USDOT (Armv8.6 I8MM: Cortex-A510/A710,
///            Neoverse V1/N2 and later).
enum class CpuLevel {
  portable,
#if defined(__x86_64__) || defined(__i386__)
  avx2_fma,
  avx512_vnni,
#elif defined(__aarch64__)
  neon,
  neon_dotprod,
  neon_i8mm,
#endif
};

/// This architecture's levels, lowest (portable) first.
std::span<const CpuLevel> cpu_levels();

/// The highest level this CPU and its OS support, lowered to the cap of cap_cpu_level() if one is set.
/// Kernels read it per call.
CpuLevel cpu_level();

/// cpu_level() >= CpuLevel::avx2_fma: false on other architectures, where other kernels run.
bool has_avx2_fma();

/// cpu_level() >= CpuLevel::neon: false on other architectures.
bool has_neon();

/// Tests: no kernel uses a level above `max` until the cap is lifted (lift_cpu_level_cap), so that each
/// implementation of a kernel, its portable twin included, runs on this CPU. Set it between calls, never while
/// kernels run on other threads.
void cap_cpu_level(CpuLevel max);

/// Removes the cap of cap_cpu_level(): cpu_level() is the detected level again.
void lift_cpu_level_cap();

/// "portable", "avx2_fma", "avx512_vnni", "neon", "neon_dotprod" or "neon_i8mm".
const char* cpu_level_name(CpuLevel level);

}  // namespace etnp
