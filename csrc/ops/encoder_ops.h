// Custom CPU ops for the encoders (codec encoder, speaker encoder), channel-fastest ne = [C, T].
// Stock ggml computes ELU with scalar expm1 and needs transposed copies for statistics over
// time; these do both in one pass over contiguous rows.
#pragma once

#include "ggml.h"

namespace qtts {

// [C, P + n + pad]: `left` ([C, P], a conv's carried context; null for P = 0), then ELU(x)
// (alpha 1) for x [C, n], then `pad` rows of zeros (the reference's extra right padding).
ggml_tensor * elu_left(ggml_context * ctx, ggml_tensor * x, ggml_tensor * left, int64_t pad);

// [C, 2]: per channel the mean (row 0) and the standard deviation sqrt(max(var, 1e-12)) (row 1)
// of x [C, T] over time, with uniform weights or with the softmax over time of `logits` [C, T]
// (ECAPA's attentive statistics pooling).
ggml_tensor * time_stats(ggml_context * ctx, ggml_tensor * x, ggml_tensor * logits);

}  // namespace qtts
