// The x86 kernels of the quantized matmul (ops/qmatmul.h): AVX2 for Q8_0, AVX-512 VNNI for
// every format. Compiled with target attributes and chosen at run time (ops/qmatmul.cpp).
//
// A tile is R weight rows x C activation columns, one float accumulator per (row, column) that
// sees the same operations in the same order whatever R and C: the result for a column does
// not depend on its neighbours (docs/kernels.md, "Quantized matmul").
#include "ops/qmatmul_impl.h"

#ifdef QTTS_QMM_X86

#include <immintrin.h>

#include <algorithm>

#define QTTS_QMM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define QTTS_QMM_VNNI __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace qtts::qmm {

bool cpu_has_vnni() {
    static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                            __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c");
    return has;
}

namespace {

template <typename T> const T * row(const Task & t, int64_t n) { return reinterpret_cast<const T *>(t.w + n * t.wrow); }
const uint8_t * col(const Task & t, int64_t m) { return t.xq + m * t.xcol; }

// Columns [m0, m1) of rows [n, n + R) in tiles of up to CMAX columns.
template <int R, int CMAX, template <int, int> class Tile>
void columns(const Task & t, int64_t n, int64_t m0, int64_t m1) {
    int64_t m = m0;
    for (; m + CMAX <= m1; m += CMAX) Tile<R, CMAX>::run(t, n, m);
    switch (m1 - m) {
        case 7:
            if constexpr (CMAX > 7) Tile<R, 7>::run(t, n, m);
            break;
        case 6:
            if constexpr (CMAX > 6) Tile<R, 6>::run(t, n, m);
            break;
        case 5:
            if constexpr (CMAX > 5) Tile<R, 5>::run(t, n, m);
            break;
        case 4:
            if constexpr (CMAX > 4) Tile<R, 4>::run(t, n, m);
            break;
        case 3:
            if constexpr (CMAX > 3) Tile<R, 3>::run(t, n, m);
            break;
        case 2:
            if constexpr (CMAX > 2) Tile<R, 2>::run(t, n, m);
            break;
        case 1: Tile<R, 1>::run(t, n, m); break;
        default: break;
    }
}

// Software prefetch of the weight stream (docs/kernels.md, "Quantized matmul"): each
// block's bytes are asked for `bytes` ahead of the kernel's reads, spread over the blocks (a
// burst per row or per 16 rows ran slower), so the loads find them in the cache instead of
// waiting on memory while the arithmetic stalls. A prefetch never faults, so running past the
// tensor's end is harmless, and it changes no result.
struct Ahead {
    int bytes;   // 0: no prefetch
    bool to_l1;  // prefetcht0, else prefetcht1 (L2)
};
// The distances are flat from 1.5 to 3 KiB and worse past 4 KiB on the Intel Xeon where they
// paid (1.5x for the K-quants streamed from memory); on Zen 4 the packed Q8_0's prefetch was a
// loss, so it is Intel's only.
constexpr Ahead kKQuantAhead{2048, true};
Ahead packed_q8_ahead() {
    static const Ahead a = [] {
        __builtin_cpu_init();
        return __builtin_cpu_is("intel") ? Ahead{3072, false} : Ahead{0, false};
    }();
    return a;
}

// The cache lines of [p, p + n) `a.bytes` further on.
QTTS_QMM_VNNI inline void prefetch_span(const void * p, int n, Ahead a) {
    if (a.bytes == 0) return;
    const char * c = static_cast<const char *>(p) + a.bytes;
    if (a.to_l1) {
        for (int o = 0; o < n; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
    } else {
        for (int o = 0; o < n; o += 64) _mm_prefetch(c + o, _MM_HINT_T1);
    }
}

template <int RMAX, int CMAX, template <int, int> class Tile>
void tiles(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    int64_t n = n0;
    for (; n + RMAX <= n1; n += RMAX) columns<RMAX, CMAX, Tile>(t, n, m0, m1);
    for (; n < n1; ++n) columns<1, CMAX, Tile>(t, n, m0, m1);
}

QTTS_QMM_AVX2 inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Q8_0, AVX2: |w| (unsigned) times x with w's sign, summed in pairs (vpmaddubsw, no saturation
// as |w| <= 128 and |x| <= 127) and in fours (vpmaddwd), then scaled per block in float.
template <int R, int C> struct Q8Avx2 {
    QTTS_QMM_AVX2 static void run(const Task & t, int64_t n, int64_t m) {
        const int64_t nb = t.K / 32;
        const BlockQ8_0 * w[R];
        const int8_t * xq[C];
        const float * xd[C];
        for (int r = 0; r < R; ++r) w[r] = row<BlockQ8_0>(t, n + r);
        for (int c = 0; c < C; ++c) {
            xq[c] = reinterpret_cast<const int8_t *>(col(t, m + c));
            xd[c] = reinterpret_cast<const float *>(xq[c] + t.K);
        }
        __m256 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
        const __m256i ones = _mm256_set1_epi16(1);
        for (int64_t j = 0; j < nb; ++j) {
            __m256i wv[R], aw[R];
            __m256 sw[R];
            for (int r = 0; r < R; ++r) {
                wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[r][j].qs));
                aw[r] = _mm256_sign_epi8(wv[r], wv[r]);
                sw[r] = _mm256_set1_ps(_cvtsh_ss(w[r][j].d));
            }
            for (int c = 0; c < C; ++c) {
                const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i *>(xq[c] + 32 * j));
                const __m256 dx = _mm256_broadcast_ss(xd[c] + j);
                for (int r = 0; r < R; ++r) {
                    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(x, wv[r])), ones);
                    acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(sw[r], dx), acc[r][c]);
                }
            }
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) t.y[(m + c) * t.ldy + n + r] = hsum8(acc[r][c]);
    }
};

