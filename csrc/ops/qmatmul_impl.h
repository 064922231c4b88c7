// Internals of the quantized matmul (ops/qmatmul.h) shared by its plain C++ part and the x86
// kernels: the weight block formats ggml stores, the quantized-column layouts, kernel signatures.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qtts::qmm {

// ggml's block formats (docs/model.md, "Weights in GGUF"); scales are IEEE halves.
struct BlockQ8_0 {  // 32 values: d * qs[i]
    uint16_t d;
    int8_t qs[32];
};
struct BlockQ4_K {  // 256 values in 8 sub-blocks of 32: d * sc[j] * q - dmin * m[j]
    uint16_t d, dmin;
    uint8_t scales[12];  // 6-bit sc[8] and m[8], packed
    uint8_t qs[128];     // 64-value groups: low nibbles = sub-block 2g, high = 2g+1
};
struct BlockQ6_K {  // 256 values in 16 sub-blocks of 16: d * sc[j] * (q - 32), q 6-bit
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210, "ggml blocks");

enum class Format { q8_0, q4_k, q6_k };
// amx: the packed K-quants' kernels (ops/qmatmul_amx.cpp), with or without the tiles
enum class Kernel { scalar, avx2, vnni, amx, neon };

// Packed Q8_0 weights (qmatmul_pack): per row, each group of G = 16 blocks (a last one of fewer)
// in the same 34 G bytes as ggml's blocks, as the VNNI kernel uses them: 8 x 4G bytes, part v
// holding bytes 4v..4v+3 of each block's values xor 0x80 (block i at 4i..4i+3), then the G half
// scales.
constexpr int64_t kPackGroup = 16;  // blocks

// Packed Q4_K and Q6_K weights (qmatmul_pack, x86 with AMX): per 16 rows (a whole number of them),
// per block index b, the 16 rows' blocks b transposed by dwords: the dword at byte o of row r's
// block at 16 o + 4 r (Q6_K's last 2 bytes, d, at 16 * 208 + 2 r). Same size as ggml's rows.
constexpr int64_t kPackRows = 16;

// Quantized activation columns, one per column of x, each starting on a 64-byte line:
//   Q8_0, scalar/avx2/neon: int8 q[K], float d[K/32]
//   Q8_0, vnni: per group of 16 blocks (a last group padded with zero blocks) 640 bytes: 8 x 64
//     q bytes, vector g holding bytes 4g..4g+3 of each block (the weights' transposed order),
//     16 int32 (-128 * each block's sum of q, where vpdpbusd over weights + 128 starts) and the
//     16 block scales
//   K-quants: int8 q[K], float d[K/256], int16 sums[K/256][16]: per 32 values (Q4_K, 8 used)
//     or per 16 (Q6_K); the amx kernels read a sub-block's q as one tile row. The vnni Q4_K
//     kernel reads q in the order of its nibble unpacking: per
//     256-block four 64-byte vectors pairing sub-blocks (0 2) (1 3) (4 6) (5 7), bytes 4i, 4i+1
//     values 2i, 2i+1 of the first and bytes 4i+2, 4i+3 those of the second.
size_t column_bytes(Format f, Kernel k, int64_t K);
void quantize_column(Format f, Kernel k, const float * x, int64_t K, uint8_t * out);

struct Task {
    const uint8_t * w;  // weight row 0
    size_t wrow;        // bytes per weight row
    int64_t K;
    const uint8_t * xq;  // quantized column 0
    size_t xcol;         // bytes per quantized column
    float * y;           // y[n, m] at y[m * ldy + n]
    int64_t ldy;
};

// Rows [n0, n1) x columns [m0, m1) of y.
using KernelFn = void (*)(const Task & t, int64_t n0, int64_t n1, int64_t m0, int64_t m1);

void q8_0_scalar(const Task &, int64_t, int64_t, int64_t, int64_t);
void q8_0_packed_scalar(const Task &, int64_t, int64_t, int64_t, int64_t);
void q4_k_scalar(const Task &, int64_t, int64_t, int64_t, int64_t);
void q6_k_scalar(const Task &, int64_t, int64_t, int64_t, int64_t);
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define QTTS_QMM_X86 1
bool cpu_has_vnni();  // AVX-512 F, VL, BW, DQ and VNNI
void q8_0_avx2(const Task &, int64_t, int64_t, int64_t, int64_t);
void q8_0_vnni(const Task &, int64_t, int64_t, int64_t, int64_t);
void q8_0_packed_vnni(const Task &, int64_t, int64_t, int64_t, int64_t);
// The first `groups` whole groups of a Q8_0 row into the packed layout, in place (AVX-512).
void pack_q8_0_groups(uint8_t * row, int64_t groups);
void q4_k_vnni(const Task &, int64_t, int64_t, int64_t, int64_t);
void q6_k_vnni(const Task &, int64_t, int64_t, int64_t, int64_t);
// AMX (ops/qmatmul_amx.cpp): AMX-TILE and AMX-INT8 on top of cpu_has_vnni(), and the OS's
// permission for the tile state (asked for once, by the first call).
bool cpu_has_amx();
// Packed K-quants, rows in whole blocks of 16: the dot products by tiles from 4 columns on
// (amx), by vpdpbusd below that and on the avx512 path (vnni); the same results bit for bit.
void q4_k_packed_amx(const Task &, int64_t, int64_t, int64_t, int64_t);
void q6_k_packed_amx(const Task &, int64_t, int64_t, int64_t, int64_t);
void q4_k_packed_vnni(const Task &, int64_t, int64_t, int64_t, int64_t);
void q6_k_packed_vnni(const Task &, int64_t, int64_t, int64_t, int64_t);
// quantize_column's block rounding (n = 32 or 256 values) with AVX-512, the same operations lane
// by lane as the plain C++ (bit-identical); sums16, when given, gets the n / 16 sums of 16 values.
float quantize_block_avx512(const float * x, int n, int8_t * q, int32_t * sums16);
#endif
#if defined(__aarch64__) || defined(_M_ARM64)
#define QTTS_QMM_ARM 1
// Q8_0 on NEON (ops/qmatmul_arm.cpp): with the dot-product extension where the CPU has it.
KernelFn q8_0_neon_kernel();
#endif

// A half's bits as a float (scalar code; the x86 kernels convert with F16C).
float half_to_float(uint16_t h);

// Q4_K's 6-bit scale and min of sub-block j (0..7) from the packed 12 bytes.
inline void q4_k_scale_min(const uint8_t * s, int j, uint8_t & sc, uint8_t & m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

}  // namespace qtts::qmm
