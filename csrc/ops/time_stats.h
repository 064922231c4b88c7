// Statistics over time as a custom CPU op for the speaker encoder (docs/kernels.md, "Custom
// CPU ops"): stock ggml needs transposed copies to reduce over time; this is one pass over rows.
#pragma once

#include "ggml.h"

namespace qtts {

// [C, 2]: per channel the mean (row 0) and the standard deviation sqrt(max(var, 1e-12)) (row 1)
// of x [C, T] over time, with uniform weights or with the softmax over time of `logits` [C, T]
// (ECAPA's attentive statistics pooling).
//
// Determinism: plain code, the same on every SIMD path; a channel's sums run over time in order
// in one thread, so results do not depend on the thread count.
ggml_tensor * time_stats(ggml_context * ctx, ggml_tensor * x, ggml_tensor * logits);

}  // namespace qtts
