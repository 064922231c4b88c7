// The conv-GEMM over BF16 weights (ops/conv_gemm.h; docs/kernels.md, "BF16 convs"): the
// vocoder's convs at the fast precision. On AMX CPUs a tile multiply (TDPBF16PS) takes
// 16 rows x 32 input channels of xp against 32 channels x 16 outputs of one weight panel, about
// six times the F32 FMA rate per thread, the sums in F32.
//
// Work items are (group of panels, up to kRowsPerItem rows of one segment). A group's BF16
// weights are at most kGroupBytes, so they stay in L2 while a thread walks its rows; each item
// first converts its rows of xp (and the (K-1)*d rows of context they read) to BF16 once, for
// all panels of its group.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/amx.h"
#include "ops/conv_gemm.h"
#include "ops/conv_gemm_impl.h"
#include "ops/layout.h"
#include "ops/simd.h"

#ifdef QTTS_X86
#include <cpuid.h>
#define QTTS_AMX_BF16 __attribute__((target("amx-tile,amx-bf16,avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma")))
#endif

namespace qtts {

namespace {

// Round to nearest even as VCVTNE2PS2BF16 does: denormals become zeros of their sign, NaNs
// stay NaNs.
inline uint16_t to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

inline float from_bf16(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

constexpr int64_t kLanes = kPanelWidth;           // output channels per panel
constexpr int64_t kChannels = kBf16Block / kLanes;  // input channels per tile product (32)
static_assert(kChannels == 32, "a BF16 tile row holds 32 channels");

// Rows [0, n) x the panel's lanes without tiles: the same rounded operands, summed in order (per
// tap, per channel pair), so the results agree with the tiles' to float rounding.
void rows_plain(const float * x, int64_t ldx, const uint16_t * w, int64_t cin, int64_t K, int64_t dstep,
                const float * b, const float * res, int64_t ldr, float * y, int64_t ldy, int64_t n) {
    const int64_t blocks = cin / kChannels;
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t o = 0; o < kLanes; ++o) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) {
                const float * xk = x + i * ldx + k * dstep;
                for (int64_t cb = 0; cb < blocks; ++cb) {
                    const uint16_t * wt = w + (k * blocks + cb) * kBf16Block;
                    for (int64_t r = 0; r < kChannels / 2; ++r) {
                        const float * xc = xk + cb * kChannels + 2 * r;
                        acc += from_bf16(to_bf16(xc[0])) * from_bf16(wt[r * 2 * kLanes + 2 * o]) +
                               from_bf16(to_bf16(xc[1])) * from_bf16(wt[r * 2 * kLanes + 2 * o + 1]);
                    }
                }
            }
            if (b) acc += b[o];
            if (res) acc += res[i * ldr + o];
            y[i * ldy + o] = acc;
        }
    }
}

constexpr int64_t kRowsPerItem = 128;
constexpr int64_t kGroupBytes = 1 << 20;

struct Geometry {
    const ggml_tensor *xp, *w, *b, *res;
    int64_t blocks, cin, K, panels, d, ldx, ldy, ldr, panel_values;
    explicit Geometry(const ggml_tensor * dst)
        : xp(dst->src[0]), w(dst->src[1]), b(dst->src[2]), res(dst->src[3]), blocks(w->ne[1]), cin(blocks * kChannels),
          K(w->ne[2]), panels(w->ne[3]), d(conv_dilation(dst)), ldx(xp->nb[1] / sizeof(float)),
          ldy(dst->nb[1] / sizeof(float)), ldr(res ? res->nb[1] / sizeof(float) : 0),
          panel_values(K * blocks * kBf16Block) {}
    const float * x_at(int64_t row) const { return static_cast<const float *>(xp->data) + row * ldx; }
    const uint16_t * w_at(int64_t p) const { return static_cast<const uint16_t *>(w->data) + p * panel_values; }
    const float * b_at(int64_t p) const { return b ? static_cast<const float *>(b->data) + p * kLanes : nullptr; }
    const float * res_at(int64_t row, int64_t p) const {
        return res ? static_cast<const float *>(res->data) + row * ldr + p * kLanes : nullptr;
    }
};

