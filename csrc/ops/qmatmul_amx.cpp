// The quantized matmul's kernels for packed Q4_K and Q6_K weights (ops/qmatmul.h, docs/kernels.md,
// "AMX tiles"). A packed block of 16 rows holds each row's dwords side by side, so the 16 rows'
// values of a sub-block load as vectors of one dword per row: the B operand of a tile multiply as
// it is. Per sub-block the exact int32 dot products D with each column come from one tile multiply
// (A = the columns' values, read in place, a tile row per column; C = a row per column, the 16
// weight rows as its lanes) from 4 columns on, from vpdpbusd in registers below that; then one
// float step per sub-block applies its scale with the rows as vector lanes (add_term).
//
// Each (row, column) takes the same operations whatever the number of columns, the rows beside it
// or the thread, and either way of computing D, so columns stay independent (docs/kernels.md,
// "Column independence"); the results differ from the VNNI kernels' on unpacked weights by float
// rounding (there the scales are applied in integers per 256 values).
#include "ops/qmatmul_impl.h"

#ifdef QTTS_QMM_X86

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "ops/amx.h"

#define QTTS_QMM_AMX \
    __attribute__((target("amx-tile,amx-int8,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace qtts::qmm {

bool cpu_has_amx() {
    static const bool has = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!cpu_has_vnni() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
        if (!(d >> 24 & 1) || !(d >> 25 & 1)) return false;  // AMX-TILE, AMX-INT8
        return amx_tiles_permitted();
    }();
    return has;
}

namespace {

// Tiles: 0 and 1 = A (columns), 2 and 3 = B (weights), 4 and 5 = C, two of each so that one
// sub-block's multiply overlaps the next one's loads.

// `columns` tile rows of A and C; `k` values per product (A's bytes per row, B's rows x 4).
QTTS_QMM_AMX void configure(int columns, int k) {
    TileConfig cfg;
    for (int t = 0; t < 2; ++t) {
        cfg.rows[t] = static_cast<uint8_t>(columns);
        cfg.colsb[t] = static_cast<uint16_t>(k);
        cfg.rows[2 + t] = static_cast<uint8_t>(k / 4);
        cfg.colsb[2 + t] = 64;
        cfg.rows[4 + t] = static_cast<uint8_t>(columns);
        cfg.colsb[4 + t] = 64;
    }
    _tile_loadconfig(&cfg);
}

// Byte `i` (0-3) of each dword lane, unsigned or sign-extended, as floats.
QTTS_QMM_AMX inline __m512 byte_u(__m512i v, int i) {
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * i), _mm512_set1_epi32(0xFF)));
}
QTTS_QMM_AMX inline __m512 byte_s(__m512i v, int i) {
    return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * i), 24));
}

// One tile product: A = the columns' signed values, B = the rows' values (DP: _tile_dpbsud for
// unsigned ones, _tile_dpbssd for signed), C stored at `c` (a row per column, the 16 weight rows
// as lanes). GCC's tile intrinsics paste the tile numbers into the assembly, so they are
// literals: products alternate between tiles 0, 2, 4 and 1, 3, 5.
#define QTTS_AMX_MULTIPLY(DP, TA, TB, TC, a, lda, b, c) \
    do {                                                \
        _tile_loadd(TA, a, static_cast<long>(lda));     \
        _tile_loadd(TB, b, 64);                         \
        _tile_zero(TC);                                 \
        DP(TC, TA, TB);                                 \
        _tile_stored(TC, c, 64);                        \
    } while (0)

// The packed weights stream in order, a block of 16 rows at a time: each block's bytes are asked
// for twice, spread over the block's work: into L1 one packed Q4_K block (2304 bytes) further on,
// into L2 16 KiB further on. The L1 distance matters at one column (4096 left the talker's
// products 10% slower than the VNNI kernel's, 2304 10% faster); the L2 one hides memory behind
// the tile products from 8 columns on and behind Q6_K's unpacking (docs/kernels.md, "AMX tiles").
constexpr size_t kAheadL1 = 2304, kAheadL2 = 16384;
QTTS_QMM_AMX inline void prefetch_ahead(const uint8_t * unit, size_t from, size_t to) {
    const char * p = reinterpret_cast<const char *>(unit);
    for (size_t o = from; o < to; o += 64) {
        _mm_prefetch(p + kAheadL1 + o, _MM_HINT_T0);
        _mm_prefetch(p + kAheadL2 + o, _MM_HINT_T1);
    }
}

