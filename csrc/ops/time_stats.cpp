#include "ops/time_stats.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/layout.h"
#include "runtime/error.h"

namespace qtts {

namespace {

constexpr float kStatEps = 1e-12f;  // ECAPA's statistics pooling

// Channels are split between threads; each reads its slice of every row. The sums are in double
// (one pass: variance = E[x^2] - E[x]^2 loses nothing at these magnitudes).
void time_stats_op(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *x = dst->src[0], *lg = dst->src[1];
    const int64_t C = x->ne[0], T = x->ne[1], c0 = C * ith / nth, c1 = C * (ith + 1) / nth, w = c1 - c0;
    if (w <= 0) return;
    auto row = [](const ggml_tensor * t, int64_t r, int64_t c0) {
        return reinterpret_cast<const float *>(static_cast<const char *>(t->data) + r * t->nb[1]) + c0;
    };
    std::vector<double> s0(w, lg ? 0.0 : static_cast<double>(T)), s1(w, 0.0), s2(w, 0.0);
    std::vector<float> mx(w, -INFINITY);
    for (int64_t t = 0; lg && t < T; ++t) {
        const float * l = row(lg, t, c0);
        for (int64_t c = 0; c < w; ++c) mx[c] = std::max(mx[c], l[c]);
    }
    for (int64_t t = 0; t < T; ++t) {
        const float * xr = row(x, t, c0);
        const float * l = lg ? row(lg, t, c0) : nullptr;
        for (int64_t c = 0; c < w; ++c) {
            const double a = l ? std::exp(l[c] - mx[c]) : 1.0, v = xr[c];
            if (l) s0[c] += a;
            s1[c] += a * v;
            s2[c] += a * v * v;
        }
    }
    float * m = static_cast<float *>(dst->data);
    float * sd = reinterpret_cast<float *>(static_cast<char *>(dst->data) + dst->nb[1]);
    for (int64_t c = 0; c < w; ++c) {
        const double mean = s1[c] / s0[c], var = s2[c] / s0[c] - mean * mean;
        m[c0 + c] = static_cast<float>(mean);
        sd[c0 + c] = static_cast<float>(std::sqrt(std::max(var, static_cast<double>(kStatEps))));
    }
}

}  // namespace

ggml_tensor * time_stats(ggml_context * ctx, ggml_tensor * x, ggml_tensor * logits) {
    if (!rows_contiguous(x) || x->ne[1] < 1 ||
        (logits && (!rows_contiguous(logits) || !ggml_are_same_shape(x, logits)))) {
        fail("time_stats: inconsistent operands");
    }
    ggml_tensor * args[2] = {x, logits};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[0], 2, 1, 1, args, logits ? 2 : 1, time_stats_op, GGML_N_TASKS_MAX,
                          nullptr);
}

}  // namespace qtts
