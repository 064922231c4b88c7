#include "ops/stock.h"

#include <cfloat>

#include "ops/layout.h"
#include "runtime/error.h"

namespace qtts {

namespace {

constexpr float kStatEps = 1e-12f;  // as ops/time_stats.cpp

}  // namespace

ggml_tensor * stock_conv(ggml_context * ctx, ggml_tensor * xp, ggml_tensor * w, int64_t n, ggml_tensor * b,
                         ggml_tensor * res) {
    const int64_t cin = xp->ne[0], gc = w->ne[0], N = w->ne[1], taps = w->ne[2];
    if (xp->type != GGML_TYPE_F32 || cin < 1 || gc % cin != 0 || n < 1 || (b && b->ne[0] != N) ||
        (res && (res->ne[0] != N || res->ne[1] != n))) {
        fail("stock_conv: inconsistent operands");
    }
    const int64_t g = gc / cin;
    ggml_tensor * x = xp;
    // mul_mat reads each tap's rows as one dense block
    if (!ggml_is_contiguous(x)) x = ggml_cont(ctx, x);
    if (g > 1) {
        if (x->ne[1] % g != 0) fail("stock_conv: %lld input rows are not a multiple of the stride %lld",
                                    static_cast<long long>(x->ne[1]), static_cast<long long>(g));
        x = ggml_reshape_2d(ctx, x, gc, x->ne[1] / g);
    }
    const int64_t rows = x->ne[1], span = rows - n;
    const int64_t d = taps > 1 ? span / (taps - 1) : 0;
    if (span < 0 || (taps > 1 && (d < 1 || span % (taps - 1) != 0))) fail("stock_conv: inconsistent operands");
    ggml_tensor * y = nullptr;
    for (int64_t j = 0; j < taps; ++j) {
        ggml_tensor * wj = ggml_view_2d(ctx, w, gc, N, w->nb[1], j * w->nb[2]);
        ggml_tensor * xj = ggml_view_2d(ctx, x, gc, n, x->nb[1], j * d * x->nb[1]);
        ggml_tensor * p = ggml_mul_mat(ctx, wj, xj);
        y = y ? ggml_add(ctx, y, p) : p;
    }
    if (b) y = ggml_add(ctx, y, b);
    if (res) y = ggml_add(ctx, y, res);
    return y;
}

ggml_tensor * stock_snake(ggml_context * ctx, ggml_tensor * x, ggml_tensor * exp_alpha, ggml_tensor * inv_beta,
                          ggml_tensor * left) {
    const int64_t C = x->ne[0];
    if (!rows_contiguous(x) || exp_alpha->ne[0] != C || inv_beta->ne[0] != C || (left && left->ne[0] != C)) {
        fail("stock_snake: inconsistent operands");
    }
    ggml_tensor * s = ggml_sin(ctx, ggml_mul(ctx, x, exp_alpha));
    ggml_tensor * y = ggml_add(ctx, x, ggml_mul(ctx, ggml_sqr(ctx, s), inv_beta));
    return left ? ggml_concat(ctx, left, y, 1) : y;
}

ggml_tensor * stock_elu(ggml_context * ctx, ggml_tensor * x, ggml_tensor * left, int64_t pad) {
    if (!rows_contiguous(x) || pad < 0 || (left && left->ne[0] != x->ne[0])) fail("stock_elu: inconsistent operands");
    ggml_tensor * y = ggml_elu(ctx, ggml_is_contiguous(x) ? x : ggml_cont(ctx, x));
    if (pad) y = ggml_pad(ctx, y, 0, static_cast<int>(pad), 0, 0);
    return left ? ggml_concat(ctx, left, y, 1) : y;
}

ggml_tensor * stock_time_stats(ggml_context * ctx, ggml_tensor * x, ggml_tensor * logits) {
    if (!rows_contiguous(x) || x->ne[1] < 1 || (logits && !ggml_are_same_shape(x, logits))) {
        fail("stock_time_stats: inconsistent operands");
    }
    const int64_t C = x->ne[0];
    ggml_tensor * xt = ggml_cont(ctx, ggml_transpose(ctx, x));  // [T, C]: time runs along rows
    ggml_tensor *mean = nullptr, *var = nullptr;
    if (logits) {
        ggml_tensor * a = ggml_soft_max(ctx, ggml_cont(ctx, ggml_transpose(ctx, logits)));
        mean = ggml_sum_rows(ctx, ggml_mul(ctx, a, xt));
        var = ggml_sum_rows(ctx, ggml_mul(ctx, a, ggml_sqr(ctx, ggml_sub(ctx, xt, mean))));
    } else {
        mean = ggml_mean(ctx, xt);
        var = ggml_mean(ctx, ggml_sqr(ctx, ggml_sub(ctx, xt, mean)));
    }
    ggml_tensor * sd = ggml_sqrt(ctx, ggml_clamp(ctx, var, kStatEps, FLT_MAX));
    return ggml_concat(ctx, ggml_reshape_2d(ctx, mean, C, 1), ggml_reshape_2d(ctx, sd, C, 1), 1);
}

}  // namespace qtts
