// The quantized matmul's Q8_0 kernel with the Armv8.2 dot-product extension: the build compiles
// this file alone for it (CMakeLists.txt) and ops/qmatmul_arm.cpp calls it only on CPUs that
// report the extension.
#include "ops/qmatmul_impl.h"

#if defined(QTTS_QMM_ARM) && defined(QTTS_QMM_DOTPROD)

#include "ops/qmatmul_arm_tile.h"

namespace qtts::qmm {

namespace {

struct Dotprod {
    static int32_t sum(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) {
        return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1));
    }
};

}  // namespace

void q8_0_dotprod(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    q8_tiles<Dotprod>(t, n0, n1, m0, m1);
}

}  // namespace qtts::qmm

#endif
