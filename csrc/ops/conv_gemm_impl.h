// The conv-GEMM's internals (ops/conv_gemm.h), shared by its F32 code (ops/conv_gemm.cpp), its
// BF16 tile kernels (ops/conv_gemm_bf16.cpp) and the NEON kernels (ops/ops_neon.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "ggml.h"

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

// Output rows [y0, y0 + n) whose windows start at xp row x0: a work item's rows.
struct ConvSpan {
    int64_t y0, x0, n;
};

// The op's output rows as spans of at most `rows_per_item`, never across two segments.
// Unsegmented, output row t reads xp rows from t on; segmented (src[4], the segments' row
// counts), segment i's rows read from past the left contexts of segments 0..i. Row counts are
// clamped to the output so that no span leaves the tensors. Valid until the thread's next call.
const std::vector<ConvSpan> & conv_spans(const ggml_tensor * dst, int64_t rows_per_item);

// The dilation: xp holds (K-1)*d context rows per segment (one segment unless src[4] is set).
int64_t conv_dilation(const ggml_tensor * dst);

// The op over BF16 weights (ops/conv_gemm_bf16.cpp): AMX tiles where the path allows, else
// plain C++ with the same roundings of the operands.
void conv_gemm_bf16_op(ggml_tensor * dst, int ith, int nth);

}  // namespace qtts
