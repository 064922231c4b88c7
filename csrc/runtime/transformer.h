// The transformer block every network with attention shares: the talker and the code predictor
// (Qwen3: RMSNorm, q/k RMSNorm before NeoX RoPE, grouped-query attention over a KV cache, SwiGLU),
// the vocoder's transformer (no q/k norm, LayerScale, a sliding-window mask over a padded cache)
// and the codec encoder's (LayerNorm with bias, a GELU MLP, LayerScale, full-causal without a
// cache). The weights a layer has are fixed by its LayerStyle; each net declares its style.
#pragma once

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "runtime/graph.h"

namespace qtts {

class ConvWeights;
class GgufFile;

struct TransformerHParams {
    int n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0;
    float eps = 0.0f, rope_base = 0.0f;
};

enum class LayerStyle {
    QWEN3,          // q/k norms, SwiGLU, ggml matmul weights (talker, code predictor)
    VOCODER,        // SwiGLU, LayerScale, conv-GEMM panel weights
    CODEC_ENCODER,  // LayerNorm with bias, GELU MLP, LayerScale, conv-GEMM panel weights
};

struct TransformerLayer {
    ggml_tensor *attn_norm = nullptr, *attn_norm_b = nullptr;  // [n_embd]
    ggml_tensor *wq = nullptr, *wk = nullptr, *wv = nullptr;    // n_embd -> heads * head_dim
    ggml_tensor * wo = nullptr;                                  // n_head * head_dim -> n_embd
    ggml_tensor *q_norm = nullptr, *k_norm = nullptr;           // [head_dim] (QWEN3)
    ggml_tensor *attn_scale = nullptr, *ffn_scale = nullptr;    // [n_embd] LayerScale (codecs)
    ggml_tensor *ffn_norm = nullptr, *ffn_norm_b = nullptr;     // [n_embd]
    ggml_tensor * ffn_gate = nullptr;                            // n_embd -> n_ff (SwiGLU styles)
    ggml_tensor *ffn_up = nullptr, *ffn_down = nullptr;         // n_embd -> n_ff -> n_embd
    // QWEN3, joined at load where the parts have one type and lie end to end in the file (the
    // parts are then rows of these, docs/architecture.md "Fused projections"): one product where
    // there were three (two for the MLP), one q/k norm and one RoPE where there were two.
    ggml_tensor * wqkv = nullptr;         // rows of wq, wk, wv: n_embd -> (n_head + 2 n_head_kv) * head_dim
    ggml_tensor * qk_norm = nullptr;  // [head_dim, n_head + n_head_kv]: q_norm per query head, k_norm per KV head
    ggml_tensor * ffn_gate_up = nullptr;  // rows of ffn_gate, ffn_up: n_embd -> 2 n_ff
};

// The matrices a layer's graph multiplies by: the joined ones where the loader made them.
std::vector<ggml_tensor *> layer_matrices(const TransformerLayer & l);

struct Transformer {
    LayerStyle style = LayerStyle::QWEN3;
    TransformerHParams hp;
    std::vector<TransformerLayer> layers;
};

// The hyper-parameters under a GGUF key prefix ("qwen3-tts.talker" ...), range-checked.
TransformerHParams read_transformer_hparams(const GgufFile & f, const char * prefix, bool has_context);

// hp from `prefix` and the layers of tensor group `net` ("talker" ...) in `style`.
Transformer load_transformer(GgufFile & f, const char * prefix, const char * net, bool has_context, LayerStyle style);

// One layer's cache tensors (F32). For ggml's attention K [head_dim, n_head_kv, n_ctx] and V
// transposed, [n_ctx, head_dim, n_head_kv], so that it multiplies a view of the V window instead
// of a transposed copy made every step; for the fused op (ops/attend.h) both head-major,
// [head_dim, n_ctx, n_head_kv], so that one head's rows are read in order (docs/architecture.md
// "KV cache").
ggml_tensor * new_cache_k(ggml_context * ctx, const TransformerHParams & hp, int64_t n_ctx, bool fused = false);
ggml_tensor * new_cache_v(ggml_context * ctx, const TransformerHParams & hp, int64_t n_ctx, bool fused = false);

// Per-layer K and V (new_cache_k / new_cache_v).
class KvCache {
public:
    // (Re)allocate for n_ctx positions unless the current buffer already has exactly that shape.
    // fused: head-major, attended by the fused op (a host buffer: a CPU backend).
    void reserve(ggml_backend_t backend, const TransformerHParams & hp, int n_ctx, bool fused);
    int n_ctx() const { return n_ctx_; }
    bool fused() const { return fused_; }
    size_t bytes() const { return state_.bytes(); }
    // Changes whenever the tensors are (re)allocated: a graph built over them (a replayed one)
    // is stale once it differs. Never 0 for an allocated cache.
    uint64_t epoch() const { return epoch_; }
    // Free the buffer; the next reserve allocates anew.
    void release();

