// The aarch64 NEON kernels of the custom ops (ops/ops_neon.cpp), taken when simd_path() is neon
// (docs/kernels.md, "Custom CPU ops", "ARM"). Each does the lanes that fill whole 4-lane
// vectors and returns how many it did; its caller runs the rest through its scalar code, so the
// code an element takes depends only on the path and its lane position, as on x86.
#pragma once

#include <cstdint>

#include "ops/simd.h"

#ifdef QTTS_NEON

#include "ops/conv_gemm_impl.h"

namespace qtts {

// Rows [0, mt) (mt <= 6) of one conv-GEMM panel, output lanes [0, returned): the same chain
// per lane as the x86 kernels (a fused multiply-add per (k, c) in order, then + bias, + residual).
int64_t conv_gemm_tile_neon(const ConvGemmTile & g, int64_t mt);

// y[c] = x[c] + ib[c] * sin^2(x[c] * ea[c]) for c < returned, with the x86 kernels' polynomial.
int64_t snake_row_neon(const float * x, const float * ea, const float * ib, float * y, int64_t n);

// y[c] = ELU(x[c]) for c < returned, with the x86 kernel's expm1 polynomial.
int64_t elu_row_neon(const float * x, float * y, int64_t n);

}  // namespace qtts

#endif
