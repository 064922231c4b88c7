// Conv-GEMM, the custom CPU op behind every convolution and codec linear (docs/kernels.md,
// "Custom CPU ops"): ggml's mul_mat computes one dot product per output, several times slower on
// these shapes than a register-tiled GEMM over weights packed in panels.
#pragma once

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
ggml_tensor * conv_gemm(ggml_context * ctx, ggml_tensor * xp, ggml_tensor * w, int64_t n, ggml_tensor * b,
                        ggml_tensor * res, ggml_tensor * segments = nullptr);

}  // namespace qtts
