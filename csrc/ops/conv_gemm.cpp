#include "ops/conv_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/conv_gemm_impl.h"
#include "ops/layout.h"
#include "ops/neon.h"
#include "ops/simd.h"
#include "runtime/error.h"

namespace qtts {

namespace {

using Gemm = ConvGemmTile;
using Span = ConvSpan;

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
// NV weight loads, MT broadcasts and MT*NV FMAs: 6x16 keeps 12 accumulators and 2 weight
// vectors in the 16 AVX2 registers (docs/kernels.md, "Custom CPU ops").
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
#define QTTS_ROW(i)                                                \
    {                                                              \
        const __m256 xb = _mm256_broadcast_ss(xk + (i) * ldx + c); \
        a##i##0 = _mm256_fmadd_ps(w0, xb, a##i##0);                \
        a##i##1 = _mm256_fmadd_ps(w1, xb, a##i##1);                \
    }
            QTTS_ROW(0)
            QTTS_ROW(1)
            QTTS_ROW(2)
            QTTS_ROW(3)
            QTTS_ROW(4)
            QTTS_ROW(5)
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
        // rows 3j + r at base j + r * row bytes: 4 bases and one stride for the 12 rows, so the
        // loop's pointers fit in the integer registers
        const char * xb0 = reinterpret_cast<const char *>(g.x + k * dstep);
        const char * xb1 = xb0 + 3 * ldx * sizeof(float);
        const char * xb2 = xb0 + 6 * ldx * sizeof(float);
        const char * xb3 = xb0 + 9 * ldx * sizeof(float);
        const int64_t row = ldx * static_cast<int64_t>(sizeof(float));
        for (int64_t c = 0; c < cin; ++c, xb0 += 4, xb1 += 4, xb2 += 4, xb3 += 4) {
            // the next tile's 12 rows, a cache line of each per 16 channels: at the high sample
            // rates the activations outgrow L2 and the broadcasts waited on them (1x1 convs at
            // a third of the FMA rate; docs/kernels.md, "Custom CPU ops")
            if (c % 16 == 0) {
                for (int i = 0; i < MT; ++i) {
                    const char * base = i < 3 ? xb0 : i < 6 ? xb1 : i < 9 ? xb2 : xb3;
                    _mm_prefetch(base + (i % 3 + 12) * row, _MM_HINT_T0);
                }
            }
            const __m512 v0 = _mm512_loadu_ps(w0 + c * cstep);
            const __m512 v1 = NP == 2 ? _mm512_loadu_ps(w1 + c * cstep) : v0;
#define QTTS_ROW(i)                                                                                 \
    if (MT > i) {                                                                                   \
        const char * base = (i) < 3 ? xb0 : (i) < 6 ? xb1 : (i) < 9 ? xb2 : xb3;                    \
        const __m512 xb = _mm512_set1_ps(*reinterpret_cast<const float *>(base + ((i) % 3) * row)); \
        a##i##_0 = _mm512_fmadd_ps(v0, xb, a##i##_0);                                               \
        if (NP == 2) a##i##_1 = _mm512_fmadd_ps(v1, xb, a##i##_1);                                  \
    }
            QTTS_ROW(0)
            QTTS_ROW(1)
            QTTS_ROW(2)
            QTTS_ROW(3)
            QTTS_ROW(4)
            QTTS_ROW(5)
            QTTS_ROW(6)
            QTTS_ROW(7)
            QTTS_ROW(8)
            QTTS_ROW(9)
            QTTS_ROW(10)
            QTTS_ROW(11)
#undef QTTS_ROW
        }
    }
    const __m512 acc[12][2] = {{a0_0, a0_1}, {a1_0, a1_1}, {a2_0, a2_1}, {a3_0, a3_1}, {a4_0, a4_1},   {a5_0, a5_1},
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

// Up to 6 rows of one panel. Which code a lane takes depends only on the path and the panel width.
void tile(const Gemm & g, int64_t mt, [[maybe_unused]] SimdPath path) {
    int64_t o = 0;
#ifdef QTTS_NEON
    if (path == SimdPath::neon) o = conv_gemm_tile_neon(g, mt);
#endif
#ifdef QTTS_X86
    if (x86_has(path, SimdPath::avx2)) {
        for (; o + 16 <= g.P; o += 16) tile_rows_avx2<2>(g, o, mt);
        for (; o + 8 <= g.P; o += 8) tile_rows_avx2<1>(g, o, mt);
    }
#endif
    if (o < g.P) tile_scalar(g, o, g.P - o, mt);
}

constexpr int64_t kRowsPerItem = 48;  // time rows per work item: a multiple of the 6-row tile

}  // namespace

const std::vector<ConvSpan> & conv_spans(const ggml_tensor * dst, int64_t rows_per_item) {
    static thread_local std::vector<ConvSpan> out;
    out.clear();
    const ggml_tensor *xp = dst->src[0], *seg = dst->src[4];
    const int64_t n = dst->ne[1];
    auto add = [&](int64_t y0, int64_t x0, int64_t m) {
        for (int64_t t = 0; t < m; t += rows_per_item) out.push_back({y0 + t, x0 + t, std::min(rows_per_item, m - t)});
    };
    if (!seg) {
        add(0, 0, n);
        return out;
    }
    const int64_t nl = seg->ne[0], pad = (xp->ne[1] - n) / nl;
    const int32_t * rows = static_cast<const int32_t *>(seg->data);
    for (int64_t i = 0, y = 0; i < nl; ++i) {
        const int64_t m = std::clamp<int64_t>(rows[i], 0, n - y);
        add(y, y + i * pad, m);
        y += m;
    }
    return out;
}

int64_t conv_dilation(const ggml_tensor * dst) {
    const ggml_tensor *xp = dst->src[0], *w = dst->src[1], *seg = dst->src[4];
    const int64_t K = w->ne[2], nl = seg ? seg->ne[0] : 1;
    return K > 1 ? (xp->ne[1] - dst->ne[1]) / nl / (K - 1) : 0;
}

namespace {

#ifdef QTTS_X86
constexpr int64_t kLineFloats = 16;  // floats per 64-byte cache line
static_assert(kPanelWidth == 16, "the AVX-512 kernels hold one panel row in one __m512");

// kPanelWidth-lane panels on the avx512 path: work items are (pair of panels, time chunk). The weight
// panels start 32 bytes off a cache line, which would make every 64-byte load a line split, so a
// thread that does several chunks of one pair first copies the pair to an aligned buffer,
// interleaved as [K][Cin][2][16] (values unchanged, so the results are too).
float * aligned(float * p) {
    return p + (kLineFloats - reinterpret_cast<uintptr_t>(p) / sizeof(float) % kLineFloats) % kLineFloats;
}

void conv_gemm_avx512(ggml_tensor * dst, int ith, int nth) {
    const ggml_tensor *xp = dst->src[0], *w = dst->src[1], *b = dst->src[2], *res = dst->src[3];
    const int64_t P = kPanelWidth, cin = w->ne[1], K = w->ne[2], panels = w->ne[3];
    const int64_t d = conv_dilation(dst), ldx = xp->nb[1] / sizeof(float);
    const int64_t pairs = (panels + 1) / 2, pstride = K * cin * P;
    const std::vector<Span> & sp = conv_spans(dst, kRowsPerItem);
    const int64_t chunks = static_cast<int64_t>(sp.size()), items = pairs * chunks;
    static thread_local std::vector<float> buf;
    int64_t packed = -1;  // the pair now in buf
    const int64_t i0 = items * ith / nth, i1 = items * (ith + 1) / nth;
    for (int64_t it = i0; it < i1; ++it) {
        const int64_t q = it / chunks, p = 2 * q;
        const Span & s = sp[static_cast<size_t>(it % chunks)];
        const bool two = p + 1 < panels;
        const float * wp = static_cast<const float *>(w->data) + p * pstride;
        Gemm g;
        g.w = wp;
        int64_t ps = pstride, cs = P;
        // items of this pair left to this thread
        const int64_t mine = std::min(i1, (q + 1) * chunks) - it;
        if (reinterpret_cast<uintptr_t>(wp) % (kLineFloats * sizeof(float)) != 0 && (packed == q || mine >= 2)) {
            const int64_t np = two ? 2 : 1, rows = K * cin;
            if (packed != q) {
                buf.resize(rows * np * P + kLineFloats);
                float * dstw = aligned(buf.data());
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t v = 0; v < np; ++v)
                        std::memcpy(dstw + (r * np + v) * P, wp + v * pstride + r * P, P * sizeof(float));
                packed = q;
            }
            g.w = aligned(buf.data());
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
        for (int64_t t = 0; t < s.n; t += 12) {
            g.x = static_cast<const float *>(xp->data) + (s.x0 + t) * ldx;
            g.res = res ? static_cast<const float *>(res->data) + (s.y0 + t) * g.ldr + p * P : nullptr;
            g.y = static_cast<float *>(dst->data) + (s.y0 + t) * g.ldy + p * P;
            const int64_t mt = std::min<int64_t>(12, s.n - t);
            if (two)
                tile_rows_avx512<2>(g, ps, cs, mt);
            else
                tile_rows_avx512<1>(g, ps, cs, mt);
        }
    }
}
#endif

void conv_gemm_op(ggml_tensor * dst, int ith, int nth, void *) {
    if (dst->src[1]->type == GGML_TYPE_BF16) return conv_gemm_bf16_op(dst, ith, nth);
    const ggml_tensor *xp = dst->src[0], *w = dst->src[1], *b = dst->src[2], *res = dst->src[3];
    const int64_t P = w->ne[0], cin = w->ne[1], K = w->ne[2], panels = w->ne[3];
    const int64_t d = conv_dilation(dst), ldx = xp->nb[1] / sizeof(float);
    const SimdPath path = simd_path();
#ifdef QTTS_X86
    if (P == kPanelWidth && x86_has(path, SimdPath::avx512)) return conv_gemm_avx512(dst, ith, nth);
#endif
    const std::vector<Span> & sp = conv_spans(dst, kRowsPerItem);
    const int64_t chunks = static_cast<int64_t>(sp.size()), items = panels * chunks;
    // contiguous item ranges keep a thread on one panel, whose weights then stay in its L2
    for (int64_t it = items * ith / nth; it < items * (ith + 1) / nth; ++it) {
        const int64_t p = it / chunks;
        const Span & s = sp[static_cast<size_t>(it % chunks)];
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
        for (int64_t t = 0; t < s.n; t += 6) {
            g.x = static_cast<const float *>(xp->data) + (s.x0 + t) * ldx;
            g.res = res ? static_cast<const float *>(res->data) + (s.y0 + t) * g.ldr + p * P : nullptr;
            g.y = static_cast<float *>(dst->data) + (s.y0 + t) * g.ldy + p * P;
            tile(g, std::min<int64_t>(6, s.n - t), path);
        }
    }
}

}  // namespace

ggml_tensor * conv_gemm(ggml_context * ctx, ggml_tensor * xp, ggml_tensor * w, int64_t n, ggml_tensor * b,
                        ggml_tensor * res, ggml_tensor * segments) {
    const bool bf16 = w->type == GGML_TYPE_BF16;  // conv_pack_bf16's layout
    const int64_t N = (bf16 ? kPanelWidth : w->ne[0]) * w->ne[3], K = w->ne[2], pad = xp->ne[1] - n;
    const int64_t cin = bf16 ? w->ne[1] * (kBf16Block / kPanelWidth) : w->ne[1];
    if (segments && (segments->type != GGML_TYPE_I32 || ggml_n_dims(segments) != 1 || !ggml_is_contiguous(segments) ||
                     n < segments->ne[0])) {
        fail("conv_gemm: segments must be a 1-D I32 tensor of at most n row counts");
    }
    const int64_t nl = segments ? segments->ne[0] : 1, per = pad / nl;  // context rows per segment
    if (!rows_contiguous(xp) || !ggml_is_contiguous(w) || (w->type != GGML_TYPE_F32 && !bf16) ||
        (bf16 && w->ne[0] != kBf16Block) || xp->ne[0] != cin || n < 1 || pad < 0 || pad % nl != 0 ||
        (K == 1 ? per != 0 : per % (K - 1) != 0) || (b && (b->ne[0] != N || !ggml_is_contiguous(b))) ||
        (res && (res->ne[0] != N || res->ne[1] != n || !rows_contiguous(res)))) {
        fail("conv_gemm: inconsistent operands");
    }
    // a missing bias or residual keeps its slot so that a residual is always src[3], the
    // segments src[4]
    ggml_tensor * args[5] = {xp, w, b, res, segments};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, N, n, 1, 1, args, segments ? 5 : (res ? 4 : (b ? 3 : 2)), conv_gemm_op,
                          GGML_N_TASKS_MAX, nullptr);
}

}  // namespace qtts
