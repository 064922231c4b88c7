// Quantized matmul, the custom CPU op behind matmul() for host weights stored as Q8_0, Q4_K or
// Q6_K (docs/kernels.md, "Custom CPU ops", "Quantized matmul"): ggml's mul_mat reads the
// weights once per activation column and its prebuilt dot products stay well below the memory
// bandwidth; this op reads each weight block once for a whole tile of columns.
#pragma once

#include "ggml.h"

namespace qtts {

// Whether qmatmul() has a kernel for weights of `type` (Q8_0, Q4_K, Q6_K).
bool qmatmul_supports(ggml_type type);

// Whether the SIMD path in effect (ops/simd.h) has vector kernels for `type`: where it has not,
// matmul() keeps ggml's mul_mat, faster than the plain C++ kernels.
bool qmatmul_vectorized(ggml_type type);

// y [N, M] = W x for W [K, N] of a supported type (contiguous rows) and F32 activations x [K, M]
// (contiguous rows, any row stride); one custom node, rows split over the threads.
//
// Each column of x is quantized on its own (Q8_0 weights: 32-value blocks with a float scale;
// K-quants: 256-value blocks with a float scale and per-16/32 sums, both |q| <= 127, rounded to
// nearest even), then dotted with the weight rows in integers, block scales applied in float.
//
// Determinism: y[n, m] is one fixed chain of operations on column m and row n alone, whatever
// M, the other columns, the tile or the thread that computes it: a column's result is bit for
// bit the same alone or in a batch, and for every thread count. It does depend on the kernel
// (scalar, avx2, avx512 with VNNI, the packed K-quants' amx kernels), which agree to float
// rounding of the block sums; the NEON
// Q8_0 kernels (with or without the dot-product extension) give the scalar kernel's result.
ggml_tensor * qmatmul(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x);

// Packed weights, same size as ggml's, rearranged once at load for the kernels; only qmatmul()
// reads them, so matmul() sends them there whatever the matmul path:
// * Q8_0 (docs/kernels.md, "Packed Q8_0"): the VNNI kernel transposed each 16 blocks of a row in
//   registers, most of its work per weight byte; packed, it reads them in that order, with the
//   same results bit for bit.
// * Q4_K and Q6_K on AMX CPUs (docs/kernels.md, "AMX tiles"): 16 rows' blocks side by side, as
//   tile operands; their own kernels (results to float rounding of the unpacked ones').
// Where the SIMD path in effect is lower (tests), packed weights take the plain C++ kernel, with
// its results bit for bit (packed K-quants on avx512: their kernel without tiles, the same bits).
//
// Whether this CPU packs Q8_0 weights: x86 with AVX-512 VNNI.
bool qmatmul_packs_q8_0();
// Whether `w` can be packed: in host memory, contiguous, not packed yet; Q8_0 on such a CPU, or
// Q4_K and Q6_K in whole blocks of 16 rows on one with AMX.
bool qmatmul_packs(const ggml_tensor * w);
// Packs `w` in place (Error where qmatmul_packs is false) and marks it (ggml_tensor::extra).
void qmatmul_pack(ggml_tensor * w);
bool qmatmul_packed(const ggml_tensor * w);

}  // namespace qtts
