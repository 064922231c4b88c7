// The quantized matmul's Q8_0 kernel on aarch64 (ops/qmatmul_arm_tile.h): the 32-value integer
// dot product with vdotq_s32 where the CPU has the dot-product extension (asked at run time),
// else with widening multiplies and pairwise adds (no int16 overflow: |w|, |x| <= 128 and each
// int16 lane sums two products). Q4_K and Q6_K keep ggml's mul_mat on ARM.
#include "ops/qmatmul_impl.h"

#ifdef QTTS_QMM_ARM

#include "ops/qmatmul_arm_tile.h"

#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace qtts::qmm {

#ifdef QTTS_QMM_DOTPROD
void q8_0_dotprod(const Task &, int64_t, int64_t, int64_t, int64_t);  // qmatmul_arm_dotprod.cpp
#endif

namespace {

struct PlainDot {
    static int32_t sum(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) {
        int16x8_t p0 = vmull_s8(vget_low_s8(w0), vget_low_s8(x0));
        p0 = vmlal_s8(p0, vget_high_s8(w0), vget_high_s8(x0));
        int16x8_t p1 = vmull_s8(vget_low_s8(w1), vget_low_s8(x1));
        p1 = vmlal_s8(p1, vget_high_s8(w1), vget_high_s8(x1));
        return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
    }
};

void q8_0_neon(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    q8_tiles<PlainDot>(t, n0, n1, m0, m1);
}

[[maybe_unused]] bool cpu_has_dotprod() {
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
    int has = 0;
    size_t size = sizeof has;
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &has, &size, nullptr, 0) == 0 && has != 0;
#else
    return false;
#endif
}

}  // namespace

KernelFn q8_0_neon_kernel() {
#ifdef QTTS_QMM_DOTPROD
    static const KernelFn fn = cpu_has_dotprod() ? q8_0_dotprod : q8_0_neon;
    return fn;
#else
    return q8_0_neon;
#endif
}

}  // namespace qtts::qmm

#endif
