// Run-time SIMD dispatch for the custom ops: the wheel's baseline is SSE only, so the AVX2/FMA
// and AVX-512 kernels are compiled with target attributes and chosen per call from simd_path().
// On aarch64 NEON is baseline: the neon path is the best there, scalar the one tests may force.
#pragma once

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define QTTS_X86 1
#include <immintrin.h>
#define QTTS_AVX2 __attribute__((target("avx2,fma")))
#define QTTS_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#endif

#if defined(__aarch64__) || defined(_M_ARM64)
#define QTTS_NEON 1
#endif

namespace qtts {

// The x86 paths are ordered: one may use the kernels of every x86 path below it (x86_has). amx
// adds the quantized matmul's tile kernels (ops/qmatmul.h) to avx512; the other ops take their
// avx512 kernels there. neon is the aarch64 path (ops/neon.h), never available on x86, as the
// x86 paths never are on ARM.
enum class SimdPath { scalar = 0, avx2 = 1, avx512 = 2, amx = 3, neon = 4 };

// Whether `path` may use the kernels of the x86 path `floor`.
inline bool x86_has(SimdPath path, SimdPath floor) { return path != SimdPath::neon && path >= floor; }

// The best path this CPU supports (avx2 needs FMA too, avx512 needs AVX-512F and VL, amx needs
// AVX-512 VNNI, AMX-TILE, AMX-INT8 and the OS's leave to use the tiles; neon on every aarch64 CPU).
SimdPath best_simd_path();

// Whether this CPU can take `path`: scalar always, then the paths of its architecture up to
// best_simd_path().
bool simd_path_available(SimdPath path);

// The path the ops take now: best_simd_path() unless a test lowered it. Each op reads it once
// per call and thread (one relaxed atomic load), so a switch takes effect at the next graph.
SimdPath simd_path();

// Test-only: make the ops take `path` (one the CPU supports; fails with Error otherwise).
void set_simd_path(SimdPath path);

const char * simd_path_name(SimdPath path);

}  // namespace qtts