// Q8_0, VNNI, 16 blocks at a time: the weights are transposed in registers so that int32 lane
// i of vpdpbusd sums block i only, and each (row, column) takes one float multiply-add per 16
// blocks, not per block. The weights + 128 (xor 0x80) are unsigned for vpdpbusd, which starts
// from the column's -128 * block sums (qmatmul_impl.h), so the integer sums are exact.

// Index vectors of the 3-stage transpose (load_transposed): block i = (i3 i2 i1 i0) and its
// dword g = (g2 g1 g0) go from vector (i3 i2 i1), lane (i0 g2 g1 g0) to vector g, lane i, one
// bit pair exchanged per stage of two-source permutes.
struct TransposeIndex {
    alignas(64) int32_t a[2][16], b[2][16], c[2][16];
    constexpr TransposeIndex() : a(), b(), c() {
        for (int hi = 0; hi < 2; ++hi) {
            for (int j = 0; j < 16; ++j) {
                const int x3 = j >> 3 & 1, x2 = j >> 2 & 1, x1 = j >> 1 & 1, x0 = j & 1;
                a[hi][j] = x3 << 4 | (x2 * 8 + hi * 4 + x1 * 2 + x0);  // lane (i3 i0 g1 g0)
                b[hi][j] = x2 << 4 | (x3 * 8 + x1 * 4 + hi * 2 + x0);  // lane (i3 i2 i0 g0)
                c[hi][j] = x1 << 4 | (x3 * 8 + x2 * 4 + x0 * 2 + hi);  // lane (i3 i2 i1 i0)
            }
        }
    }
};
constexpr TransposeIndex kTranspose;

