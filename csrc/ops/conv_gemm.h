// Conv-GEMM, the custom CPU op behind every convolution and codec linear (docs/kernels.md,
// "Custom CPU ops"): ggml's mul_mat computes one dot product per output, several times slower on
// these shapes than a register-tiled GEMM over weights packed in panels.
#pragma once

#include <cstdint>

#include "ggml.h"

namespace qtts {

// A causal 1-D convolution as one GEMM over panel-packed weights, n outputs [N, n]:
//   y[o, t] = sum_{k, c} W[k, c, o] * xp[c, t + k*d]  (+ b[o]) (+ res[o, t])
// w: [P, Cin, K, N/P], panels of P = kPanelWidth (ops/layout.h) output channels, or one panel
// of P = N (docs/model.md, "Weights in GGUF"); xp: [Cin, (K-1)*d + n], its first (K-1)*d rows
// being the left context, d inferred from xp's length. xp's rows may overlap (a strided conv
// reads overlapping windows as K = 1 over Cin*k channels).
//
// Determinism: y[o, t] is one fixed chain of float operations (the sum over k, then c, in
// order, then + b, then + res) whose rounding depends only on the SIMD path in effect
// (ops/simd.h) and on o's lane position within its panel, never on t, on the time range of the
// call or on the thread count. So decoding a stream piece by piece is bit-identical to decoding
// it in one graph. The avx2 and avx512 paths give bit-identical results (the same fused
// multiply-adds lane by lane). The scalar path, and on every path the lanes of a panel beyond
// its last whole vector (8 lanes on x86, 4 on neon), run plain C++ (on x86 a separate multiply
// and add): they agree with the vector lanes to float rounding only.
//
// Segmented (`segments` set: I32 [S], the segments' output row counts, summing to n; read when
// the op runs, so a graph input): xp holds S segments one after the other, each its (K-1)*d rows
// of left context followed by the rows its outputs read; y holds the segments' output rows one
// after the other. No output row is computed over a window that spans two segments: several
// streams' convs in one op, each as if alone (docs/serving.md, "Batched vocoder"). Each output
// row is the same chain of float operations as unsegmented.
//
// BF16 weights (w of type BF16, conv_pack_bf16's layout): the products take the weights and xp
// rounded to BF16 (round to nearest even) and sum them in F32, in AMX tiles where the CPU has
// them (docs/kernels.md, "BF16 convs"). Each output element is again one fixed chain of
// operations, whatever its time range or thread: the same split and batch independence as F32.
// Without tiles (or with the SIMD path lowered below amx) plain C++ sums the same rounded
// products in order: equal to the tiles' results to float rounding only.
ggml_tensor * conv_gemm(ggml_context * ctx, ggml_tensor * xp, ggml_tensor * w, int64_t n, ggml_tensor * b,
                        ggml_tensor * res, ggml_tensor * segments = nullptr);

// The BF16 copy of a panel weight: a B tile (16 rows of input-channel pairs x 16 output lanes
// x 2) per panel, tap and 32 input channels, ggml shape [kBf16Block, Cin/32, K, N/16].
constexpr int64_t kBf16Block = 512;

// Whether this CPU computes BF16 convs in tiles: AMX-TILE, AMX-BF16 and AVX-512 BF16, and the
// OS's leave to use the tiles.
bool conv_gemm_has_bf16_tiles();

// Whether `panel` has a BF16 copy: F32 panels of kPanelWidth lanes over a multiple of 32 input
// channels.
bool conv_packs_bf16(const ggml_tensor * panel);

// panel [16, Cin, K, panels] (F32) -> out [kBf16Block, Cin/32, K, panels] (BF16 bits), each
// value rounded to nearest even.
void conv_pack_bf16(const float * panel, int64_t cin, int64_t K, int64_t panels, uint16_t * out);

}  // namespace qtts
