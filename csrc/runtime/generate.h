// Parameters and results of one code generation (docs/model.md, "Generation loop"; adding a
// parameter: docs/architecture.md, "Adding a sampling parameter").
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/sampling.h"

namespace qtts {

// The structs carry no reference values: the qwen-tts defaults (generation_config.json's and
// generate()'s) have one home, python/qtts/runtime/settings/config.py, which fills every field of
// GenerateParams (engine.native_params); a model's own copy is read from its GGUF into
// GenerationDefaults (read_metadata requires every key). The initializers are neutral: no
// sampling, no repetition penalty, no EOS mask, the talker's whole context.
inline constexpr int kMaxNewTokens = 32768;  // the talker's context (max_position_embeddings)

// One generation's settings: the talker samples cb0, the subtalker (the code predictor) cb1..
struct GenerateParams {
    SamplingParams talker, subtalker;
    float repetition_penalty = 1.0f;
    int max_new_tokens = kMaxNewTokens;  // sampled cb0 tokens, EOS included: at most max_new_tokens - 1 frames
    int min_new_tokens = 0;              // EOS is masked until this many cb0 tokens exist
    int frame_budget = 0;                // the runaway guard: at most this many frames; 0: none
    uint64_t seed = 0;
};

// A model's generation_config.json, as the converter stored it in the GGUF.
struct GenerationDefaults {
    SamplingParams talker, subtalker;
    float repetition_penalty = 1.0f;
    int max_new_tokens = kMaxNewTokens;
};

struct GenerateResult {
    std::vector<int32_t> codes;  // [frames, n_code_groups] row-major
    int frames = 0;
    std::string stop_reason;     // "eos", "max_new_tokens", "budget" or "cancelled"
    bool needs_text = false;     // stopped early, unended, to wait for streamed text (generate_append)
    double prefill_ms = 0.0, talker_ms = 0.0, predictor_ms = 0.0;  // totals over the frames
};

// The talker's output for the last position fed.
struct TalkerOutput {
    std::vector<float> logits;  // [codec vocab]
    std::vector<float> hidden;  // final-normed hidden state [D]
};

// A generation in progress (Session::generate_begin / generate_next).
struct GenerationState {
    GenerateParams p;
    std::mt19937_64 rng;
    std::vector<float> trailing, pad;
    int n_prompt = 0, n_trailing = 0, suppress_begin = 0;
    std::vector<int32_t> history, frame;
    TalkerOutput out;
    bool need_step = false;  // the last emitted frame has not been fed to the talker yet
    // Text streamed in (Session::generate_append): the trailing rows so far are not all of them,
    // and the frame budget is the text's so far: the loop waits where it would need more.
    bool text_open = false;
    int max_fed = 0;         // frames the talker cache may have to hold (the cache grows to it)
    GenerateResult total;    // frames, stop reason and timings so far (codes stay empty)
};

}  // namespace qtts