void op_plain(ggml_tensor * dst, int ith, int nth) {
    const Geometry g(dst);
    const std::vector<ConvSpan> & sp = conv_spans(dst, kRowsPerItem);
    const int64_t chunks = static_cast<int64_t>(sp.size()), items = g.panels * chunks;
    for (int64_t it = items * ith / nth; it < items * (ith + 1) / nth; ++it) {
        const int64_t p = it / chunks;
        const ConvSpan & s = sp[static_cast<size_t>(it % chunks)];
        rows_plain(g.x_at(s.x0), g.ldx, g.w_at(p), g.cin, g.K, g.d * g.ldx, g.b_at(p), g.res_at(s.y0, p), g.ldr,
                   static_cast<float *>(dst->data) + s.y0 * g.ldy + p * kLanes, g.ldy, s.n);
    }
}

#ifdef QTTS_X86
bool has_tiles() {
    static const bool has = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
            !__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            return false;
        }
        if (!(d >> 22 & 1) || !(d >> 24 & 1)) return false;  // AMX-BF16, AMX-TILE
        if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a >> 5 & 1)) return false;  // AVX512-BF16
        return amx_tiles_permitted();
    }();
    return has;
}

// Tiles 0-3: C (rows 0-15 and 16-31 of a 32-row block x two panels), 4-5: A (the two row
// halves), 6-7: B (the two panels); all 16 rows x 64 bytes.
QTTS_AMX_BF16 void configure() {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

// Rows [0, valid) of x as BF16 into a (row stride cin), rows [valid, total) zeros.
QTTS_AMX_BF16 void to_bf16_rows(const float * x, int64_t ldx, int64_t valid, int64_t total, int64_t cin, uint16_t * a) {
    for (int64_t r = 0; r < valid; ++r) {
        const float * xr = x + r * ldx;
        uint16_t * ar = a + r * cin;
        for (int64_t c = 0; c < cin; c += 32) {
            const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + c + 16), _mm512_loadu_ps(xr + c));
            _mm512_storeu_si512(ar + c, reinterpret_cast<__m512i>(v));
        }
    }
    std::memset(a + valid * cin, 0, static_cast<size_t>((total - valid) * cin) * sizeof(uint16_t));
}

// The C tiles of one 32-row block (rows < 16 only unless `lower`; one panel unless `two`) plus
// bias and residual, into y.
QTTS_AMX_BF16 void store_block(const Geometry & g, float * y, int64_t row, int64_t p, int64_t rows, bool two,
                               bool lower) {
    alignas(64) float c[32 * 32];
    _tile_stored(0, c, 128);
    if (two) _tile_stored(1, c + 16, 128);
    if (lower) {
        _tile_stored(2, c + 16 * 32, 128);
        if (two) _tile_stored(3, c + 16 * 32 + 16, 128);
    }
    const float * bp = g.b_at(p);
    for (int64_t i = 0; i < rows; ++i) {
        const float * rp = g.res_at(row + i, p);
        for (int64_t v = 0; v < (two ? 2 : 1); ++v) {
            __m512 r = _mm512_load_ps(c + i * 32 + 16 * v);
            if (bp) r = _mm512_add_ps(r, _mm512_loadu_ps(bp + 16 * v));
            if (rp) r = _mm512_add_ps(r, _mm512_loadu_ps(rp + 16 * v));
            _mm512_storeu_ps(y + (row + i) * g.ldy + (p + v) * kLanes, r);
        }
    }
}

