// SnakeBeta, the vocoder's activation, as a custom CPU op (docs/kernels.md, "Custom CPU
// ops"): ggml's sin is scalar libm; this one is a vectorized sin^2 that also writes the left
// context the next causal conv reads.
#pragma once

#include "ggml.h"

namespace qtts {

// [C, P + n]: `left` ([C, P], the causal context the next conv reads; null for P = 0) followed
// by SnakeBeta(x) = x + inv_beta * sin^2(x * exp_alpha), x [C, n], parameters [C].
//
// Determinism: each element is one fixed sequence of float operations chosen by the SIMD path
// in effect (ops/simd.h) and the element's channel position, never by the time range of the
// call or the thread count. The avx2 and avx512 paths are bit-identical (the same operations
// per lane; channels beyond the last whole 8-lane vector take the scalar code on every path);
// the scalar path (on x86 without fused multiply-adds) agrees with them to float rounding only.
// The neon path runs the same per-lane operations on 4-lane vectors (channels beyond the last
// whole one take the scalar code).
ggml_tensor * snake_beta(ggml_context * ctx, ggml_tensor * x, ggml_tensor * exp_alpha, ggml_tensor * inv_beta,
                         ggml_tensor * left);

}  // namespace qtts
