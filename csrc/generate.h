// Parameters and results of one code generation (spec §2.6, §4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sampling.h"

namespace qtts {

struct GenerateParams {
    SamplingParams talker, predictor;
    float repetition_penalty = 1.0f;
    int max_new_tokens = 0;  // sampled cb0 tokens, EOS included: at most max_new_tokens - 1 frames
    uint64_t seed = 0;
};

struct GenerateResult {
    std::vector<int32_t> codes;  // [frames, n_code_groups] row-major
    int frames = 0;
    std::string stop_reason;     // "eos" or "max_new_tokens"
    double prefill_ms = 0.0, talker_ms = 0.0, predictor_ms = 0.0;  // totals over the frames
};

// The talker's output for the last position fed.
struct TalkerOutput {
    std::vector<float> logits;  // [codec vocab]
    std::vector<float> hidden;  // final-normed hidden state [D]
};

}  // namespace qtts