    std::vector<ggml_tensor *> k, v;

private:
    StateBuffer state_;
    int n_ctx_ = 0, n_layer_ = 0, width_ = 0;
    uint64_t epoch_ = 0;
    bool fused_ = false;
};

// How a graph uses a cache: it writes its n keys/values at positions n_past.. and attends to
// the first n_kv positions (n_past + n, or more when the caller pads and masks them).
// lanes > 1: the graph's positions are `lanes` sequences of n / lanes positions each, stepped in
// lockstep, and the cache holds one sequence every lane_stride positions (the batched talker
// step's slots, the code predictor's batched pass, docs/serving.md "Batching").
// fused: the cache's (KvCache::fused), attended by the fused op (no mask), which reads each
// lane's n_past from the graph's positions when it runs: n_past here only bounds the window
// check, and a graph built over the whole cache (n_past 0, n_kv n_ctx) can be replayed for any
// step (the talker's, runtime/generate.cpp).
// first: the cache position lane 0 starts at (a batch slot's lane of a shared cache, for its
// prefill).
// rows: the new keys and values are written at the cache rows these inputs name (ggml_set_rows),
// filled before each compute, instead of at n_past: with a mask, the window and the ops stay
// the same from step to step whatever each lane's position (docs/architecture.md, "KV cache").
struct KvRows {
    ggml_tensor * k = nullptr;  // I64 [n]: each new key's position in the K cache
    ggml_tensor * v = nullptr;  // I64 [head_dim * n_head_kv * n]: each new value's element in the transposed V cache
};

struct KvWindow {
    const std::vector<ggml_tensor *> *k = nullptr, *v = nullptr;
    int64_t n_past = 0, n_kv = 0;
    int64_t lanes = 1, lane_stride = 0;
    bool fused = false;
    int64_t first = 0;
    const KvRows * rows = nullptr;
};

// Windows of a bucketed step are whole multiples of this many positions (the last one cut to the
// lane), so that a graph's shapes change once every kKvBucket steps, not every step.
inline constexpr int64_t kKvBucket = 256;
// The window of a lane of lane_len positions whose first n_used positions are attended.
int64_t kv_window(int64_t n_used, int64_t lane_len);

// What a bucketed step of one new position per lane fills (KvRows, and the additive mask
// [window, 1, 1, lanes] of StackOptions::mask): lane b, lane_len positions from b * lane_len in a
// cache of n_ctx positions, writes position pos[b] and attends to positions 0..pos[b]; a lane
// with pos[b] < 0 sits the step out: it writes its last position and attends its first.
struct KvStepInputs {
    std::vector<int64_t> k_rows, v_rows;
    std::vector<float> mask;
};
KvStepInputs kv_step_inputs(const TransformerHParams & hp, int64_t n_ctx, int64_t lane_len, int64_t window,
                            const std::vector<int32_t> & pos);
// The graph inputs of a bucketed step (rows and mask, named `<prefix>.kv_rows_k` ...).
struct KvStepGraph {
    KvRows rows;
    ggml_tensor * mask = nullptr;
};
KvStepGraph kv_step_graph(ggml_context * ctx, const TransformerHParams & hp, int64_t lanes, int64_t window,
                          const char * prefix);
void set_kv_step_inputs(ggml_cgraph * gf, const KvStepInputs & in, const char * prefix);

// One of several sequences of their own lengths whose rows follow one another in a graph, each
// over its own cache (the vocoder's lanes, docs/serving.md "Batched vocoder"): every op but the
// attention runs once over all their rows, so a lane adds its cache writes and its attention to
// the graph, not a whole stack.
struct KvSegment {
    KvWindow kv;  // a single lane, not fused
    ggml_tensor * mask = nullptr;  // additive F32 [kv.n_kv, n]
    int64_t n = 0;  // its rows
};

struct StackOptions {
    const char * prefix = "";  // intermediates are named "<prefix>.<layer>.<stage>"
    const KvWindow * kv = nullptr;  // null: attend within the graph's own positions
    ggml_tensor * mask = nullptr;  // additive F32 [n_kv, n] or [n_kv, n / lanes, 1, lanes]; null: causal
    // Instead of kv and mask: the graph's rows are these sequences, in order.
    const std::vector<KvSegment> * segments = nullptr;
    // The codec styles' panel weights: null, the native conv-GEMM (a CPU op); else their
    // portable copies, multiplied with ggml's mul_mat on the model's device (runtime/codec_ops.h).
    const ConvWeights * portable = nullptr;
};

// Run `x` [n_embd, n] through every layer (positions `pos`, I32 [n]); the cache writes are
// expanded into `gf` before they are read. Returns the hidden state before any final norm.
ggml_tensor * transformer_stack(ggml_context * ctx, ggml_cgraph * gf, ggml_tensor * x, ggml_tensor * pos,
                                const Transformer & t, const StackOptions & o);

// RMSNorm over ne0 followed by the weight, as the reference (F32 throughout here).
ggml_tensor * rms_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, float eps);

}  // namespace qtts
