#include "ops/vocoder_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <vector>

#include "runtime/error.h"
#include "ops/simd.h"

namespace qtts {

namespace {

// sin^2 by Cody-Waite reduction to |r| <= pi/4 and the Cephes sinf/cosf polynomials: sin^2
// needs only the parity of the quadrant. Relative error ~1e-7 for |z| up to ~1e4.
constexpr float kTwoOverPi = 0.636619772367581343f;
constexpr float kPio2A = 1.5703125f, kPio2B = 4.837512969970703125e-4f, kPio2C = 7.54978995489188216e-8f;
constexpr float kS1 = -1.6666654611e-1f, kS2 = 8.3321608736e-3f, kS3 = -1.9515295891e-4f;
constexpr float kC1 = 4.166664568298827e-2f, kC2 = -1.388731625493765e-3f, kC3 = 2.443315711809948e-5f;

inline float sin2(float z) {
    const float j = std::nearbyint(z * kTwoOverPi);
    const float r = ((z - j * kPio2A) - j * kPio2B) - j * kPio2C, r2 = r * r;
    const float v = (static_cast<long>(j) & 1) ? 1.0f - 0.5f * r2 + r2 * r2 * (kC1 + r2 * (kC2 + r2 * kC3))
                                                 : r + r * r2 * (kS1 + r2 * (kS2 + r2 * kS3));
    return v * v;
}

void snake_row_scalar(const float * x, const float * ea, const float * ib, float * y, int64_t c0, int64_t n) {
    for (int64_t c = c0; c < n; ++c) y[c] = x[c] + ib[c] * sin2(x[c] * ea[c]);
}

#ifdef QTTS_X86
QTTS_AVX2 void snake_row_avx2(const float * x, const float * ea, const float * ib, float * y, int64_t n) {
    const __m256 two_pi = _mm256_set1_ps(kTwoOverPi), one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        const __m256 xv = _mm256_loadu_ps(x + c), z = _mm256_mul_ps(xv, _mm256_loadu_ps(ea + c));
        const __m256 j = _mm256_round_ps(_mm256_mul_ps(z, two_pi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fnmadd_ps(j, _mm256_set1_ps(kPio2A), z);
        r = _mm256_fnmadd_ps(j, _mm256_set1_ps(kPio2B), r);
        r = _mm256_fnmadd_ps(j, _mm256_set1_ps(kPio2C), r);
        const __m256 r2 = _mm256_mul_ps(r, r);
        __m256 s = _mm256_fmadd_ps(r2, _mm256_set1_ps(kS3), _mm256_set1_ps(kS2));
        s = _mm256_fmadd_ps(r2, s, _mm256_set1_ps(kS1));
        s = _mm256_fmadd_ps(_mm256_mul_ps(r, r2), s, r);
        __m256 co = _mm256_fmadd_ps(r2, _mm256_set1_ps(kC3), _mm256_set1_ps(kC2));
        co = _mm256_fmadd_ps(r2, co, _mm256_set1_ps(kC1));
        co = _mm256_fmadd_ps(_mm256_mul_ps(r2, r2), co, _mm256_fnmadd_ps(half, r2, one));
        const __m256i odd = _mm256_slli_epi32(_mm256_cvtps_epi32(j), 31);
        const __m256 v = _mm256_blendv_ps(s, co, _mm256_castsi256_ps(odd));
        _mm256_storeu_ps(y + c, _mm256_fmadd_ps(_mm256_loadu_ps(ib + c), _mm256_mul_ps(v, v), xv));
    }
    snake_row_scalar(x, ea, ib, y, c, n);
}

// The same per-lane operations as snake_row_avx2 on 16 lanes (bit-identical results); the rest
// of the row goes through snake_row_avx2, so every element takes the path it would take there.
QTTS_AVX512 void snake_row_avx512(const float * x, const float * ea, const float * ib, float * y, int64_t n) {
    const __m512 two_pi = _mm512_set1_ps(kTwoOverPi), one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        const __m512 xv = _mm512_loadu_ps(x + c), z = _mm512_mul_ps(xv, _mm512_loadu_ps(ea + c));
        const __m512 j = _mm512_roundscale_ps(_mm512_mul_ps(z, two_pi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(j, _mm512_set1_ps(kPio2A), z);
        r = _mm512_fnmadd_ps(j, _mm512_set1_ps(kPio2B), r);
        r = _mm512_fnmadd_ps(j, _mm512_set1_ps(kPio2C), r);
        const __m512 r2 = _mm512_mul_ps(r, r);
        __m512 s = _mm512_fmadd_ps(r2, _mm512_set1_ps(kS3), _mm512_set1_ps(kS2));
        s = _mm512_fmadd_ps(r2, s, _mm512_set1_ps(kS1));
        s = _mm512_fmadd_ps(_mm512_mul_ps(r, r2), s, r);
        __m512 co = _mm512_fmadd_ps(r2, _mm512_set1_ps(kC3), _mm512_set1_ps(kC2));
        co = _mm512_fmadd_ps(r2, co, _mm512_set1_ps(kC1));
        co = _mm512_fmadd_ps(_mm512_mul_ps(r2, r2), co, _mm512_fnmadd_ps(half, r2, one));
        const __mmask16 odd = _mm512_test_epi32_mask(_mm512_cvtps_epi32(j), _mm512_set1_epi32(1));
        const __m512 v = _mm512_mask_blend_ps(odd, s, co);
        _mm512_storeu_ps(y + c, _mm512_fmadd_ps(_mm512_loadu_ps(ib + c), _mm512_mul_ps(v, v), xv));
    }
    if (c < n) snake_row_avx2(x + c, ea + c, ib + c, y + c, n - c);
}
#endif

void snake_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *x = dst->src[0], *ea = dst->src[1], *ib = dst->src[2], *left = dst->src[3];
    const int64_t C = dst->ne[0], n = x->ne[1], P = dst->ne[1] - n, rows = dst->ne[1];
    const int64_t r0 = rows * ith / nth, r1 = rows * (ith + 1) / nth;
    const float *a = static_cast<const float *>(ea->data), *b = static_cast<const float *>(ib->data);
    for (int64_t r = r0; r < r1; ++r) {
        float * y = reinterpret_cast<float *>(static_cast<char *>(dst->data) + r * dst->nb[1]);
        if (r < P) {
            std::memcpy(y, static_cast<const char *>(left->data) + r * left->nb[1], C * sizeof(float));
            continue;
        }
        const float * xr = reinterpret_cast<const float *>(static_cast<const char *>(x->data) + (r - P) * x->nb[1]);
#ifdef QTTS_X86
        if (has_avx512()) {
            snake_row_avx512(xr, a, b, y, C);
            continue;
        }
        if (has_avx2()) {
            snake_row_avx2(xr, a, b, y, C);
            continue;
        }
#endif
        snake_row_scalar(xr, a, b, y, 0, C);
    }
}

// One conv-GEMM call's geometry. Pointers are at the tile's first output row/channel.
struct Gemm {
    const float * w;  // panel base: [K][Cin][P]
    const float * x;  // xp row t
    const float * b;  // bias at the first channel, or null
    const float * res;
    float * y;
    int64_t P, cin, k, dstep;  // dstep = d * ldx
    int64_t ldx, ldr, ldy;
};

// Output lanes [o, o + w) of one panel for rows [0, mt): plain loops for panels that are not a
// whole number of 8-lane vectors (tiny models) and for CPUs without AVX2.
void tile_scalar(const Gemm & g, int64_t o, int64_t w, int64_t mt) {
    for (int64_t i = 0; i < mt; ++i) {
        for (int64_t l = o; l < o + w; ++l) {
            float acc = 0.0f;
            for (int64_t k = 0; k < g.k; ++k) {
                const float * wk = g.w + k * g.cin * g.P + l;
                const float * xk = g.x + i * g.ldx + k * g.dstep;
                for (int64_t c = 0; c < g.cin; ++c) acc += wk[c * g.P] * xk[c];
            }
            if (g.b) acc += g.b[l];
            if (g.res) acc += g.res[i * g.ldr + l];
            g.y[i * g.ldy + l] = acc;
        }
    }
}

#ifdef QTTS_X86
// MT rows x NV*8 output lanes starting at lane o: MT*NV accumulators, each (k, c) step costs
// NV weight loads, MT broadcasts and MT*NV FMAs (perf notes §5.3).
template <int MT, int NV>
QTTS_AVX2 void tile_avx2(const Gemm & g, int64_t o) {
    __m256 acc[MT][NV];
    for (int i = 0; i < MT; ++i)
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
    const int64_t P = g.P, cin = g.cin, ldx = g.ldx;
    for (int64_t k = 0; k < g.k; ++k) {
        const float * wk = g.w + k * cin * P + o;
        const float * xk = g.x + k * g.dstep;
        for (int64_t c = 0; c < cin; ++c) {
            __m256 wv[NV];
            for (int v = 0; v < NV; ++v) wv[v] = _mm256_loadu_ps(wk + c * P + 8 * v);
            for (int i = 0; i < MT; ++i) {
                const __m256 xb = _mm256_broadcast_ss(xk + i * ldx + c);
                for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(wv[v], xb, acc[i][v]);
            }
        }
    }
    for (int i = 0; i < MT; ++i) {
        for (int v = 0; v < NV; ++v) {
            __m256 r = acc[i][v];
            if (g.b) r = _mm256_add_ps(r, _mm256_loadu_ps(g.b + o + 8 * v));
            if (g.res) r = _mm256_add_ps(r, _mm256_loadu_ps(g.res + i * g.ldr + o + 8 * v));
            _mm256_storeu_ps(g.y + i * g.ldy + o + 8 * v, r);
        }
    }
}

// The full 6x16 tile with named accumulators: __m256 is a may_alias type, so GCC keeps an
// accumulator array in memory and stores it on every step. Same arithmetic as tile_avx2<6, 2>.
QTTS_AVX2 void tile_avx2_6x16(const Gemm & g, int64_t o) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    const int64_t P = g.P, cin = g.cin, ldx = g.ldx, K = g.k, dstep = g.dstep;
    for (int64_t k = 0; k < K; ++k) {
        const float * wk = g.w + k * cin * P + o;
        const float * xk = g.x + k * dstep;
        for (int64_t c = 0; c < cin; ++c) {
            const __m256 w0 = _mm256_loadu_ps(wk + c * P), w1 = _mm256_loadu_ps(wk + c * P + 8);
#define QTTS_ROW(i)                                                  \
    {                                                                \
        const __m256 xb = _mm256_broadcast_ss(xk + (i) * ldx + c);   \
        a##i##0 = _mm256_fmadd_ps(w0, xb, a##i##0);                  \
        a##i##1 = _mm256_fmadd_ps(w1, xb, a##i##1);                  \
    }
            QTTS_ROW(0) QTTS_ROW(1) QTTS_ROW(2) QTTS_ROW(3) QTTS_ROW(4) QTTS_ROW(5)
#undef QTTS_ROW
        }
    }
    const __m256 acc[6][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
    for (int i = 0; i < 6; ++i) {
        for (int v = 0; v < 2; ++v) {
            __m256 r = acc[i][v];
            if (g.b) r = _mm256_add_ps(r, _mm256_loadu_ps(g.b + o + 8 * v));
            if (g.res) r = _mm256_add_ps(r, _mm256_loadu_ps(g.res + i * g.ldr + o + 8 * v));
            _mm256_storeu_ps(g.y + i * g.ldy + o + 8 * v, r);
        }
    }
}

template <int NV>
void tile_rows_avx2(const Gemm & g, int64_t o, int64_t mt) {
    if (NV == 2 && mt == 6) return tile_avx2_6x16(g, o);
    switch (mt) {
        case 1: tile_avx2<1, NV>(g, o); break;
        case 2: tile_avx2<2, NV>(g, o); break;
        case 3: tile_avx2<3, NV>(g, o); break;
        case 4: tile_avx2<4, NV>(g, o); break;
        case 5: tile_avx2<5, NV>(g, o); break;
        default: tile_avx2<6, NV>(g, o); break;
    }
}

// AVX-512: MT rows x NP 16-lane panels (one __m512 per panel row), NP = 2 reads the next panel's
// weights `pstride` floats further on and writes its lanes 16 further on. Every output element
// gets the same FMA chain as in the AVX2 kernels (k, then c, in order; then + bias, + residual),
// so results are bit-identical whichever kernel, tile or thread computes them.
template <int MT, int NP>
QTTS_AVX512 void tile_avx512(const Gemm & g, int64_t pstride, int64_t cstep) {
    static_assert(MT >= 1 && MT <= 12 && (NP == 1 || NP == 2), "tile shape");
    // the output (and residual) lines are cold: fetch them while the FMAs run
    for (int i = 0; i < MT; ++i) {
        for (int v = 0; v < NP; ++v) {
            __builtin_prefetch(g.y + i * g.ldy + 16 * v, 1, 3);
            if (g.res) __builtin_prefetch(g.res + i * g.ldr + 16 * v, 0, 3);
        }
    }
    const __m512 z = _mm512_setzero_ps();
    __m512 a0_0 = z, a0_1 = z, a1_0 = z, a1_1 = z, a2_0 = z, a2_1 = z, a3_0 = z, a3_1 = z;
    __m512 a4_0 = z, a4_1 = z, a5_0 = z, a5_1 = z, a6_0 = z, a6_1 = z, a7_0 = z, a7_1 = z;
    __m512 a8_0 = z, a8_1 = z, a9_0 = z, a9_1 = z, a10_0 = z, a10_1 = z, a11_0 = z, a11_1 = z;
    const int64_t cin = g.cin, ldx = g.ldx, K = g.k, dstep = g.dstep;
    for (int64_t k = 0; k < K; ++k) {
        const float * w0 = g.w + k * cin * cstep;
        const float * w1 = w0 + pstride;
        const float * xk = g.x + k * dstep;
        for (int64_t c = 0; c < cin; ++c) {
            const __m512 v0 = _mm512_loadu_ps(w0 + c * cstep);
            const __m512 v1 = NP == 2 ? _mm512_loadu_ps(w1 + c * cstep) : v0;
#define QTTS_ROW(i)                                                        \
    if (MT > i) {                                                          \
        const __m512 xb = _mm512_set1_ps(xk[(i) * ldx + c]);               \
        a##i##_0 = _mm512_fmadd_ps(v0, xb, a##i##_0);                      \
        if (NP == 2) a##i##_1 = _mm512_fmadd_ps(v1, xb, a##i##_1);         \
    }
            QTTS_ROW(0) QTTS_ROW(1) QTTS_ROW(2) QTTS_ROW(3) QTTS_ROW(4) QTTS_ROW(5)
            QTTS_ROW(6) QTTS_ROW(7) QTTS_ROW(8) QTTS_ROW(9) QTTS_ROW(10) QTTS_ROW(11)
#undef QTTS_ROW
        }
    }
    const __m512 acc[12][2] = {{a0_0, a0_1}, {a1_0, a1_1}, {a2_0, a2_1},   {a3_0, a3_1},   {a4_0, a4_1},   {a5_0, a5_1},
                               {a6_0, a6_1}, {a7_0, a7_1}, {a8_0, a8_1}, {a9_0, a9_1}, {a10_0, a10_1}, {a11_0, a11_1}};
    for (int i = 0; i < MT; ++i) {
        for (int v = 0; v < NP; ++v) {
            __m512 r = acc[i][v];
            if (g.b) r = _mm512_add_ps(r, _mm512_loadu_ps(g.b + 16 * v));
            if (g.res) r = _mm512_add_ps(r, _mm512_loadu_ps(g.res + i * g.ldr + 16 * v));
            _mm512_storeu_ps(g.y + i * g.ldy + 16 * v, r);
        }
    }
}

template <int NP>
void tile_rows_avx512(const Gemm & g, int64_t pstride, int64_t cstep, int64_t mt) {
    switch (mt) {
        case 1: tile_avx512<1, NP>(g, pstride, cstep); break;
        case 2: tile_avx512<2, NP>(g, pstride, cstep); break;
        case 3: tile_avx512<3, NP>(g, pstride, cstep); break;
        case 4: tile_avx512<4, NP>(g, pstride, cstep); break;
        case 5: tile_avx512<5, NP>(g, pstride, cstep); break;
        case 6: tile_avx512<6, NP>(g, pstride, cstep); break;
        case 7: tile_avx512<7, NP>(g, pstride, cstep); break;
        case 8: tile_avx512<8, NP>(g, pstride, cstep); break;
        case 9: tile_avx512<9, NP>(g, pstride, cstep); break;
        case 10: tile_avx512<10, NP>(g, pstride, cstep); break;
        case 11: tile_avx512<11, NP>(g, pstride, cstep); break;
        default: tile_avx512<12, NP>(g, pstride, cstep); break;
    }
}
#endif

// Up to 6 rows of one panel. Which code path a lane takes depends only on the panel width.
void tile(const Gemm & g, int64_t mt) {
    int64_t o = 0;
#ifdef QTTS_X86
    if (has_avx2()) {
        for (; o + 16 <= g.P; o += 16) tile_rows_avx2<2>(g, o, mt);
        for (; o + 8 <= g.P; o += 8) tile_rows_avx2<1>(g, o, mt);
    }
#endif
    if (o < g.P) tile_scalar(g, o, g.P - o, mt);
}

constexpr int64_t kRowsPerItem = 48;  // time rows per work item: a multiple of the 6-row tile

#ifdef QTTS_X86
// 16-lane panels on an AVX-512 CPU: work items are (pair of panels, time chunk). The weight
// panels start 32 bytes off a cache line, which would make every 64-byte load a line split, so a
// thread that does several chunks of one pair first copies the pair to an aligned buffer,
// interleaved as [K][Cin][2][16] (values unchanged, so the results are too).
void conv_gemm_avx512(ggml_tensor * dst, int ith, int nth) {
    const ggml_tensor *xp = dst->src[0], *w = dst->src[1], *b = dst->src[2], *res = dst->src[3];
    const int64_t P = 16, cin = w->ne[1], K = w->ne[2], panels = w->ne[3], n = dst->ne[1];
    const int64_t d = K > 1 ? (xp->ne[1] - n) / (K - 1) : 0, ldx = xp->nb[1] / sizeof(float);
    const int64_t pairs = (panels + 1) / 2, pstride = K * cin * P;
    const int64_t chunks = (n + kRowsPerItem - 1) / kRowsPerItem, items = pairs * chunks;
    static thread_local std::vector<float> buf;
    int64_t packed = -1;  // the pair now in buf
    const int64_t i0 = items * ith / nth, i1 = items * (ith + 1) / nth;
    for (int64_t it = i0; it < i1; ++it) {
        const int64_t q = it / chunks, p = 2 * q, t0 = (it % chunks) * kRowsPerItem, t1 = std::min(n, t0 + kRowsPerItem);
        const bool two = p + 1 < panels;
        const float * wp = static_cast<const float *>(w->data) + p * pstride;
        Gemm g;
        g.w = wp;
        int64_t ps = pstride, cs = P;
        // items of this pair left to this thread
        const int64_t mine = std::min(i1, (q + 1) * chunks) - it;
        if (reinterpret_cast<uintptr_t>(wp) % 64 != 0 && (packed == q || mine >= 2)) {
            const int64_t np = two ? 2 : 1, rows = K * cin;
            if (packed != q) {
                buf.resize(rows * np * P + 16);
                float * dstw = buf.data() + (16 - reinterpret_cast<uintptr_t>(buf.data()) / sizeof(float) % 16) % 16;
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t v = 0; v < np; ++v) std::memcpy(dstw + (r * np + v) * P, wp + v * pstride + r * P, P * sizeof(float));
                packed = q;
            }
            g.w = buf.data() + (16 - reinterpret_cast<uintptr_t>(buf.data()) / sizeof(float) % 16) % 16;
            ps = P;
            cs = np * P;
        }
        g.b = b ? static_cast<const float *>(b->data) + p * P : nullptr;
        g.P = P;
        g.cin = cin;
        g.k = K;
        g.ldx = ldx;
        g.dstep = d * ldx;
        g.ldr = res ? res->nb[1] / sizeof(float) : 0;
        g.ldy = dst->nb[1] / sizeof(float);
        for (int64_t t = t0; t < t1; t += 12) {
            g.x = static_cast<const float *>(xp->data) + t * ldx;
            g.res = res ? static_cast<const float *>(res->data) + t * g.ldr + p * P : nullptr;
            g.y = static_cast<float *>(dst->data) + t * g.ldy + p * P;
            const int64_t mt = std::min<int64_t>(12, t1 - t);
            if (two) tile_rows_avx512<2>(g, ps, cs, mt);
            else tile_rows_avx512<1>(g, ps, cs, mt);
        }
    }
}
#endif

void conv_gemm_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *xp = dst->src[0], *w = dst->src[1], *b = dst->src[2], *res = dst->src[3];
    const int64_t P = w->ne[0], cin = w->ne[1], K = w->ne[2], panels = w->ne[3], n = dst->ne[1];
    const int64_t d = K > 1 ? (xp->ne[1] - n) / (K - 1) : 0, ldx = xp->nb[1] / sizeof(float);
#ifdef QTTS_X86
    if (P == 16 && has_avx512()) return conv_gemm_avx512(dst, ith, nth);
#endif
    const int64_t chunks = (n + kRowsPerItem - 1) / kRowsPerItem, items = panels * chunks;
    // contiguous item ranges keep a thread on one panel, whose weights then stay in its L2
    for (int64_t it = items * ith / nth; it < items * (ith + 1) / nth; ++it) {
        const int64_t p = it / chunks, t0 = (it % chunks) * kRowsPerItem, t1 = std::min(n, t0 + kRowsPerItem);
        Gemm g;
        g.w = static_cast<const float *>(w->data) + p * K * cin * P;
        g.b = b ? static_cast<const float *>(b->data) + p * P : nullptr;
        g.P = P;
        g.cin = cin;
        g.k = K;
        g.ldx = ldx;
        g.dstep = d * ldx;
        g.ldr = res ? res->nb[1] / sizeof(float) : 0;
        g.ldy = dst->nb[1] / sizeof(float);
        for (int64_t t = t0; t < t1; t += 6) {
            g.x = static_cast<const float *>(xp->data) + t * ldx;
            g.res = res ? static_cast<const float *>(res->data) + t * g.ldr + p * P : nullptr;
            g.y = static_cast<float *>(dst->data) + t * g.ldy + p * P;
            tile(g, std::min<int64_t>(6, t1 - t));
        }
    }
}

bool rows_contiguous(const ggml_tensor * t) { return t->type == GGML_TYPE_F32 && t->nb[0] == sizeof(float); }

}  // namespace