// y for 16 rows from n (`rows` valid) by columns m .. m + C - 1 from the float accumulators.
QTTS_QMM_AMX inline void store(const Task & t, int64_t n, int rows, int64_t m, int C, const __m512 * acc,
                               const __m512 * accm) {
    const __mmask16 keep = static_cast<__mmask16>((1u << rows) - 1);
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(t.y + (m + c) * t.ldy + n, keep, _mm512_sub_ps(acc[c], accm[c]));
}

// vpshufb controls taking each dword's bytes 2p and 2p + 1 to int16 lanes (for vpdpwssd with
// the columns' int16 sums); the byte indices count within 16-byte lanes, 0x80 writes a zero.
struct PairIndex {
    alignas(64) uint8_t v[2][64];
    constexpr PairIndex() : v() {
        for (int p = 0; p < 2; ++p) {
            for (int i = 0; i < 64; ++i) {
                v[p][i] = i % 2 ? 0x80 : static_cast<uint8_t>(i % 16 / 4 * 4 + 2 * p + i % 4 / 2);
            }
        }
    }
};
constexpr PairIndex kPairs;

// The per-unit work (16 rows by one 256-value block): the scales as vectors over the rows, then
// each sub-block's values (unsigned, k / 4 vectors of one dword per row) to a sink that either
// keeps them as B tiles (TileSink) or dots them with the columns at once (DotSink).
struct Unit {
    alignas(64) uint8_t wb[16][4][64];  // B tiles per sub-block of 16 values (Q4_K: two per sub-block)
    alignas(64) int32_t D[16][16][16];  // tile products [sub-block][column][row]
    __m512 sc[16];                      // sub-block scales (Q4_K: 8)
    __m512 d, dmin;                     // Q6_K: dmin unused
    __m512i mins[4];                    // Q4_K: (m 2p, m 2p + 1) as int16 pairs
};

// S += sc (D - corr) for a sub-block's exact integer dot products D: the one float step per
// sub-block, the same whichever way D was computed.
QTTS_QMM_AMX inline __m512 add_term(__m512 S, __m512i D, int corr, __m512 sc) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(D, _mm512_set1_epi32(corr))), sc, S);
}

// Keeps the values as B tiles, minus `Bias` (Q6_K: 32, so that the tiles' products are those of
// the signed values and need no correction; Q4_K: none, no subtraction).
template <int Bias> struct TileSink {
    Unit & u;
    QTTS_QMM_AMX void operator()(int j, int k, const __m512i * v) const {
        auto * dst = reinterpret_cast<__m512i *>(u.wb[j * k / 16]);
        for (int g = 0; g < k / 4; ++g) {
            _mm512_store_si512(dst + g, Bias ? _mm512_sub_epi8(v[g], _mm512_set1_epi8(Bias)) : v[g]);
        }
    }
};

// How a column tile's dot products are computed (run): in registers, by a tile product per
// sub-block, or, for up to 8 columns, per two sub-blocks against a block-diagonal A (`pairs`,
// build_pairs), half as many products of twice the rows (each costs about the same whatever its
// rows: the loads, zeroing and store around it).
struct TileMode {
    bool on = false;
    const uint8_t * pairs = nullptr;
};

// Below this many columns the values are dotted in registers by vpdpbusd; from it on by tiles,
// whose fixed cost per multiply (load, zero, multiply, store) only pays for several columns.
constexpr int kTileColumns = 4;

struct DotSink {
    const int32_t * x[16];  // the columns' values of this block, by dwords
    const int16_t * sums[16];  // Q6_K: the columns' sums per 16 values, else null
    int C;
    const __m512 * sc;
    __m512 S[16];
    QTTS_QMM_AMX void operator()(int j, int k, const __m512i * v) {
        for (int c = 0; c < C; ++c) {
            __m512i D = _mm512_setzero_si512();
            for (int g = 0; g < k / 4; ++g) D = _mm512_dpbusd_epi32(D, v[g], _mm512_set1_epi32(x[c][k / 4 * j + g]));
            S[c] = add_term(S[c], D, sums[c] ? 32 * sums[c][j] : 0, sc[j]);
        }
    }
};

