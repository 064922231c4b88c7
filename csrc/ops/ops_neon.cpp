// The NEON kernels of the conv-GEMM, SnakeBeta and ELU (ops/neon.h). NEON is baseline on
// aarch64, so they need no target attributes; the x86 kernels' structure and per-lane arithmetic
// carry over with 4-lane vectors (docs/kernels.md, "Custom CPU ops", "ARM").
#include "ops/neon.h"

#ifdef QTTS_NEON

#include <arm_neon.h>

#include "ops/snake_math.h"

namespace qtts {

namespace {

// MT rows x NV*4 output lanes starting at lane o: MT*NV accumulators; 6 x 16 keeps 24 of them,
// 4 weight vectors and a broadcast in the 32 NEON registers. Every lane sees one fused
// multiply-add per (k, c) in order, then + bias, then + residual, whatever MT and NV.
template <int MT, int NV>
void tile(const ConvGemmTile & g, int64_t o) {
    float32x4_t acc[MT][NV];
    for (int i = 0; i < MT; ++i)
        for (int v = 0; v < NV; ++v) acc[i][v] = vdupq_n_f32(0.0f);
    const int64_t P = g.P, cin = g.cin, ldx = g.ldx;
    for (int64_t k = 0; k < g.k; ++k) {
        const float * wk = g.w + k * cin * P + o;
        const float * xk = g.x + k * g.dstep;
        for (int64_t c = 0; c < cin; ++c) {
            float32x4_t wv[NV];
            for (int v = 0; v < NV; ++v) wv[v] = vld1q_f32(wk + c * P + 4 * v);
            for (int i = 0; i < MT; ++i) {
                const float32x4_t xb = vld1q_dup_f32(xk + i * ldx + c);
                for (int v = 0; v < NV; ++v) acc[i][v] = vfmaq_f32(acc[i][v], wv[v], xb);
            }
        }
    }
    for (int i = 0; i < MT; ++i) {
        for (int v = 0; v < NV; ++v) {
            float32x4_t r = acc[i][v];
            if (g.b) r = vaddq_f32(r, vld1q_f32(g.b + o + 4 * v));
            if (g.res) r = vaddq_f32(r, vld1q_f32(g.res + i * g.ldr + o + 4 * v));
            vst1q_f32(g.y + i * g.ldy + o + 4 * v, r);
        }
    }
}

template <int NV>
void tile_rows(const ConvGemmTile & g, int64_t o, int64_t mt) {
    switch (mt) {
        case 1: tile<1, NV>(g, o); break;
        case 2: tile<2, NV>(g, o); break;
        case 3: tile<3, NV>(g, o); break;
        case 4: tile<4, NV>(g, o); break;
        case 5: tile<5, NV>(g, o); break;
        default: tile<6, NV>(g, o); break;
    }
}

}  // namespace

int64_t conv_gemm_tile_neon(const ConvGemmTile & g, int64_t mt) {
    int64_t o = 0;
    for (; o + 16 <= g.P; o += 16) tile_rows<4>(g, o, mt);
    for (; o + 4 <= g.P; o += 4) tile_rows<1>(g, o, mt);
    return o;
}

// The per-lane operations of snake_beta.cpp's snake_row_avx2: round to nearest even, Cody-Waite
// reduction and both polynomials by fused multiply-adds, the quadrant's parity picks one.
int64_t snake_row_neon(const float * x, const float * ea, const float * ib, float * y, int64_t n) {
    using namespace sin2_consts;
    const float32x4_t one = vdupq_n_f32(1.0f), half = vdupq_n_f32(0.5f);
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
        const float32x4_t xv = vld1q_f32(x + c), z = vmulq_f32(xv, vld1q_f32(ea + c));
        const float32x4_t j = vrndnq_f32(vmulq_n_f32(z, kTwoOverPi));
        float32x4_t r = vfmsq_f32(z, j, vdupq_n_f32(kPio2A));
        r = vfmsq_f32(r, j, vdupq_n_f32(kPio2B));
        r = vfmsq_f32(r, j, vdupq_n_f32(kPio2C));
        const float32x4_t r2 = vmulq_f32(r, r);
        float32x4_t s = vfmaq_f32(vdupq_n_f32(kS2), r2, vdupq_n_f32(kS3));
        s = vfmaq_f32(vdupq_n_f32(kS1), r2, s);
        s = vfmaq_f32(r, vmulq_f32(r, r2), s);
        float32x4_t co = vfmaq_f32(vdupq_n_f32(kC2), r2, vdupq_n_f32(kC3));
        co = vfmaq_f32(vdupq_n_f32(kC1), r2, co);
        co = vfmaq_f32(vfmsq_f32(one, half, r2), vmulq_f32(r2, r2), co);
        const uint32x4_t odd = vtstq_s32(vcvtq_s32_f32(j), vdupq_n_s32(1));
        const float32x4_t v = vbslq_f32(odd, co, s);
        vst1q_f32(y + c, vfmaq_f32(xv, vld1q_f32(ib + c), vmulq_f32(v, v)));
    }
    return c;
}

// elu_left.cpp's elu_row_avx2 lane by lane: expm1(x) for x <= 0 as 2^k (p(r) + 1) - 1 with
// x = k ln2 + r and p the degree-7 Taylor polynomial; inputs clamped to [-87, 0].
int64_t elu_row_neon(const float * x, float * y, int64_t n) {
    const float32x4_t zero = vdupq_n_f32(0.0f), lo = vdupq_n_f32(-87.0f), one = vdupq_n_f32(1.0f);
    const float32x4_t ln2_hi = vdupq_n_f32(0.693359375f), ln2_lo = vdupq_n_f32(-2.12194440e-4f);
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
        const float32x4_t xv = vld1q_f32(x + c);
        const float32x4_t z = vmaxq_f32(vminq_f32(xv, zero), lo);
        const float32x4_t k = vrndnq_f32(vmulq_n_f32(z, 1.44269504089f));
        const float32x4_t r = vfmsq_f32(vfmsq_f32(z, k, ln2_hi), k, ln2_lo);
        float32x4_t p = vdupq_n_f32(1.0f / 5040);
        p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
        p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
        p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
        p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
        p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
        p = vfmaq_f32(r, vmulq_f32(p, r), r);
        const float32x4_t s = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(k), vdupq_n_s32(127)), 23));
        const float32x4_t em1 = vfmaq_f32(vsubq_f32(s, one), s, p);
        vst1q_f32(y + c, vbslq_f32(vcgtq_f32(xv, zero), xv, em1));
    }
    return c;
}

}  // namespace qtts

#endif
