// The conv-GEMM's tile geometry (ops/conv_gemm.h), shared by its portable and x86 code
// (ops/conv_gemm.cpp) and the NEON kernels (ops/ops_neon.cpp).
#pragma once

#include <cstdint>

namespace qtts {

// One conv-GEMM call's geometry. Pointers are at the tile's first output row/channel.
struct ConvGemmTile {
    const float * w;  // panel base: [K][Cin][P]
    const float * x;  // xp row t
    const float * b;  // bias at the first channel, or null
    const float * res;
    float * y;
    int64_t P, cin, k, dstep;  // dstep = d * ldx
    int64_t ldx, ldr, ldy;
};

}  // namespace qtts