// A packed block of 16 rows (qmatmul_impl.h): the dword at byte o of each row's block as 64
// bytes at 16 o, so a field of 32 (16) bytes per row reads as 8 (4) vectors of one dword per row.
struct Packed {
    const uint8_t * unit;
    QTTS_QMM_AMX void d32(size_t o, __m512i v[8]) const {
        for (int g = 0; g < 8; ++g) v[g] = _mm512_loadu_si512(unit + 16 * o + 64 * g);
    }
    QTTS_QMM_AMX void d16(size_t o, __m512i v[4]) const {
        for (int g = 0; g < 4; ++g) v[g] = _mm512_loadu_si512(unit + 16 * o + 64 * g);
    }
};

// Q4_K: scales, mins, then the values; qs[32p ..]: low nibbles sub-block 2p, high 2p + 1.
template <typename Sink> QTTS_QMM_AMX void unit_q4_k(const Packed & w, Unit & u, Sink & sink) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), low6 = _mm512_set1_epi8(0x3F), low2 = _mm512_set1_epi8(0x03);
    __m512i s[4];  // d | dmin << 16, then the 12 scale bytes
    w.d16(0, s);
    u.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(s[0]));
    u.dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(s[0], 16)));
    const __m512i sc_lo = _mm512_and_si512(s[1], low6), mn_lo = _mm512_and_si512(s[2], low6);
    const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(s[3], low4),
                                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s[1], 6), low2), 4));
    const __m512i mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s[3], 4), low4),
                                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s[2], 6), low2), 4));
    for (int j = 0; j < 4; ++j) {
        u.sc[j] = byte_u(sc_lo, j);
        u.sc[4 + j] = byte_u(sc_hi, j);
    }
    const __m512i pair0 = _mm512_load_si512(kPairs.v[0]), pair1 = _mm512_load_si512(kPairs.v[1]);
    u.mins[0] = _mm512_shuffle_epi8(mn_lo, pair0);
    u.mins[1] = _mm512_shuffle_epi8(mn_lo, pair1);
    u.mins[2] = _mm512_shuffle_epi8(mn_hi, pair0);
    u.mins[3] = _mm512_shuffle_epi8(mn_hi, pair1);
    for (int p = 0; p < 4; ++p) {
        prefetch_ahead(w.unit, 576 * static_cast<size_t>(p), 576 * static_cast<size_t>(p + 1));
        __m512i v[8], lo[8], hi[8];
        w.d32(offsetof(BlockQ4_K, qs) + 32 * static_cast<size_t>(p), v);
        for (int g = 0; g < 8; ++g) {
            lo[g] = _mm512_and_si512(v[g], low4);
            hi[g] = _mm512_and_si512(_mm512_srli_epi16(v[g], 4), low4);
        }
        sink(2 * p, 32, lo);
        sink(2 * p + 1, 32, hi);
    }
}

// Q6_K: scales, then the unsigned 6-bit values (q, not q - 32).
template <typename Sink> QTTS_QMM_AMX void unit_q6_k(const Packed & w, Unit & u, Sink & sink) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    __m512i s[4];
    w.d16(offsetof(BlockQ6_K, scales), s);
    for (int k = 0; k < 16; ++k) u.sc[k] = byte_s(s[k / 4], k % 4);
    u.d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w.unit + 16 * offsetof(BlockQ6_K, d))));
    for (int h = 0; h < 2; ++h) {  // values 128h ..: ql[64h ..], qh[32h ..]
        prefetch_ahead(w.unit, 1680 * static_cast<size_t>(h), 1680 * static_cast<size_t>(h + 1));
        __m512i l0[8], l1[8], hi[8];
        w.d32(64 * static_cast<size_t>(h), l0);
        w.d32(64 * static_cast<size_t>(h) + 32, l1);
        w.d32(offsetof(BlockQ6_K, qh) + 32 * static_cast<size_t>(h), hi);
        // values 128h + 32q + 4g ..: the low nibbles of l0, l1, then their high ones; qh bits 2q,
        // 2q + 1 shifted to bits 4-5 (16-bit shifts: what crosses a byte is masked off)
        for (int q = 0; q < 4; ++q) {
            __m512i v[8];
            for (int g = 0; g < 8; ++g) {
                const __m512i l = q % 2 ? l1[g] : l0[g];
                const __m512i nib = _mm512_and_si512(q < 2 ? l : _mm512_srli_epi16(l, 4), low4);
                const __m512i top = q < 2    ? _mm512_slli_epi16(hi[g], 4 - 2 * q)
                                    : q == 2 ? hi[g]
                                             : _mm512_srli_epi16(hi[g], 2);
                v[g] = _mm512_or_si512(nib, _mm512_and_si512(top, bits45));
            }
            sink(8 * h + 2 * q, 16, v);
            sink(8 * h + 2 * q + 1, 16, v + 4);
        }
    }
}