ggml_tensor * snake_beta(ggml_context * ctx, ggml_tensor * x, ggml_tensor * exp_alpha, ggml_tensor * inv_beta,
                         ggml_tensor * left) {
    const int64_t C = x->ne[0], P = left ? left->ne[1] : 0;
    if (!rows_contiguous(x) || exp_alpha->ne[0] != C || inv_beta->ne[0] != C || (left && left->ne[0] != C) ||
        !ggml_is_contiguous(exp_alpha) || !ggml_is_contiguous(inv_beta) || (left && !rows_contiguous(left))) {
        fail("snake_beta: inconsistent operands");
    }
    ggml_tensor * args[4] = {x, exp_alpha, inv_beta, left};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, C, P + x->ne[1], 1, 1, args, left ? 4 : 3, snake_op,
                          GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor * conv_gemm(ggml_context * ctx, ggml_tensor * xp, ggml_tensor * w, int64_t n, ggml_tensor * b,
                        ggml_tensor * res) {
    const int64_t N = w->ne[0] * w->ne[3], K = w->ne[2], pad = xp->ne[1] - n;
    if (!rows_contiguous(xp) || !ggml_is_contiguous(w) || w->type != GGML_TYPE_F32 || xp->ne[0] != w->ne[1] ||
        n < 1 || pad < 0 || (K == 1 ? pad != 0 : pad % (K - 1) != 0) || (b && (b->ne[0] != N || !ggml_is_contiguous(b))) ||
        (res && (res->ne[0] != N || res->ne[1] != n || !rows_contiguous(res)))) {
        fail("conv_gemm: inconsistent operands");
    }
    // a missing bias keeps its slot so that a residual is always src[3]
    ggml_tensor * args[4] = {xp, w, b, res};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, N, n, 1, 1, args, res ? 4 : (b ? 3 : 2), conv_gemm_op,
                          GGML_N_TASKS_MAX, nullptr);
}

}  // namespace qtts
