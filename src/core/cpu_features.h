// The instruction set the vector kernels may use on this CPU, decided once (by cpuinfo) for the whole process.
#pragma once

namespace etnp {

/// The vector levels the hand-written kernels target, lowest first; each includes the ones before it.
/// avx2_fma: AVX2 and FMA3 (code compiled with target("avx2,fma")). avx512_vnni: AVX-512 F, BW and VL with
/// VNNI, whose byte dot products (vpdpbusd, on 256-bit vectors too) the integer GEMMs use.
enum class CpuLevel { portable, avx2_fma, avx512_vnni };

/// The highest level this CPU and its OS support, lowered to the cap of cap_cpu_level() if one is set.
/// Kernels read it per call.
CpuLevel cpu_level();

/// cpu_level() >= CpuLevel::avx2_fma: false on other architectures, where the portable loops run.
bool has_avx2_fma();

/// Tests: no kernel uses a level above `max` until the cap is raised again (CpuLevel::avx512_vnni lifts it),
/// so that each implementation of a kernel, its portable twin included, runs on this CPU. Set it between
/// calls, never while kernels run on other threads.
void cap_cpu_level(CpuLevel max);

/// "portable", "avx2_fma" or "avx512_vnni".
const char* cpu_level_name(CpuLevel level);

}  // namespace etnp