// 16 blocks (34 bytes apart) as 8 vectors, vector g holding dword g of each block, + 128; and
// their 16 scales.
QTTS_QMM_VNNI inline void load_transposed(const uint8_t * blocks, __m512i v[8], __m512 & scales) {
    __m512i z[8], a[8], b[8];
    for (int k = 0; k < 8; ++k) {
        const auto * p0 = reinterpret_cast<const __m256i *>(blocks + 34 * (2 * k) + 2);
        const auto * p1 = reinterpret_cast<const __m256i *>(blocks + 34 * (2 * k + 1) + 2);
        z[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(p0)), _mm256_loadu_si256(p1), 1);
    }
    for (int h = 0; h < 2; ++h) {
        const __m512i ia = _mm512_load_si512(kTranspose.a[h]);
        for (int k = 0; k < 4; ++k) a[4 * h + k] = _mm512_permutex2var_epi32(z[k], ia, z[4 + k]);
    }
    for (int h = 0; h < 2; ++h) {
        const __m512i ib = _mm512_load_si512(kTranspose.b[h]);
        for (int g2 = 0; g2 < 2; ++g2)
            for (int i1 = 0; i1 < 2; ++i1)
                b[4 * g2 + 2 * h + i1] = _mm512_permutex2var_epi32(a[4 * g2 + i1], ib, a[4 * g2 + 2 + i1]);
    }
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int h = 0; h < 2; ++h) {
        const __m512i ic = _mm512_load_si512(kTranspose.c[h]);
        for (int k = 0; k < 4; ++k)
            v[2 * k + h] = _mm512_xor_si512(_mm512_permutex2var_epi32(b[2 * k], ic, b[2 * k + 1]), flip);
    }
    // the scales through the integer registers, idle here (a vector gather is far slower)
    uint64_t h[4];
    for (int k = 0; k < 4; ++k) {
        uint64_t v = 0;
        for (int i = 0; i < 4; ++i) {
            uint16_t d;
            __builtin_memcpy(&d, blocks + 34 * (4 * k + i), 2);
            v |= static_cast<uint64_t>(d) << (16 * i);
        }
        h[k] = v;
    }
    scales = _mm512_cvtph_ps(_mm256_set_epi64x(static_cast<long long>(h[3]), static_cast<long long>(h[2]),
                                               static_cast<long long>(h[1]), static_cast<long long>(h[0])));
}

template <int R, int C> struct Q8Vnni {
    QTTS_QMM_VNNI static void run(const Task & t, int64_t n, int64_t m) {
        const int64_t nb = t.K / 32, ng = (nb + 15) / 16;
        const uint8_t * w[R];
        const uint8_t * x[C];
        for (int r = 0; r < R; ++r) w[r] = t.w + (n + r) * t.wrow;
        for (int c = 0; c < C; ++c) x[c] = col(t, m + c);
        __m512 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
        for (int64_t gi = 0; gi < ng; ++gi) {
            __m512i v[R][8];
            __m512 sw[R];
            const int64_t have = nb - 16 * gi;
            for (int r = 0; r < R; ++r) {
                const uint8_t * src = w[r] + 16 * 34 * gi;
                alignas(64) uint8_t part[16 * 34];
                if (have < 16) {  // a last group of fewer blocks: zeros after them, never read past the row
                    __builtin_memset(part, 0, sizeof part);
                    __builtin_memcpy(part, src, static_cast<size_t>(have) * 34);
                    src = part;
                }
                load_transposed(src, v[r], sw[r]);
            }
            for (int c = 0; c < C; ++c) {
                const uint8_t * xg = x[c] + 640 * gi;
                const __m512i bias = _mm512_load_si512(xg + 512);
                const __m512 dx = _mm512_load_ps(xg + 576);
                for (int r = 0; r < R; ++r) {
                    __m512i s = bias;
                    for (int g = 0; g < 8; ++g) s = _mm512_dpbusd_epi32(s, v[r][g], _mm512_load_si512(xg + 64 * g));
                    acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sw[r], dx), acc[r][c]);
                }
            }
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) t.y[(m + c) * t.ldy + n + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
};