QTTS_AMX_BF16 void op_tiles(ggml_tensor * dst, int ith, int nth) {
    const Geometry g(dst);
    const int64_t per_panel = g.panel_values * static_cast<int64_t>(sizeof(uint16_t));
    int64_t G = std::clamp<int64_t>(kGroupBytes / per_panel, 1, g.panels);
    if (G > 1) G -= G % 2;
    const int64_t groups = (g.panels + G - 1) / G;
    const std::vector<ConvSpan> & sp = conv_spans(dst, kRowsPerItem);
    const int64_t chunks = static_cast<int64_t>(sp.size()), items = groups * chunks;
    const int64_t i0 = items * ith / nth, i1 = items * (ith + 1) / nth;
    if (i0 >= i1) return;
    static thread_local std::vector<uint16_t> abuf;
    float * y = static_cast<float *>(dst->data);
    const int64_t lda = g.cin * static_cast<int64_t>(sizeof(uint16_t)), wstep = g.blocks * kBf16Block;
    const int64_t steps = g.K * g.blocks;
    configure();
    for (int64_t it = i0; it < i1; ++it) {
        const int64_t p0 = it / chunks * G, p1 = std::min(g.panels, p0 + G);
        const ConvSpan & s = sp[static_cast<size_t>(it % chunks)];
        const int64_t ctx = (g.K - 1) * g.d, total = (s.n + 15) / 16 * 16 + ctx;
        abuf.resize(static_cast<size_t>(total * g.cin));
        to_bf16_rows(g.x_at(s.x0), g.ldx, s.n + ctx, total, g.cin, abuf.data());
        for (int64_t p = p0; p < p1; p += 2) {
            const bool two = p + 1 < p1;
            const uint16_t * w0 = g.w_at(p);
            const uint16_t * w1 = w0 + g.panel_values;
            for (int64_t t = 0; t < s.n; t += 32) {
                const bool lower = s.n - t > 16;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                // one loop over the (tap, channel block) steps: the nested loops ran 20% slower
                // on 768-channel convs (docs/kernels.md, "BF16 convs")
                for (int64_t st = 0; st < steps; ++st) {
                    const int64_t k = st / g.blocks, cb = st % g.blocks;
                    const uint16_t * a = abuf.data() + (t + k * g.d) * g.cin + cb * kChannels;
                    const int64_t wo = k * wstep + cb * kBf16Block;
                    _tile_loadd(4, a, lda);
                    _tile_loadd(6, w0 + wo, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    if (two) {
                        _tile_loadd(7, w1 + wo, 64);
                        _tile_dpbf16ps(1, 4, 7);
                    }
                    if (lower) {
                        _tile_loadd(5, a + 16 * g.cin, lda);
                        _tile_dpbf16ps(2, 5, 6);
                        if (two) _tile_dpbf16ps(3, 5, 7);
                    }
                }
                store_block(g, y, s.y0 + t, p, std::min<int64_t>(32, s.n - t), two, lower);
            }
        }
    }
    _tile_release();
}
#endif

}  // namespace

bool conv_gemm_has_bf16_tiles() {
#ifdef QTTS_X86
    return has_tiles();
#else
    return false;
#endif
}

bool conv_packs_bf16(const ggml_tensor * panel) {
    return panel->type == GGML_TYPE_F32 && ggml_is_contiguous(panel) && panel->ne[0] == kPanelWidth &&
           panel->ne[1] % kChannels == 0;
}

void conv_pack_bf16(const float * panel, int64_t cin, int64_t K, int64_t panels, uint16_t * out) {
    const int64_t blocks = cin / kChannels;
    for (int64_t p = 0; p < panels; ++p) {
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t c = 0; c < cin; ++c) {
                const float * src = panel + ((p * K + k) * cin + c) * kLanes;
                uint16_t * tile = out + ((p * K + k) * blocks + c / kChannels) * kBf16Block;
                const int64_t r = c % kChannels / 2, j = c % 2;
                for (int64_t o = 0; o < kLanes; ++o) tile[r * 2 * kLanes + 2 * o + j] = to_bf16(src[o]);
            }
        }
    }
}

void conv_gemm_bf16_op(ggml_tensor * dst, int ith, int nth) {
#ifdef QTTS_X86
    if (x86_has(simd_path(), SimdPath::amx) && has_tiles()) return op_tiles(dst, ith, nth);
#endif
    op_plain(dst, ith, nth);
}

}  // namespace qtts
