// The Qwen3 decoder stack shared by the talker and the code predictor: pre-norm layers with
// q/k RMSNorm before NeoX RoPE, grouped-query attention over a KV cache, SwiGLU MLP.
#pragma once

#include <vector>

#include "ggml-backend.h"
#include "runtime/model.h"

namespace qtts {

// Per-layer K and V, each [head_dim, n_head_kv, n_ctx] F32 in one backend buffer.
class KvCache {
public:
    KvCache() = default;
    ~KvCache();
    KvCache(const KvCache &) = delete;
    KvCache & operator=(const KvCache &) = delete;

    // (Re)allocate for n_ctx positions unless the current buffer already fits exactly that shape.
    void reserve(ggml_backend_t backend, const TransformerHParams & hp, int n_ctx);
    int n_ctx() const { return n_ctx_; }
    size_t bytes() const { return buf_ ? ggml_backend_buffer_get_size(buf_) : 0; }
    // Free the buffer; the next reserve allocates anew.
    void release();

    std::vector<ggml_tensor *> k, v;

private:
    ggml_context * ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
    int n_ctx_ = 0, n_layer_ = 0, width_ = 0;
};

// Run `x` [n_embd, n] through every layer, writing the new keys/values at positions
// n_past..n_past+n-1 of `cache` (the writes are expanded into `gf` before they are read).
// `pos` is I32 [n]. Returns the hidden state before the final norm.
ggml_tensor * decoder_stack(ggml_context * ctx, ggml_cgraph * gf, ggml_tensor * x, ggml_tensor * pos,
                            const TransformerHParams & hp, const std::vector<LayerWeights> & layers,
                            const KvCache & cache, int n_past, const char * prefix);

// RMSNorm over ne0 followed by the weight, as the reference (F32 throughout here).
ggml_tensor * rms_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, float eps);

}  // namespace qtts