// Q8_0 packed (qmatmul_impl.h): the groups already in load_transposed's registers' order, so the
// weights cost 9 loads per 16 blocks instead of a transpose; a last group of fewer blocks is read
// with masks, its missing lanes zero as Q8Vnni's padding makes them. The arithmetic is Q8Vnni's,
// so the results are bit for bit the same. It is a copy of Q8Vnni's loop on purpose: one tile
// template over both layouts (the loads as an inlined policy) ran 6-10% slower with the weights
// in L2 (one thread, M = 1 and 9).
template <int R, int C> struct Q8VnniPacked {
    QTTS_QMM_VNNI static void run(const Task & t, int64_t n, int64_t m) {
        const int64_t nb = t.K / 32, ng = (nb + kPackGroup - 1) / kPackGroup;
        const Ahead ahead = packed_q8_ahead();
        const uint8_t * w[R];
        const uint8_t * x[C];
        for (int r = 0; r < R; ++r) w[r] = t.w + (n + r) * t.wrow;
        for (int c = 0; c < C; ++c) x[c] = col(t, m + c);
        __m512 acc[R][C];
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
        for (int64_t gi = 0; gi < ng; ++gi) {
            const int64_t G = std::min<int64_t>(kPackGroup, nb - kPackGroup * gi);
            __m512i v[R][8];
            __m512 sw[R];
            for (int r = 0; r < R; ++r) {
                const uint8_t * src = w[r] + 34 * kPackGroup * gi;
                prefetch_span(src, 34 * kPackGroup, ahead);
                if (G == kPackGroup) {
                    for (int g = 0; g < 8; ++g) v[r][g] = _mm512_loadu_si512(src + 64 * g);
                    sw[r] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + 512)));
                } else {
                    const __mmask64 bytes = _cvtu64_mask64((uint64_t{1} << (4 * G)) - 1);
                    for (int g = 0; g < 8; ++g) v[r][g] = _mm512_maskz_loadu_epi8(bytes, src + 4 * G * g);
                    sw[r] =
                        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << G) - 1), src + 32 * G));
                }
            }
            for (int c = 0; c < C; ++c) {
                const uint8_t * xg = x[c] + 640 * gi;
                const __m512i bias = _mm512_load_si512(xg + 512);
                const __m512 dx = _mm512_load_ps(xg + 576);
                for (int r = 0; r < R; ++r) {
                    __m512i s = bias;
                    for (int g = 0; g < 8; ++g) s = _mm512_dpbusd_epi32(s, v[r][g], _mm512_load_si512(xg + 64 * g));
                    acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sw[r], dx), acc[r][c]);
                }
            }
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) t.y[(m + c) * t.ldy + n + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
};

// Q4_K's 8 scales and 8 mins (6 bits each) as two little-endian 8-byte words.
inline void q4_k_unpack(const uint8_t * s, uint64_t & sc, uint64_t & mn) {
    uint32_t u[3];
    __builtin_memcpy(u, s, 12);
    const uint32_t low6 = 0x3f3f3f3fu, nib = 0x0f0f0f0fu, top2 = 0x03030303u;
    const uint32_t sc_hi = (u[2] & nib) | (((u[0] >> 6) & top2) << 4);
    const uint32_t mn_hi = ((u[2] >> 4) & nib) | (((u[1] >> 6) & top2) << 4);
    sc = (u[0] & low6) | static_cast<uint64_t>(sc_hi) << 32;
    mn = (u[1] & low6) | static_cast<uint64_t>(mn_hi) << 32;
}

// Word lane 2i of the result = word i of the input, lane 2i + 1 = word 16 + i: a 64-byte half of
// a Q4_K block's values with its two 32-byte halves interleaved by byte pairs.
struct InterleaveIndex {
    alignas(64) int16_t v[32];
    constexpr InterleaveIndex() : v() {
        for (int i = 0; i < 32; ++i) v[i] = static_cast<int16_t>(16 * (i & 1) + (i >> 1));
    }
};
constexpr InterleaveIndex kInterleave;