// The tile products D of `subs` sub-blocks of `k` values, columns m .. m + C - 1 (A = the
// columns' values read in place, a tile row per column, or the block-diagonal pairs: then the
// second sub-block's products are rows C .. 2C - 1 of the first's D).
template <bool Q6> QTTS_QMM_AMX void dots_tiles(const Task & t, int64_t b, int64_t m, int C, const TileMode & mode,
                                                Unit & u) {
    constexpr int subs = Q6 ? 16 : 8, k = Q6 ? 16 : 32;
#define QTTS_AMX_PRODUCTS(TA, TB, TC, a, lda, bt, c)                \
    if constexpr (Q6) {                                             \
        QTTS_AMX_MULTIPLY(_tile_dpbssd, TA, TB, TC, a, lda, bt, c); \
    } else {                                                        \
        QTTS_AMX_MULTIPLY(_tile_dpbsud, TA, TB, TC, a, lda, bt, c); \
    }
    if (mode.pairs) {
        const size_t pair = 4 * static_cast<size_t>(C) * k;
        const uint8_t * a = mode.pairs + static_cast<size_t>(b) * subs / 2 * pair;
        for (int p = 0; p < subs / 2; p += 2) {
            QTTS_AMX_PRODUCTS(0, 2, 4, a + p * pair, 2 * k, u.wb[2 * p * k / 16], u.D[2 * p]);
            QTTS_AMX_PRODUCTS(1, 3, 5, a + (p + 1) * pair, 2 * k, u.wb[(2 * p + 2) * k / 16], u.D[2 * p + 2]);
        }
        return;
    }
    const uint8_t * a = t.xq + m * t.xcol + 256 * b;
    for (int j = 0; j < subs; j += 2) {
        QTTS_AMX_PRODUCTS(0, 2, 4, a + k * j, t.xcol, u.wb[j * k / 16], u.D[j]);
        QTTS_AMX_PRODUCTS(1, 3, 5, a + k * (j + 1), t.xcol, u.wb[(j + 1) * k / 16], u.D[j + 1]);
    }
#undef QTTS_AMX_PRODUCTS
}

// S per column of block b of a packed K-quant (`q6` or Q4_K): by tiles or in registers.
template <bool Q6>
QTTS_QMM_AMX void block_sums(const Task & t, const Packed & w, int64_t b, int64_t m, int C, const TileMode & mode,
                             Unit & u, __m512 * S) {
    const int64_t nb = t.K / 256;
    const int subs = Q6 ? 16 : 8;
    auto sums = [&](int64_t c) {
        return reinterpret_cast<const int16_t *>(t.xq + (m + c) * t.xcol + t.K + 4 * nb) + 16 * b;
    };
    if (mode.on) {
        TileSink<Q6 ? 32 : 0> sink{u};
        if constexpr (Q6)
            unit_q6_k(w, u, sink);
        else
            unit_q4_k(w, u, sink);
        dots_tiles<Q6>(t, b, m, C, mode, u);
        for (int c = 0; c < C; ++c) {
            S[c] = _mm512_setzero_ps();
            for (int j = 0; j < subs; ++j) {
                const int32_t * D = mode.pairs && j % 2 ? u.D[j - 1][C + c] : u.D[j][c];
                S[c] = add_term(S[c], _mm512_load_si512(D), 0, u.sc[j]);
            }
        }
        return;
    }
    DotSink sink;
    sink.C = C;
    sink.sc = u.sc;
    for (int c = 0; c < C; ++c) {
        sink.x[c] = reinterpret_cast<const int32_t *>(t.xq + (m + c) * t.xcol + 256 * b);
        sink.sums[c] = Q6 ? sums(c) : nullptr;
        sink.S[c] = _mm512_setzero_ps();
    }
    if constexpr (Q6)
        unit_q6_k(w, u, sink);
    else
        unit_q4_k(w, u, sink);
    for (int c = 0; c < C; ++c) S[c] = sink.S[c];
}

