// Talker graphs: the Qwen3 decoder over codec-stream embeddings, final norm, codec head.
#pragma once

#include "runtime/transformer.h"
#include "runtime/model.h"

namespace qtts {

// Graph input names, filled by the session after allocation.
inline constexpr const char * kTalkerEmbd = "talker.inp_embd";   // F32 [D, n] (prefill)
inline constexpr const char * kTalkerCodes = "talker.inp_codes"; // I32 [n_code_groups] (step)
inline constexpr const char * kTalkerText = "talker.inp_text";   // F32 [D] (step)
inline constexpr const char * kTalkerPos = "talker.inp_pos";     // I32 [n]
inline constexpr const char * kTalkerHidden = "talker.hidden";   // output: normed last hidden [D]
inline constexpr const char * kTalkerLogits = "talker.logits";   // output: codec logits [vocab]

// Prefill of n prompt embeddings at positions n_past..n_past+n-1, attending to the cache's first
// n_past positions too (one chunk of a chunked prefill). Returns the logits of the last position.
ggml_tensor * build_talker_prefill(ggml_context * ctx, ggml_cgraph * gf, const TalkerWeights & t,
                                   const KvCache & cache, int n_past, int n);

// One decode step at position n_past. The input is C(cb0) + sum_g CPE_{g-1}(cb_g) + the text
// vector, with the predictor's un-projected tables (spec §2.6).
ggml_tensor * build_talker_step(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const KvCache & cache,
                                int n_past);

}  // namespace qtts