// Q4_K, VNNI, one row. Each 64-byte half of the values is interleaved by byte pairs (one vpermw),
// so the low nibbles hold two sub-blocks in alternate word lanes (0 and 2; 1 and 3 in the high
// nibbles; 4 to 7 likewise in the second half), as the columns are laid out (qmatmul_impl.h).
// vpmaddubsw sums value pairs; vpdpwssd weights each word lane by its sub-block's scale, which
// for alternate lanes is one dword (scale a | scale b << 16) broadcast from memory: the scales
// cost scalar masks and no vector shuffles (docs/kernels.md, "Quantized matmul"). The mins meet
// the columns' per-32 sums in a second accumulator.
template <int R, int C> struct Q4kVnni {
    static_assert(R == 1, "one row at a time (rows16)");
    QTTS_QMM_VNNI static void run(const Task & t, int64_t n, int64_t m, __m512 out[C]) {
        const int64_t nb = t.K / 256;
        const BlockQ4_K * w = row<BlockQ4_K>(t, n);
        const int8_t * xq[C];
        const float * xd[C];
        const int16_t * xs[C];
        for (int c = 0; c < C; ++c) {
            xq[c] = reinterpret_cast<const int8_t *>(col(t, m + c));
            xd[c] = reinterpret_cast<const float *>(xq[c] + t.K);
            xs[c] = reinterpret_cast<const int16_t *>(xq[c] + t.K + 4 * nb);
        }
        __m512 acc[C];
        __m128 accm[C];
        for (int c = 0; c < C; ++c) {
            acc[c] = _mm512_setzero_ps();
            accm[c] = _mm_setzero_ps();
        }
        const __m512i pairs = _mm512_load_si512(kInterleave.v);
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        constexpr uint64_t kEven = 0x00FF00FF00FF00FFull;
        for (int64_t j = 0; j < nb; ++j) {
            const BlockQ4_K & b = w[j];
            prefetch_span(&b, sizeof b, kKQuantAhead);
            uint64_t sc8, mn8;
            q4_k_unpack(b.scales, sc8, mn8);
            // dwords: scales (0 2) (4 6) (1 3) (5 7)
            alignas(16) uint64_t sm[2] = {sc8 & kEven, (sc8 >> 8) & kEven};
            __asm__("" : "+m"(sm));  // broadcast from memory (a load) rather than from a register (a shuffle)
            const auto * s32 = reinterpret_cast<const int32_t *>(sm);
            const __m512i v0 = _mm512_permutexvar_epi16(pairs, _mm512_loadu_si512(b.qs));
            const __m512i v1 = _mm512_permutexvar_epi16(pairs, _mm512_loadu_si512(b.qs + 64));
            const __m512i q[4] = {_mm512_and_si512(v0, low4), _mm512_and_si512(_mm512_srli_epi16(v0, 4), low4),
                                  _mm512_and_si512(v1, low4), _mm512_and_si512(_mm512_srli_epi16(v1, 4), low4)};
            static constexpr int kScale[4] = {0, 2, 1, 3};  // q[k]'s dword in sm
            uint32_t dd;
            __builtin_memcpy(&dd, &b.d, 4);  // d, dmin
            const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd)));
            const __m128i mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mn8)));
            for (int c = 0; c < C; ++c) {
                const int8_t * x = xq[c] + 256 * j;
                __m512i sum = _mm512_setzero_si512();
                for (int k = 0; k < 4; ++k) {
                    const __m512i p = _mm512_maddubs_epi16(q[k], _mm512_load_si512(x + 64 * k));
                    sum = _mm512_dpwssd_epi32(sum, p, _mm512_set1_epi32(s32[kScale[k]]));
                }
                alignas(16) float dmx[4];  // d * dx, dmin * dx, broadcast from memory likewise
                _mm_store_ps(dmx, _mm_mul_ps(dm, _mm_set1_ps(xd[c][j])));
                __asm__("" : "+m"(dmx));
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(dmx[0]), acc[c]);
                const __m128i mm =
                    _mm_madd_epi16(mins, _mm_loadu_si128(reinterpret_cast<const __m128i *>(xs[c] + 16 * j)));
                accm[c] = _mm_fmadd_ps(_mm_cvtepi32_ps(mm), _mm_set1_ps(dmx[1]), accm[c]);
            }
        }
        for (int c = 0; c < C; ++c) out[c] = _mm512_sub_ps(acc[c], _mm512_zextps128_ps512(accm[c]));
    }
};

