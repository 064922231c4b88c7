// Parameters and results of one code generation (spec §2.6, §4).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/sampling.h"

namespace qtts {

struct GenerateParams {
    SamplingParams talker, predictor;
    float repetition_penalty = 1.0f;
    int max_new_tokens = 0;  // sampled cb0 tokens, EOS included: at most max_new_tokens - 1 frames
    int max_frames = 0;      // the runaway guard's frame budget; 0: none
    int min_new_tokens = 2;  // EOS is masked until this many cb0 tokens exist (the reference's 2)
    uint64_t seed = 0;
    // Polled once per frame (for Ctrl-C); returning true cancels the generation.
    std::function<bool()> should_stop;
};

struct GenerateResult {
    std::vector<int32_t> codes;  // [frames, n_code_groups] row-major
    int frames = 0;
    std::string stop_reason;     // "eos", "max_new_tokens", "budget" or "cancelled"
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
    GenerateResult total;    // frames, stop reason and timings so far (codes stay empty)
};

}  // namespace qtts
