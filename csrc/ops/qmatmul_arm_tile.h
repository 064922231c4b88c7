// The NEON Q8_0 tile of the quantized matmul (ops/qmatmul.h), included by ops/qmatmul_arm.cpp
// (plain NEON) and ops/qmatmul_arm_dotprod.cpp (compiled for the dot-product extension), each
// with its own 32-value integer dot product: everything here has internal linkage, so the two
// builds of it never mix.
#pragma once

#include <arm_neon.h>

#include <cstdint>

#include "ops/qmatmul_impl.h"

namespace qtts::qmm {
namespace {

// R weight rows x C activation columns. Each (row, column) gets the float chain of q8_0_scalar
// (acc += (d_w * d_x) * float(integer block sum), block by block) and the integer sums are
// exact, so the result is bit-identical to the plain C++ kernel's whatever R, C and Dot.
template <int R, int C, class Dot>
void q8_tile(const Task & t, int64_t n, int64_t m) {
    const int64_t nb = t.K / 32;
    const BlockQ8_0 * w[R];
    const int8_t * xq[C];
    const float * xd[C];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ8_0 *>(t.w + (n + r) * t.wrow);
    for (int c = 0; c < C; ++c) {
        xq[c] = reinterpret_cast<const int8_t *>(t.xq + (m + c) * t.xcol);
        xd[c] = reinterpret_cast<const float *>(xq[c] + t.K);
    }
    float acc[R][C] = {};
    for (int64_t j = 0; j < nb; ++j) {
        int8x16_t w0[R], w1[R];
        float dw[R];
        for (int r = 0; r < R; ++r) {
            w0[r] = vld1q_s8(w[r][j].qs);
            w1[r] = vld1q_s8(w[r][j].qs + 16);
            dw[r] = half_to_float(w[r][j].d);
        }
        for (int c = 0; c < C; ++c) {
            const int8x16_t x0 = vld1q_s8(xq[c] + 32 * j), x1 = vld1q_s8(xq[c] + 32 * j + 16);
            for (int r = 0; r < R; ++r) {
                const int32_t s = Dot::sum(w0[r], w1[r], x0, x1);
                acc[r][c] += dw[r] * xd[c][j] * static_cast<float>(s);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) t.y[(m + c) * t.ldy + n + r] = acc[r][c];
}

// Rows [n0, n1) x columns [m0, m1) in 4 x 4 tiles, single rows and columns at the edges.
template <class Dot>
void q8_tiles(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        int64_t m = m0;
        for (; m + 4 <= m1; m += 4) q8_tile<4, 4, Dot>(t, n, m);
        for (; m < m1; ++m) q8_tile<4, 1, Dot>(t, n, m);
    }
    for (; n < n1; ++n) {
        int64_t m = m0;
        for (; m + 4 <= m1; m += 4) q8_tile<1, 4, Dot>(t, n, m);
        for (; m < m1; ++m) q8_tile<1, 1, Dot>(t, n, m);
    }
}

}  // namespace
}  // namespace qtts::qmm
