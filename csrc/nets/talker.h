// The talker: a Qwen3 transformer over the codec stream, with the text embedding and its
// projection MLP, the codec embedding and the codec head (docs/model.md, "Talker").
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/transformer.h"

namespace qtts {

class GgufFile;
struct CodePredictor;

struct Talker {
    Transformer tfm;                  // QWEN3, hp.n_embd = D
    int text_vocab = 0, text_embd = 0, codec_vocab = 0, n_code_groups = 0;
    std::vector<int> mrope_section;   // rotated pairs per (time, height, width); all rotate by time here
    ggml_tensor * text_tok = nullptr;     // [text_embd, text_vocab]
    ggml_tensor * fc1 = nullptr;          // [text_embd, text_embd]
    ggml_tensor * fc1_b = nullptr;        // [text_embd]
    ggml_tensor * fc2 = nullptr;          // [text_embd, D]
    ggml_tensor * fc2_b = nullptr;        // [D]
    ggml_tensor * codec_embd = nullptr;   // [D, codec_vocab]
    ggml_tensor * output_norm = nullptr;  // [D]
    ggml_tensor * codec_head = nullptr;   // [D, codec_vocab]

    int n_embd() const { return tfm.hp.n_embd; }
};

void load_talker(GgufFile & f, Talker & t);

// Graph input names, filled by the session after allocation.
inline constexpr const char * kTalkerEmbd = "talker.inp_embd";   // F32 [D, n] (prefill)
inline constexpr const char * kTalkerCodes = "talker.inp_codes"; // I32 [B, n_code_groups] (step)
inline constexpr const char * kTalkerText = "talker.inp_text";   // F32 [D, B] (step)
inline constexpr const char * kTalkerPos = "talker.inp_pos";     // I32 [n]
inline constexpr const char * kTalkerHidden = "talker.hidden";   // output: normed last hidden [D]
inline constexpr const char * kTalkerLogits = "talker.logits";   // output: codec logits [vocab]
inline constexpr const char * kEmbedIds = "embd_ids";            // I32 [n] (text_embed, codec_embed)
inline constexpr const char * kFrameCodes = "frame_codes";       // I32 [n, groups] group-major (frame_embed)

// Prefill of n prompt embeddings at positions n_past..n_past+n-1, attending to the cache's first
// n_past positions too (one chunk of a chunked prefill); the cache's positions start at `first`
// (a batch slot's lane). Returns the logits of the last position.
ggml_tensor * build_talker_prefill(ggml_context * ctx, ggml_cgraph * gf, const Talker & t, const KvCache & cache,
                                   int n_past, int n, int64_t first = 0);

// One decode step on a fused cache, the position read from kTalkerPos when the graph runs, so
// that the graph can be replayed step after step. The input is C(cb0) + sum_g CPE_{g-1}(cb_g) +
// the text vector, with the code predictor's un-projected tables (docs/model.md, "Talker").
ggml_tensor * build_talker_step(ggml_context * ctx, ggml_cgraph * gf, const Talker & t, const CodePredictor & cp,
                                const KvCache & cache);

// One decode step of `lanes` sequences (runtime/batch.cpp; lanes = 1: Session's step on a cache
// that is not fused): sequence b is lane b of the cache, lane_len positions from b * lane_len;
// its codes are column b of kTalkerCodes ([lanes, groups], group-major), its text vector column b
// of kTalkerText [D, lanes], its position kTalkerPos[b]. The ops do not depend on lanes, and
// their shapes only on lanes and `window` (docs/architecture.md, "KV cache"): a fused cache is
// attended by one fused op over every lane's whole length; any other through a window of
// `window` positions (kv_window) with the rows and mask inputs of kv_step_graph, prefix
// "talker". The outputs are [*, lanes].
ggml_tensor * build_talker_step_lanes(ggml_context * ctx, ggml_cgraph * gf, const Talker & t, const CodePredictor & cp,
                                      const KvCache & cache, int64_t lanes, int64_t lane_len, int64_t window);

// P(ids): the text embedding followed by the projection MLP, [D, n].
ggml_tensor * build_text_embed(ggml_context * ctx, const Talker & t, int64_t n);
// C(ids): rows of the codec embedding, [D, n].
ggml_tensor * build_codec_embed(ggml_context * ctx, const Talker & t, int64_t n);
// F(frame) = C(code_0) + sum_g CPE_{g-1}(code_g) for n frames: how the talker sees a frame of
// codes (an ICL prompt's reference frames), [D, n].
ggml_tensor * build_frame_embed(ggml_context * ctx, const Talker & t, const CodePredictor & cp, int64_t n);

}  // namespace qtts
