// Cached attention as one CPU op: the new positions' keys and values written into a layer's KV
// cache, then causal softmax attention of their queries over each sequence's window, in place of
// ggml's cache copies, two batched matmuls, the softmax and the output copy (docs/kernels.md,
// "Cached attention").
#pragma once

#include "ggml.h"

namespace qtts {

// q [hd, n_head, n * lanes], k and v [hd, n_head_kv, n * lanes]: the new positions, n per lane,
// lane by lane, at the consecutive positions that pos (I32 [n * lanes]) gives from each lane's
// first, n_past. K and V [hd, n_kv, n_head_kv, lanes] are views of a layer's K and V caches over
// each lane's window (any strides; the models' caches are head-major, so that one head's rows
// are read in order, runtime/transformer.h): the op writes k and v at positions n_past.. and
// query i attends to the first n_past + i + 1. The positions are read when the graph runs, so a
// graph can be computed again for the next step. Query head h reads KV head
// h / (n_head / n_head_kv), as the reference's repeat_kv. A lane whose positions do not fit its
// window (n_past + n > n_kv: the caller checks) is not written and its output is NaN.
// Returns [hd * n_head, n * lanes], heads side by side as the output projection reads them.
// Every SIMD path gives the same bits, for every thread count and whatever the other lanes.
ggml_tensor * attend_cached(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * K,
                            ggml_tensor * V, ggml_tensor * pos);

}  // namespace qtts
