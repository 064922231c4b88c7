// The portable counterparts of the custom CPU ops: the same functions built from stock ggml ops
// only, which every ggml backend implements (docs/kernels.md, "Portable graphs"). They take
// conv weights in the portable layout that runtime/conv_weights.h makes at load from the panels.
#pragma once

#include "ggml.h"

namespace qtts {

// The arithmetic of matrix products on devices whose backend may trade precision for speed
// (docs/kernels.md, "Precision"): fast lets ggml pick its kernels (TF32 or BF16 tensor cores
// on CUDA); exact asks for F32 arithmetic wherever ggml offers it. Process-wide, because the
// CUDA backend's cuBLAS switch (NVIDIA_TF32_OVERRIDE) is: the first model loaded on a GPU
// claims it, and a later one asking for the other is refused. The CPU is always exact.
enum class Precision { fast, exact };
Precision device_precision();
// `device`: the ggml device's name (exact on a Vulkan device also densifies strided operands).
void claim_device_precision(Precision p, const char * device);

// a b as ggml_mul_mat, in the claimed precision: where it is exact and `a` is not known to live
// in host memory, the product asks for F32 (ggml_mul_mat_set_prec) and a column count at which
// ggml-cuda would use its tensor-core kernels (2..16 columns) is padded to 17, the first width
// it hands to cuBLAS, whose TF32 is off; the padding is sliced off again. On a Vulkan device
// every product under 17 columns is padded, so that all run ggml-vulkan's tiled kernel.
ggml_tensor * mul_mat(ggml_context * ctx, ggml_tensor * a, ggml_tensor * b);
// The exact form alone, wherever `a` lives (tests run it on the CPU); `every_width` pads every
// product narrower than 17 columns, one column too (what exact does on a Vulkan device).
ggml_tensor * mul_mat_exact(ggml_context * ctx, ggml_tensor * a, ggml_tensor * b, bool every_width);

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
