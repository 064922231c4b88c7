// Run-time SIMD dispatch for the custom ops: the wheel's baseline is SSE only, so AVX2/FMA and
// AVX-512 kernels are compiled with target attributes and chosen when the CPU has them.
#pragma once

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define QTTS_X86 1
#include <immintrin.h>
#define QTTS_AVX2 __attribute__((target("avx2,fma")))
#define QTTS_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#endif

namespace qtts {

inline bool has_avx2() {
#ifdef QTTS_X86
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return yes;
#else
    return false;
#endif
}

inline bool has_avx512() {
#ifdef QTTS_X86
    static const bool yes = has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    return yes;
#else
    return false;
#endif
}

}  // namespace qtts
