// Token selection, following the reference's Hugging Face logits pipeline (docs/model.md,
// "Sampling and stopping").
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace qtts {

// The talker suppresses this many ids at the top of its codec vocabulary (control tokens), EOS
// excepted.
inline constexpr int kSuppressedIds = 1024;

struct SamplingParams {
    bool do_sample = false;
    float temperature = 1.0f;
    int top_k = 0;       // 0: off
    float top_p = 1.0f;  // 1: off
};

// The talker-only processors, in the reference's order: repetition penalty over the distinct
// previously sampled tokens, EOS masked while fewer than min_new tokens exist, and the ids
// [suppress_begin, logits.size()) suppressed except EOS.
void talker_logits_processors(std::vector<float> & logits, const std::vector<int32_t> & history, float penalty, int eos,
                              int min_new, int suppress_begin);

// argmax (first maximum, as torch) when greedy; otherwise temperature -> top-k (ties with the
// k-th score kept) -> top-p -> softmax -> one multinomial draw from `rng`.
int32_t select_token(std::vector<float> & logits, const SamplingParams & p, std::mt19937_64 & rng);

}  // namespace qtts
