// The portable counterparts of the custom CPU ops: the same functions built from stock ggml ops
// only, which every ggml backend implements (docs/kernels.md, "Portable graphs"). They take
// conv weights in the portable layout that runtime/conv_weights.h makes at load from the panels.
#pragma once

#include "ggml.h"

namespace qtts {

// conv_gemm's result over portable weights w [g*Cin, N, K/g] (ops/conv_gemm.h, g = 1), or a
// stride-g conv of kernel K: xp [Cin, R] is read as [g*Cin, R/g] (g consecutive rows per row),
// then K/g taps of dilation d = (rows - n) / (taps - 1). One mul_mat per tap, summed in tap
// order, then + b, then + res.
ggml_tensor * stock_conv(ggml_context * ctx, ggml_tensor * xp, ggml_tensor * w, int64_t n, ggml_tensor * b,
                         ggml_tensor * res);

// snake_beta's result ([C, P + n]: left, then x + inv_beta * sin^2(x * exp_alpha)).
ggml_tensor * stock_snake(ggml_context * ctx, ggml_tensor * x, ggml_tensor * exp_alpha, ggml_tensor * inv_beta,
                          ggml_tensor * left);

// elu_left's result ([C, P + n + pad]: left, ELU(x), pad zero rows).
ggml_tensor * stock_elu(ggml_context * ctx, ggml_tensor * x, ggml_tensor * left, int64_t pad);

// time_stats's result ([C, 2]: per channel mean and sqrt(max(var, 1e-12)) over time, uniform or
// weighted by the softmax over time of logits [C, T]), in float on transposed copies.
ggml_tensor * stock_time_stats(ggml_context * ctx, ggml_tensor * x, ggml_tensor * logits);

}  // namespace qtts
