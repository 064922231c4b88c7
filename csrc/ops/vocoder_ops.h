// Custom CPU ops for the codec decoder's vocoder (shared/docs/vocoder-perf-notes.md): ggml's
// sin is scalar libm and its mul_mat does one dot product per output, both several times
// slower than these on this model's shapes. Activations are channel-fastest, ne = [C, T].
//
// Both ops compute each output element with one fixed sequence of float operations that does
// not depend on the time range of the call or on the thread count, so decoding a stream piece
// by piece is bit-identical to decoding it in one graph.
#pragma once

#include "ggml.h"

namespace qtts {

// [C, P + n]: `left` ([C, P], the causal context the next conv reads; null for P = 0) followed
// by SnakeBeta(x) = x + inv_beta * sin^2(x * exp_alpha), x [C, n], parameters [C].
ggml_tensor * snake_beta(ggml_context * ctx, ggml_tensor * x, ggml_tensor * exp_alpha, ggml_tensor * inv_beta,
                         ggml_tensor * left);

// A causal 1-D convolution as one GEMM over panel-packed weights, n outputs [N, n]:
//   y[o, t] = sum_{k, c} W[k, c, o] * xp[c, t + k*d]  (+ b[o]) (+ res[o, t])
// w: [P, Cin, K, N/P] (python/qtts/convert.py documents the panels); xp: [Cin, (K-1)*d + n],
// its first (K-1)*d rows being the left context; d is inferred from xp's length.
ggml_tensor * conv_gemm(ggml_context * ctx, ggml_tensor * xp, ggml_tensor * w, int64_t n, ggml_tensor * b,
                        ggml_tensor * res);

}  // namespace qtts
