// ELU as a custom CPU op for the codec encoder (docs/kernels.md, "Custom CPU ops"): stock
// ggml computes it with scalar expm1 and needs a concat for the carried context and a pad.
#pragma once

#include "ggml.h"

namespace qtts {

// [C, P + n + pad]: `left` ([C, P], a conv's carried context; null for P = 0), then ELU(x)
// (alpha 1) for x [C, n], then `pad` rows of zeros (the reference's extra right padding).
//
// Determinism: each element depends only on its input and, through the SIMD path in effect
// (ops/simd.h), on its channel position; never on the time range or the thread count. The
// avx2 and avx512 paths share one kernel (bit-identical), the neon path runs its polynomial on
// 4-lane vectors; the scalar path uses libm's expm1, which differs from the vector polynomial
// by float rounding.
ggml_tensor * elu_left(ggml_context * ctx, ggml_tensor * x, ggml_tensor * left, int64_t pad);

}  // namespace qtts