// Rows n .. n + 15 by columns m .. m + C - 1: per block y += d dx S (S from block_sums: Q4_K
// sum_j sc_j D_j, Q6_K sum_s sc_s (D_s - 32 * the column's sum over sub-block s), add_term in
// order); Q4_K also y -= dmin dx M, M = sum_j m_j * (the column's sum over sub-block j) in integers.
template <bool Q6>
QTTS_QMM_AMX void block_rows(const Task & t, int64_t n, int rows, int64_t m, int C, const TileMode & mode) {
    const int64_t nb = t.K / 256;
    const size_t B = Q6 ? sizeof(BlockQ6_K) : sizeof(BlockQ4_K);
    Unit u;
    alignas(64) __m512 acc[16], accm[16], S[16];
    for (int c = 0; c < C; ++c) acc[c] = accm[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const Packed w{t.w + n * t.wrow + 16 * B * static_cast<size_t>(b)};
        block_sums<Q6>(t, w, b, m, C, mode, u, S);
        for (int c = 0; c < C; ++c) {
            const uint8_t * col = t.xq + (m + c) * t.xcol;
            const __m512 dx = _mm512_set1_ps(reinterpret_cast<const float *>(col + t.K)[b]);
            acc[c] = _mm512_fmadd_ps(S[c], _mm512_mul_ps(u.d, dx), acc[c]);
            if constexpr (!Q6) {
                const auto * sums = reinterpret_cast<const int32_t *>(col + t.K + 4 * nb) + 8 * b;  // int16 pairs
                __m512i M = _mm512_setzero_si512();
                for (int p = 0; p < 4; ++p) M = _mm512_dpwssd_epi32(M, u.mins[p], _mm512_set1_epi32(sums[p]));
                accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(u.dmin, dx), accm[c]);
            }
        }
    }
    store(t, n, rows, m, C, acc, accm);
}

#undef QTTS_AMX_MULTIPLY

using RowsFn = void (*)(const Task &, int64_t, int, int64_t, int, const TileMode &);

// A for two sub-blocks of k values per product, columns m .. m + C - 1 (C <= 8), for every block:
// per (block, pair of sub-blocks) 2C rows of 2k bytes, row c holding column c's values of the
// first sub-block then k zeros, row C + c k zeros then its values of the second.
void build_pairs(const Task & t, int64_t m, int C, int k, std::vector<uint8_t> & out) {
    const int64_t nb = t.K / 256;
    const int half = 256 / k / 2;
    const size_t row = 2 * static_cast<size_t>(k), pair = 2 * static_cast<size_t>(C) * row;
    out.assign(static_cast<size_t>(nb) * half * pair, 0);
    for (int64_t b = 0; b < nb; ++b) {
        for (int p = 0; p < half; ++p) {
            uint8_t * dst = out.data() + (static_cast<size_t>(b) * half + p) * pair;
            for (int c = 0; c < C; ++c) {
                const uint8_t * x = t.xq + (m + c) * t.xcol + 256 * b + 2 * p * k;
                std::memcpy(dst + c * row, x, static_cast<size_t>(k));
                std::memcpy(dst + (C + c) * row + k, x + k, static_cast<size_t>(k));
            }
        }
    }
}

// Rows [n0, n1) (whole blocks of 16) x columns [m0, m1): per 16 columns the way of the dot
// products (TileMode) and its tile configuration, then 16 rows at a time.
QTTS_QMM_AMX void run(RowsFn fn, int k, bool amx, const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    static thread_local std::vector<uint8_t> pairs;
    bool configured = false;
    for (int64_t m = m0; m < m1; m += 16) {
        const int C = static_cast<int>(std::min<int64_t>(16, m1 - m));
        TileMode mode;
        mode.on = amx && C >= kTileColumns;
        if (mode.on && 2 * C <= 16) {
            build_pairs(t, m, C, k, pairs);
            mode.pairs = pairs.data();
            configure(2 * C, 2 * k);
        } else if (mode.on) {
            configure(C, k);
        }
        configured = configured || mode.on;
        for (int64_t n = n0; n < n1; n += 16) fn(t, n, static_cast<int>(std::min<int64_t>(16, n1 - n)), m, C, mode);
    }
    if (configured) _tile_release();
}

}  // namespace

void q4_k_packed_amx(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    run(block_rows<false>, 32, true, t, n0, n1, m0, m1);
}
void q6_k_packed_amx(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    run(block_rows<true>, 16, true, t, n0, n1, m0, m1);
}
void q4_k_packed_vnni(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    run(block_rows<false>, 32, false, t, n0, n1, m0, m1);
}
void q6_k_packed_vnni(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    run(block_rows<true>, 16, false, t, n0, n1, m0, m1);
}

}  // namespace qtts::qmm

#endif  // QTTS_QMM_X86