// Q6_K, VNNI, one row: the 6-bit values unsigned (q + 32) for vpmaddubsw, weighted with the
// 16 sub-block scales by vpdpwssd, minus 32 * scale * the columns' per-16 sums.
template <int R, int C> struct Q6kVnni {
    static_assert(R == 1, "one row at a time (rows16)");
    QTTS_QMM_VNNI static void run(const Task & t, int64_t n, int64_t m, __m512 out[C]) {
        const int64_t nb = t.K / 256;
        const BlockQ6_K * w = row<BlockQ6_K>(t, n);
        const int8_t * xq[C];
        const float * xd[C];
        const int16_t * xs[C];
        for (int c = 0; c < C; ++c) {
            xq[c] = reinterpret_cast<const int8_t *>(col(t, m + c));
            xd[c] = reinterpret_cast<const float *>(xq[c] + t.K);
            xs[c] = reinterpret_cast<const int16_t *>(xq[c] + t.K + 4 * nb);
        }
        __m512 acc[C];
        for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
        // vector k covers values 64k..64k+63: sub-blocks 4k..4k+3, 8 int16 lanes each
        __m512i idx[4];
        for (int k = 0; k < 4; ++k) {
            alignas(64) int16_t v[32];
            for (int l = 0; l < 32; ++l) v[l] = static_cast<int16_t>(4 * k + l / 8);
            idx[k] = _mm512_load_si512(v);
        }
        const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
        // high bits: values 0-31 take qh bits 0-1, 32-63 bits 2-3, 64-95 bits 4-5, 96-127 bits 6-7
        const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
        const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
        const __m256i minus32 = _mm256_set1_epi16(-32);
        for (int64_t j = 0; j < nb; ++j) {
            const BlockQ6_K & b = w[j];
            prefetch_span(&b, sizeof b, kKQuantAhead);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b.scales)));
            const __m512i sc = _mm512_castsi256_si512(sc16);
            const __m512i corr = _mm512_zextsi256_si512(_mm256_mullo_epi16(sc16, minus32));
            __m512i q[4], s[4];
            for (int h = 0; h < 2; ++h) {
                const __m512i ql = _mm512_loadu_si512(b.ql + 64 * h);
                const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qh + 32 * h));
                const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
                q[2 * h] =
                    _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_sllv_epi16(qh2, shl), bits45));
                q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                               _mm512_and_si512(_mm512_srlv_epi16(qh2, shr), bits45));
            }
            for (int k = 0; k < 4; ++k) s[k] = _mm512_permutexvar_epi16(idx[k], sc);
            const float d = _cvtsh_ss(b.d);
            for (int c = 0; c < C; ++c) {
                const int8_t * x = xq[c] + 256 * j;
                const __m512i sums =
                    _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(xs[c] + 16 * j)));
                __m512i sum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), corr, sums);
                for (int k = 0; k < 4; ++k) {
                    const __m512i p = _mm512_maddubs_epi16(q[k], _mm512_load_si512(x + 64 * k));
                    sum = _mm512_dpwssd_epi32(sum, p, s[k]);
                }
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(d * xd[c][j]), acc[c]);
            }
        }
        for (int c = 0; c < C; ++c) out[c] = acc[c];
    }
};

// Lane r of the result = the sum of v[r]'s 16 lanes, by the same tree for every r (so a row's
// result does not depend on the rows beside it): two vectors' halves, then quarters, then lane
// pairs combined per step, and one permute back to row order. 46 instructions for 16 rows, where
// a reduction per row took about 10 and ended each row on a dependency chain.
QTTS_QMM_VNNI inline __m512 sum16(const __m512 v[16]) {
    __m512 a[8], b[4], c[2];
    for (int k = 0; k < 8; ++k) {
        a[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));  // rows 2k, 2k+1: 8 lanes each
    }
    for (int k = 0; k < 4; ++k) {
        b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xDD));  // rows 4k..4k+3: a quarter each
    }
    for (int k = 0; k < 2; ++k) {
        c[k] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * k], b[2 * k + 1], 0x88),
                             _mm512_shuffle_ps(b[2 * k], b[2 * k + 1], 0xDD));
    }
    const __m512 d = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
    // lane 4q + s now holds row q + 4s
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(order, d);
}

