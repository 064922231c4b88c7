// Run-time SIMD dispatch for the custom ops: the wheel's baseline is SSE only, so the AVX2/FMA
// and AVX-512 kernels are compiled with target attributes and chosen per call from simd_path().
#pragma once

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define QTTS_X86 1
#include <immintrin.h>
#define QTTS_AVX2 __attribute__((target("avx2,fma")))
#define QTTS_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#endif

namespace qtts {

// Ordered: a path may use the kernels of every path below it.
enum class SimdPath { scalar = 0, avx2 = 1, avx512 = 2 };

// The best path this CPU supports (avx2 needs FMA too, avx512 needs AVX-512F and VL).
SimdPath best_simd_path();

// The path the ops take now: best_simd_path() unless a test lowered it. Each op reads it once
// per call and thread (one relaxed atomic load), so a switch takes effect at the next graph.
SimdPath simd_path();

// Test-only: make the ops take `path` (one the CPU supports; fails with Error otherwise).
void set_simd_path(SimdPath path);

const char * simd_path_name(SimdPath path);

}  // namespace qtts
