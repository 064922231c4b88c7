#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_set>
#include <utility>

#include "runtime/error.h"

namespace qtts {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int32_t argmax(const std::vector<float> & x) {
    return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
}

void top_k_filter(std::vector<float> & x, int k) {
    if (k <= 0 || static_cast<size_t>(k) >= x.size()) return;
    std::vector<float> sorted(x);
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
    const float kth = sorted[k - 1];
    for (float & v : x) {
        if (v < kth) v = kNegInf;
    }
}

// HF TopPLogitsWarper: drop the lowest-probability tokens whose cumulative mass (ascending)
// stays within 1 - top_p, always keeping the most likely one.
void top_p_filter(std::vector<float> & x, float top_p) {
    if (top_p >= 1.0f) return;
    std::vector<int> idx(x.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return x[a] < x[b]; });
    const float mx = x[idx.back()];
    double total = 0.0;
    for (float v : x) total += std::exp(static_cast<double>(v) - mx);
    double cum = 0.0;
    for (size_t i = 0; i + 1 < idx.size(); ++i) {
        cum += std::exp(static_cast<double>(x[idx[i]]) - mx) / total;
        if (cum > 1.0 - top_p) break;
        x[idx[i]] = kNegInf;
    }
}

}  // namespace

void talker_logits_processors(std::vector<float> & logits, const std::vector<int32_t> & history, float penalty, int eos,
                              int min_new, int suppress_begin) {
    if (penalty != 1.0f) {
        std::unordered_set<int32_t> seen;
        for (int32_t t : history) {
            if (t < 0 || static_cast<size_t>(t) >= logits.size() || !seen.insert(t).second) continue;
            float & s = logits[t];
            s = s > 0 ? s / penalty : s * penalty;
        }
    }
    if (static_cast<int>(history.size()) < min_new) logits[eos] = kNegInf;
    for (size_t i = std::max(suppress_begin, 0); i < logits.size(); ++i) {
        if (static_cast<int>(i) != eos) logits[i] = kNegInf;
    }
}

int32_t select_token(std::vector<float> & logits, const SamplingParams & p, std::mt19937_64 & rng) {
    // Suppressed tokens are -inf; NaN or +inf can only come from corrupt weights or
    // hyper-parameters, and would otherwise pick an arbitrary (even out-of-codebook) token.
    for (float v : logits) {
        if (std::isnan(v) || v == -kNegInf) {
            fail("the network produced non-finite logits: the model's weights or hyper-parameters are corrupt");
        }
    }
    if (!p.do_sample) return argmax(logits);
    if (!(p.temperature > 0.0f)) fail("temperature must be positive when sampling, got %g", p.temperature);
    if (p.temperature != 1.0f) {
        for (float & v : logits) v /= p.temperature;
    }
    top_k_filter(logits, p.top_k);
    top_p_filter(logits, p.top_p);
    const float mx = *std::max_element(logits.begin(), logits.end());
    // the weights of the tokens the filters left (exp(-inf) is 0 and adds nothing to the sums):
    // a batch samples a lane per slot each step on the host, so this skips the exp of the ~98%
    // a top-k of 50 drops
    std::vector<std::pair<int32_t, double>> w;
    w.reserve(logits.size());
    double total = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (logits[i] == kNegInf) continue;
        const double e = std::exp(static_cast<double>(logits[i]) - mx);
        w.emplace_back(static_cast<int32_t>(i), e);
        total += e;
    }
    // 53 random bits: the draw depends only on the seed, not on the standard library.
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
    double acc = 0.0;
    int32_t last = 0;
    for (const auto & [i, e] : w) {
        if (e == 0.0) continue;
        last = i;
        acc += e;
        if (u < acc) return last;
    }
    return last;
}

}  // namespace qtts