// Up to 16 rows from n by columns [m, m + C) of one-row tiles, their accumulators summed together.
template <int C, template <int, int> class Tile>
QTTS_QMM_VNNI void rows_of_16(const Task & t, int64_t n, int rows, int64_t m) {
    alignas(64) __m512 acc[C][16];
    for (int r = 0; r < 16; ++r) {
        __m512 out[C];
        if (r < rows) {
            Tile<1, C>::run(t, n + r, m, out);
        } else {
            for (int c = 0; c < C; ++c) out[c] = _mm512_setzero_ps();
        }
        for (int c = 0; c < C; ++c) acc[c][r] = out[c];
    }
    const __mmask16 keep = static_cast<__mmask16>((1u << rows) - 1);
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(t.y + (m + c) * t.ldy + n, keep, sum16(acc[c]));
}

// Rows [n0, n1) x columns [m0, m1): per 16 rows, column tiles of up to CMAX (the rows stay in L1).
template <int CMAX, template <int, int> class Tile>
void rows16(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    for (int64_t n = n0; n < n1; n += 16) {
        const int rows = static_cast<int>(std::min<int64_t>(16, n1 - n));
        int64_t m = m0;
        for (; m + CMAX <= m1; m += CMAX) rows_of_16<CMAX, Tile>(t, n, rows, m);
        switch (m1 - m) {
            case 7:
                if constexpr (CMAX > 7) rows_of_16<7, Tile>(t, n, rows, m);
                break;
            case 6:
                if constexpr (CMAX > 6) rows_of_16<6, Tile>(t, n, rows, m);
                break;
            case 5:
                if constexpr (CMAX > 5) rows_of_16<5, Tile>(t, n, rows, m);
                break;
            case 4:
                if constexpr (CMAX > 4) rows_of_16<4, Tile>(t, n, rows, m);
                break;
            case 3:
                if constexpr (CMAX > 3) rows_of_16<3, Tile>(t, n, rows, m);
                break;
            case 2:
                if constexpr (CMAX > 2) rows_of_16<2, Tile>(t, n, rows, m);
                break;
            case 1: rows_of_16<1, Tile>(t, n, rows, m); break;
            default: break;
        }
    }
}

}  // namespace

QTTS_QMM_VNNI void pack_q8_0_groups(uint8_t * row, int64_t groups) {
    for (int64_t gi = 0; gi < groups; ++gi) {
        uint8_t * g = row + 34 * kPackGroup * gi;
        __m512i v[8];
        __m512 unused;
        load_transposed(g, v, unused);
        uint16_t d[kPackGroup];
        for (int64_t b = 0; b < kPackGroup; ++b) __builtin_memcpy(d + b, g + 34 * b, 2);
        for (int k = 0; k < 8; ++k) _mm512_storeu_si512(g + 64 * k, v[k]);
        __builtin_memcpy(g + 512, d, sizeof d);
    }
}

QTTS_QMM_VNNI float quantize_block_avx512(const float * x, int n, int8_t * q, int32_t * sums16) {
    __m512 amax = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    const float d = _mm512_reduce_max_ps(amax) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id), round = _mm512_set1_ps(12582912.0f);
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    for (int i = 0; i < n; i += 16) {
        // (x * id + 1.5 * 2^23) - 1.5 * 2^23 as in quantize_block: no fused multiply-add
        const __m512 v = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vid), round), round);
        const __m512i iv = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(q + i), _mm512_cvtsepi32_epi8(iv));
        if (sums16) sums16[i / 16] = _mm512_reduce_add_epi32(iv);
    }
    return d;
}

void q8_0_avx2(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    tiles<2, 2, Q8Avx2>(t, n0, n1, m0, m1);
}
void q8_0_vnni(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    tiles<1, 8, Q8Vnni>(t, n0, n1, m0, m1);
}
void q8_0_packed_vnni(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    tiles<1, 8, Q8VnniPacked>(t, n0, n1, m0, m1);
}
void q4_k_vnni(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    rows16<4, Q4kVnni>(t, n0, n1, m0, m1);
}
void q6_k_vnni(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    rows16<4, Q6kVnni>(t, n0, n1, m0, m1);
}

}  // namespace qtts::qmm

#endif  // QTTS_QMM_X86
