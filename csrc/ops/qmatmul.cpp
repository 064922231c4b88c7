#include "ops/qmatmul.h"

#include "ggml-backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/qmatmul_impl.h"
#include "ops/simd.h"
#include "runtime/error.h"

namespace qtts {

namespace qmm {

float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        const float v = static_cast<float>(man) * 5.9604644775390625e-8f;  // subnormal: man * 2^-24
        std::memcpy(&bits, &v, sizeof bits);
        bits |= sign;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

namespace {

constexpr size_t kLine = 64;

size_t round_line(size_t n) { return (n + kLine - 1) / kLine * kLine; }

// n values as q = round-to-nearest-even(x / d), d = max|x| / 127 (0 for an all-zero block).
float quantize_block(const float * x, int n, int8_t * q) {
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    // |x * id| <= 127 (a little more after rounding id): adding and removing 1.5 * 2^23 rounds
    // to the nearest integer, ties to even, as nearbyint does, in a loop the compiler vectorizes
    constexpr float kRound = 12582912.0f;
    for (int i = 0; i < n; ++i) {
        const float v = (x[i] * id + kRound) - kRound;
        q[i] = static_cast<int8_t>(v >= 127.0f ? 127.0f : (v >= -127.0f ? v : -127.0f));
    }
    return d;
}

int block_sum(const int8_t * q, int n) {
    int s = 0;
    for (int i = 0; i < n; ++i) s += q[i];
    return s;
}

}  // namespace

size_t column_bytes(Format f, Kernel k, int64_t K) {
    if (f == Format::q8_0) {
        const int64_t nb = K / 32;
        return k == Kernel::vnni ? static_cast<size_t>((nb + 15) / 16) * 640 : round_line(K + 4 * nb);
    }
    return round_line(K + 36 * (K / 256));
}

// One block's rounding (quantize_block) and, when sums16 is given, its sums of 16 values: with
// AVX-512 next to the VNNI kernels, which every thread runs once per matmul call.
float quantize_sums(Kernel k, const float * x, int n, int8_t * q, int32_t * sums16) {
#ifdef QTTS_QMM_X86
    if (k == Kernel::vnni || k == Kernel::amx) return quantize_block_avx512(x, n, q, sums16);
#else
    (void)k;
#endif
    const float d = quantize_block(x, n, q);
    if (sums16) {
        for (int s = 0; s < n / 16; ++s) sums16[s] = block_sum(q + 16 * s, 16);
    }
    return d;
}

void quantize_column(Format f, Kernel k, const float * x, int64_t K, uint8_t * out) {
    if (f == Format::q8_0) {
        const int64_t nb = K / 32;
        if (k == Kernel::vnni) {
            std::memset(out, 0, column_bytes(f, k, K));
            for (int64_t j = 0; j < nb; ++j) {
                uint8_t * group = out + 640 * (j / 16);
                const int64_t b = j % 16;
                int8_t q[32];
                int32_t s16[2];
                const float d = quantize_sums(k, x + 32 * j, 32, q, s16);
                for (int g = 0; g < 8; ++g) std::memcpy(group + 64 * g + 4 * b, q + 4 * g, 4);
                reinterpret_cast<int32_t *>(group + 512)[b] = -128 * (s16[0] + s16[1]);
                reinterpret_cast<float *>(group + 576)[b] = d;
            }
            return;
        }
        auto * d = reinterpret_cast<float *>(out + K);
        for (int64_t j = 0; j < nb; ++j) {
            d[j] = quantize_sums(k, x + 32 * j, 32, reinterpret_cast<int8_t *>(out + 32 * j), nullptr);
        }
        return;
    }
    const int64_t nb = K / 256;
    auto * d = reinterpret_cast<float *>(out + K);
    auto * sums = reinterpret_cast<int16_t *>(out + K + 4 * nb);
    int8_t q[256];
    int32_t s16[16];
    // The vnni Q4_K kernel's order (qmatmul_impl.h): 64-value vectors pairing sub-blocks (0 2)
    // (1 3) (4 6) (5 7), interleaved by value pairs.
    static constexpr int kPairs[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
    const bool vnni_q4 = f == Format::q4_k && k == Kernel::vnni;
    for (int64_t j = 0; j < nb; ++j) {
        d[j] = quantize_sums(k, x + 256 * j, 256, q, s16);
        // per 32 values for Q4_K (8 used), per 16 for Q6_K
        for (int s = 0; s < 16; ++s) {
            const int v = f == Format::q4_k ? (s < 8 ? s16[2 * s] + s16[2 * s + 1] : 0) : s16[s];
            sums[16 * j + s] = static_cast<int16_t>(v);
        }
        int8_t * dst = reinterpret_cast<int8_t *>(out + 256 * j);
        if (!vnni_q4) {
            std::memcpy(dst, q, 256);
            continue;
        }
        uint16_t pairs[128], order[128];  // value pairs
        std::memcpy(pairs, q, sizeof pairs);
        for (int v = 0; v < 4; ++v) {
            for (int i = 0; i < 16; ++i) {
                for (int h = 0; h < 2; ++h) order[32 * v + 2 * i + h] = pairs[16 * kPairs[v][h] + i];
            }
        }
        std::memcpy(dst, order, sizeof order);
    }
}

// The plain C++ kernels: one (row, column) at a time, integer block sums, float scales.

void q8_0_scalar(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    const int64_t nb = t.K / 32;
    for (int64_t n = n0; n < n1; ++n) {
        const auto * w = reinterpret_cast<const BlockQ8_0 *>(t.w + n * t.wrow);
        for (int64_t m = m0; m < m1; ++m) {
            const auto * q = reinterpret_cast<const int8_t *>(t.xq + m * t.xcol);
            const auto * d = reinterpret_cast<const float *>(q + t.K);
            float acc = 0.0f;
            for (int64_t j = 0; j < nb; ++j) {
                int s = 0;
                for (int i = 0; i < 32; ++i) s += w[j].qs[i] * q[32 * j + i];
                acc += half_to_float(w[j].d) * d[j] * static_cast<float>(s);
            }
            t.y[m * t.ldy + n] = acc;
        }
    }
}

// The packed layout's values read back in block order: q8_0_scalar's operations exactly.
void q8_0_packed_scalar(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    const int64_t nb = t.K / 32;
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t * w = t.w + n * t.wrow;
        for (int64_t m = m0; m < m1; ++m) {
            const auto * q = reinterpret_cast<const int8_t *>(t.xq + m * t.xcol);
            const auto * d = reinterpret_cast<const float *>(q + t.K);
            float acc = 0.0f;
            for (int64_t j = 0; j < nb; ++j) {
                const int64_t j0 = j / kPackGroup * kPackGroup, G = std::min(kPackGroup, nb - j0), b = j - j0;
                const uint8_t * g = w + 34 * j0;
                int s = 0;
                for (int i = 0; i < 32; ++i) {
                    s += static_cast<int8_t>(g[4 * G * (i / 4) + 4 * b + i % 4] ^ 0x80) * q[32 * j + i];
                }
                uint16_t h;
                std::memcpy(&h, g + 32 * G + 2 * b, sizeof h);
                acc += half_to_float(h) * d[j] * static_cast<float>(s);
            }
            t.y[m * t.ldy + n] = acc;
        }
    }
}

void q4_k_scalar(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    const int64_t nb = t.K / 256;
    for (int64_t n = n0; n < n1; ++n) {
        const auto * w = reinterpret_cast<const BlockQ4_K *>(t.w + n * t.wrow);
        for (int64_t m = m0; m < m1; ++m) {
            const auto * q = reinterpret_cast<const int8_t *>(t.xq + m * t.xcol);
            const auto * d = reinterpret_cast<const float *>(q + t.K);
            const auto * sums = reinterpret_cast<const int16_t *>(q + t.K + 4 * nb);
            float acc = 0.0f;
            for (int64_t j = 0; j < nb; ++j) {
                const BlockQ4_K & b = w[j];
                int sumi = 0, summ = 0;
                for (int s = 0; s < 8; ++s) {
                    uint8_t sc, mn;
                    q4_k_scale_min(b.scales, s, sc, mn);
                    const uint8_t * qs = b.qs + 32 * (s / 2);
                    const int8_t * xs = q + 256 * j + 32 * s;
                    int dot = 0;
                    for (int l = 0; l < 32; ++l) dot += ((qs[l] >> (4 * (s % 2))) & 0x0F) * xs[l];
                    sumi += sc * dot;
                    summ += mn * sums[16 * j + s];
                }
                acc += d[j] * (half_to_float(b.d) * static_cast<float>(sumi) -
                               half_to_float(b.dmin) * static_cast<float>(summ));
            }
            t.y[m * t.ldy + n] = acc;
        }
    }
}

void q6_k_scalar(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    const int64_t nb = t.K / 256;
    for (int64_t n = n0; n < n1; ++n) {
        const auto * w = reinterpret_cast<const BlockQ6_K *>(t.w + n * t.wrow);
        for (int64_t m = m0; m < m1; ++m) {
            const auto * q = reinterpret_cast<const int8_t *>(t.xq + m * t.xcol);
            const auto * d = reinterpret_cast<const float *>(q + t.K);
            const auto * sums = reinterpret_cast<const int16_t *>(q + t.K + 4 * nb);
            float acc = 0.0f;
            for (int64_t j = 0; j < nb; ++j) {
                const BlockQ6_K & b = w[j];
                int u[256];  // the unsigned 6-bit values, q + 32
                for (int h = 0; h < 2; ++h) {
                    const uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
                    int * o = u + 128 * h;
                    for (int l = 0; l < 32; ++l) {
                        o[l] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
                        o[l + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
                        o[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                        o[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                    }
                }
                int sumi = 0;
                for (int s = 0; s < 16; ++s) {
                    int dot = 0;
                    for (int l = 0; l < 16; ++l) dot += u[16 * s + l] * q[256 * j + 16 * s + l];
                    sumi += b.scales[s] * (dot - 32 * sums[16 * j + s]);
                }
                acc += half_to_float(b.d) * d[j] * static_cast<float>(sumi);
            }
            t.y[m * t.ldy + n] = acc;
        }
    }
}

namespace {

// Between a row of K-quant blocks (B bytes each, nb of them) and its place r in a packed group
// of 16 (qmatmul_impl.h): the dword at byte o of block b at 16 B b + 16 o + 4 r.
void k_quant_row_packing(uint8_t * group, int r, size_t B, int64_t nb, uint8_t * row, bool pack) {
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t * unit = group + kPackRows * B * static_cast<size_t>(b);
        uint8_t * block = row + B * static_cast<size_t>(b);
        size_t o = 0;
        for (; o + 4 <= B; o += 4) {
            uint8_t * packed = unit + 16 * o + 4 * r;
            std::memcpy(pack ? packed : block + o, pack ? block + o : packed, 4);
        }
        if (o < B) {  // Q6_K's last 2 bytes, d
            uint8_t * packed = unit + 16 * o + 2 * r;
            std::memcpy(pack ? packed : block + o, pack ? block + o : packed, B - o);
        }
    }
}

// Packed K-quants on the plain C++ path: each row unpacked, then the unpacked kernel's operations.
template <typename Block, KernelFn Scalar>
void k_quant_packed_scalar(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1) {
    static thread_local std::vector<uint8_t> row;
    row.resize(t.wrow);
    for (int64_t n = n0; n < n1; ++n) {
        auto * group = const_cast<uint8_t *>(t.w + n / kPackRows * kPackRows * t.wrow);  // read only
        k_quant_row_packing(group, static_cast<int>(n % kPackRows), sizeof(Block), t.K / 256, row.data(), false);
        Task one = t;
        one.w = row.data();
        one.y = t.y + n;
        Scalar(one, 0, 1, m0, m1);
    }
}

}  // namespace

}  // namespace qmm

namespace {

using namespace qmm;

constexpr int64_t kRowUnit = 4;       // rows per thread share: the widest row tile (packed K-quants: 16)
constexpr int64_t kColumnGroup = 32;  // columns per pass over a thread's rows: their quantized
                                      // activations stay in L2 while the weights stream

struct Choice {
    Format format;
    Kernel kernel;
    KernelFn fn;
};

bool format_of(ggml_type type, Format & f) {
    switch (type) {
        case GGML_TYPE_Q8_0: f = Format::q8_0; return true;
        case GGML_TYPE_Q4_K: f = Format::q4_k; return true;
        case GGML_TYPE_Q6_K: f = Format::q6_k; return true;
        default: return false;
    }
}

Choice choose(Format f, [[maybe_unused]] SimdPath path, bool packed = false) {
    static constexpr KernelFn scalar[] = {q8_0_scalar, q4_k_scalar, q6_k_scalar};
    if (packed && f != Format::q8_0) {
        const bool q4 = f == Format::q4_k;
#ifdef QTTS_QMM_X86
        if (path == SimdPath::amx) return {f, Kernel::amx, q4 ? q4_k_packed_amx : q6_k_packed_amx};
        if (x86_has(path, SimdPath::avx512) && cpu_has_vnni())
            return {f, Kernel::amx, q4 ? q4_k_packed_vnni : q6_k_packed_vnni};
#endif
        return {f, Kernel::scalar,
                q4 ? k_quant_packed_scalar<BlockQ4_K, q4_k_scalar> : k_quant_packed_scalar<BlockQ6_K, q6_k_scalar>};
    }
    if (packed) {
#ifdef QTTS_QMM_X86
        if (x86_has(path, SimdPath::avx512) && cpu_has_vnni()) return {f, Kernel::vnni, q8_0_packed_vnni};
#endif
        return {f, Kernel::scalar, q8_0_packed_scalar};
    }
#ifdef QTTS_QMM_X86
    static constexpr KernelFn vnni[] = {q8_0_vnni, q4_k_vnni, q6_k_vnni};
    if (x86_has(path, SimdPath::avx512) && cpu_has_vnni()) return {f, Kernel::vnni, vnni[static_cast<int>(f)]};
    if (x86_has(path, SimdPath::avx2) && f == Format::q8_0) return {f, Kernel::avx2, q8_0_avx2};
#endif
#ifdef QTTS_QMM_ARM
    // K-quants keep ggml's mul_mat on ARM (qmatmul_vectorized is false for them)
    if (path == SimdPath::neon && f == Format::q8_0) return {f, Kernel::neon, q8_0_neon_kernel()};
#endif
    return {f, Kernel::scalar, scalar[static_cast<int>(f)]};
}

uint8_t * line_aligned(std::vector<uint8_t> & buf, size_t bytes) {
    buf.resize(bytes + 64);
    const auto a = reinterpret_cast<uintptr_t>(buf.data());
    return buf.data() + (64 - a % 64) % 64;
}

void qmatmul_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *w = dst->src[0], *x = dst->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    Format f = Format::q8_0;
    format_of(w->type, f);
    const bool packed = qmatmul_packed(w);
    const int64_t unit = packed && f != Format::q8_0 ? kPackRows : kRowUnit, units = (N + unit - 1) / unit;
    const int64_t n0 = std::min(N, units * ith / nth * unit), n1 = std::min(N, units * (ith + 1) / nth * unit);
    if (n0 >= n1) return;
    const Choice c = choose(f, simd_path(), packed);
    // every thread quantizes all columns itself: ggml gives custom ops no barrier, and this is
    // cheap next to the weights it then reads
    const size_t xcol = column_bytes(f, c.kernel, K);
    static thread_local std::vector<uint8_t> scratch;
    uint8_t * xq = line_aligned(scratch, xcol * static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) {
        const auto * col = reinterpret_cast<const float *>(static_cast<const char *>(x->data) + m * x->nb[1]);
        quantize_column(f, c.kernel, col, K, xq + m * xcol);
    }
    const Task t{
        static_cast<const uint8_t *>(w->data),           w->nb[1], K, xq, xcol, static_cast<float *>(dst->data),
        static_cast<int64_t>(dst->nb[1] / sizeof(float))};
    for (int64_t m0 = 0; m0 < M; m0 += kColumnGroup) c.fn(t, n0, n1, m0, std::min(M, m0 + kColumnGroup));
}

// Marks a packed weight (ggml_tensor::extra, which the CPU backend leaves to its owner).
const char kPackedTag = 0;

// One row's groups of blocks into the packed layout (qmatmul_impl.h), in place.
void pack_q8_0_row(uint8_t * row, int64_t K) {
    const int64_t nb = K / 32;
    int64_t j0 = 0;
#ifdef QTTS_QMM_X86
    pack_q8_0_groups(row, nb / kPackGroup);  // the same bytes as below, at memory speed
    j0 = nb / kPackGroup * kPackGroup;
#endif
    uint8_t tmp[34 * kPackGroup];
    for (; j0 < nb; j0 += kPackGroup) {
        const int64_t G = std::min(kPackGroup, nb - j0);
        uint8_t * g = row + 34 * j0;
        std::memcpy(tmp, g, static_cast<size_t>(34 * G));
        for (int64_t b = 0; b < G; ++b) {
            const uint8_t * block = tmp + 34 * b;
            std::memcpy(g + 32 * G + 2 * b, block, 2);
            for (int v = 0; v < 8; ++v) {
                uint32_t u;
                std::memcpy(&u, block + 2 + 4 * v, 4);
                u ^= 0x80808080u;
                std::memcpy(g + 4 * G * v + 4 * b, &u, 4);
            }
        }
    }
}

}  // namespace

bool qmatmul_packed(const ggml_tensor * w) { return w->extra == &kPackedTag; }

bool qmatmul_packs_q8_0() {
#ifdef QTTS_QMM_X86
    return cpu_has_vnni();
#else
    return false;
#endif
}

bool qmatmul_packs(const ggml_tensor * w) {
#ifdef QTTS_QMM_X86
    const bool q8 = w->type == GGML_TYPE_Q8_0 && cpu_has_vnni() && w->ne[0] % 32 == 0;
    const bool kq = (w->type == GGML_TYPE_Q4_K || w->type == GGML_TYPE_Q6_K) && cpu_has_amx() && w->ne[0] % 256 == 0 &&
                    w->ne[1] % kPackRows == 0;
    return (q8 || kq) && w->data && w->buffer && ggml_backend_buffer_is_host(w->buffer) && ggml_is_contiguous(w) &&
           w->ne[2] == 1 && w->ne[3] == 1 && !w->extra;
#else
    (void)w;
    return false;
#endif
}

void qmatmul_pack(ggml_tensor * w) {
    if (!qmatmul_packs(w)) fail("qmatmul_pack: weight '%s' cannot be packed", w->name);
    auto * data = static_cast<uint8_t *>(w->data);
    if (w->type == GGML_TYPE_Q8_0) {
        for (int64_t n = 0; n < w->ne[1]; ++n) pack_q8_0_row(data + n * w->nb[1], w->ne[0]);
    } else {
        const size_t B = w->type == GGML_TYPE_Q6_K ? sizeof(BlockQ6_K) : sizeof(BlockQ4_K), wrow = w->nb[1];
        std::vector<uint8_t> rows(kPackRows * wrow);
        for (int64_t n = 0; n < w->ne[1]; n += kPackRows) {
            uint8_t * group = data + n * wrow;
            std::memcpy(rows.data(), group, rows.size());
            for (int r = 0; r < kPackRows; ++r)
                k_quant_row_packing(group, r, B, w->ne[0] / 256, rows.data() + r * wrow, true);
        }
    }
    w->extra = const_cast<char *>(&kPackedTag);
}

bool qmatmul_supports(ggml_type type) {
    Format f;
    return format_of(type, f);
}

bool qmatmul_vectorized(ggml_type type) {
    Format f;
    return format_of(type, f) && choose(f, simd_path()).kernel != Kernel::scalar;
}

ggml_tensor * qmatmul(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x) {
    Format f;
    if (!format_of(w->type, f))
        fail("qmatmul: weight '%s' is %s, not Q8_0, Q4_K or Q6_K", w->name, ggml_type_name(w->type));
    const int64_t block = f == Format::q8_0 ? 32 : 256;
    if (!ggml_is_contiguous(w) || w->ne[2] != 1 || w->ne[3] != 1 || w->ne[0] % block != 0) {
        fail("qmatmul: weight '%s' must be a contiguous matrix of whole %lld-value blocks per row", w->name,
             static_cast<long long>(block));
    }
    if (x->type != GGML_TYPE_F32 || x->ne[2] != 1 || x->ne[3] != 1 || x->nb[0] != sizeof(float)) {
        fail("qmatmul: activations '%s' must be an F32 matrix with contiguous rows", x->name);
    }
    if (x->ne[0] != w->ne[0] || x->ne[1] < 1) {
        fail("qmatmul: activations '%s' have %lld values per column, weight '%s' rows have %lld", x->name,
             static_cast<long long>(x->ne[0]), w->name, static_cast<long long>(w->ne[0]));
    }
    ggml_tensor * args[2] = {w, x};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], 1, 1, args, 2, qmatmul_op, GGML_N_TASKS_MAX, nullptr);
}

}  // namespace qtts
