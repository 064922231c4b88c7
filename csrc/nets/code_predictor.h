// Code-predictor graphs (spec §3): cb1..cb15 of one frame from the talker's normed hidden state
// and cb0, with a fresh 16-slot KV cache per frame.
#pragma once

#include "runtime/transformer.h"
#include "runtime/model.h"

namespace qtts {

inline constexpr const char * kPredHidden = "pred.inp_hidden";  // F32 [D_talker] (prefill)
inline constexpr const char * kPredCode = "pred.inp_code";      // I32 [1]: cb0 (prefill) or cb_j (step j)
inline constexpr const char * kPredPos = "pred.inp_pos";        // I32 [n]
inline constexpr const char * kPredLogits = "pred.logits";      // output [vocab]

// Step 0 is the 2-position prefill [h, C(cb0)] giving cb1; step j = 1..14 feeds CPE_{j-1}(cb_j)
// at position 1 + j and gives cb_{j+1} through lm_head[j].
ggml_tensor * build_predictor_step(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const KvCache & cache,
                                   int step);

}  // namespace qtts
