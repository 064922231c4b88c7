#include "ops/stock.h"

#include <atomic>
#include <cfloat>
#include <cstdlib>
#include <cstring>

#include "ggml-backend.h"
#include "ops/layout.h"
#include "runtime/error.h"

namespace qtts {

namespace {

constexpr float kStatEps = 1e-12f;  // as ops/time_stats.cpp

}  // namespace

namespace {

// -1 unclaimed, else a Precision
std::atomic<int> & claimed_precision() {
    static std::atomic<int> p{-1};
    return p;
}

const char * precision_name(Precision p) { return p == Precision::exact ? "exact" : "fast"; }

bool in_host_memory(const ggml_tensor * t) {
    const ggml_tensor * base = t->view_src ? t->view_src : t;
    return base->buffer && ggml_backend_buffer_is_host(base->buffer);
}

}  // namespace

namespace {

// Set once an exact model is on a ggml-vulkan device: ggml-vulkan copies an F32 operand whose
// first two dimensions are not contiguous (an attention product's permuted heads, a KV-cache
// window) to F16 before multiplying, whatever the product's precision, so exact hands it dense
// copies instead (docs/gpu.md, "Exact on Vulkan").
std::atomic<bool> & dense_operands() {
    static std::atomic<bool> on{false};
    return on;
}

ggml_tensor * dense01(ggml_context * ctx, ggml_tensor * t) {
    const bool dense = t->nb[0] == ggml_type_size(t->type) && t->nb[1] == t->nb[0] * t->ne[0];
    return dense || t->type != GGML_TYPE_F32 ? t : ggml_cont(ctx, t);
}

}  // namespace

Precision device_precision() {
    return claimed_precision().load() == static_cast<int>(Precision::exact) ? Precision::exact : Precision::fast;
}

void claim_device_precision(Precision p, const char * device) {
    int want = static_cast<int>(p), seen = -1;
    if (!claimed_precision().compare_exchange_strong(seen, want) && seen != want) {
        fail("precision '%s' was asked for, but this process already runs models on a GPU in '%s' precision "
             "(the device's matrix-product mode is process-wide): load them with the same precision",
             precision_name(p), precision_name(static_cast<Precision>(seen)));
    }
    // cuBLAS reads NVIDIA_TF32_OVERRIDE when it creates its handle, which ggml-cuda does at the
    // first product it hands to cuBLAS; ggml-vulkan reads GGML_VK_DISABLE_F16 when it sets up a
    // device, which it does when the model's weights are first placed on it (without it, its
    // products keep F32 operands in fp16 tiles where the device has fp16 arithmetic). A value
    // the user set is kept.
    if (p == Precision::exact && std::strncmp(device, "Vulkan", 6) == 0) dense_operands() = true;
    if (p == Precision::exact) {
        for (const char * name : {"NVIDIA_TF32_OVERRIDE", "GGML_VK_DISABLE_F16"}) {
            const char * value = name[0] == 'N' ? "0" : "1";
#if defined(_WIN32)
            if (!std::getenv(name)) _putenv_s(name, value);
#else
            setenv(name, value, 0);
#endif
        }
    }
}

ggml_tensor * mul_mat_exact(ggml_context * ctx, ggml_tensor * a, ggml_tensor * b, bool every_width) {
    const bool f32 = a->type == GGML_TYPE_F32, half = a->type == GGML_TYPE_F16 || a->type == GGML_TYPE_BF16;
    constexpr int64_t kFirstCublasWidth = 17;
    const int64_t n = b->ne[1], narrowest = every_width ? 1 : f32 ? 4 : 2;
    if (!(f32 || half) || n < narrowest || n >= kFirstCublasWidth) {
        ggml_tensor * y = ggml_mul_mat(ctx, a, b);
        ggml_mul_mat_set_prec(y, GGML_PREC_F32);
        return y;
    }
    ggml_tensor * bp =
        ggml_pad(ctx, ggml_is_contiguous(b) ? b : ggml_cont(ctx, b), 0, static_cast<int>(kFirstCublasWidth - n), 0, 0);
    ggml_tensor * y = ggml_mul_mat(ctx, a, bp);
    ggml_mul_mat_set_prec(y, GGML_PREC_F32);
    // one matrix: its first n columns, a view whose strides read as dense (ggml_scale and other
    // elementwise ops assert on that); several: a dense copy
    if (y->ne[2] * y->ne[3] == 1) return ggml_view_2d(ctx, y, y->ne[0], n, y->nb[1], 0);
    return ggml_cont(ctx, ggml_view_4d(ctx, y, y->ne[0], n, y->ne[2], y->ne[3], y->nb[1], y->nb[2], y->nb[3], 0));
}

ggml_tensor * mul_mat(ggml_context * ctx, ggml_tensor * a, ggml_tensor * b) {
    if (device_precision() != Precision::exact || in_host_memory(a)) return ggml_mul_mat(ctx, a, b);
    // ggml-vulkan multiplies up to 8 columns with its mat-vec kernel, which splits each dot
    // product across threads, and more with its tiled kernel, which sums in order: padding every
    // narrower product keeps a row's result the same alone and in a batch (docs/gpu.md, "Exact on
    // Vulkan")
    if (dense_operands()) return mul_mat_exact(ctx, dense01(ctx, a), dense01(ctx, b), true);
    return mul_mat_exact(ctx, a, b, false);
}

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
        if (x->ne[1] % g != 0)
            fail("stock_conv: %lld input rows are not a multiple of the stride %lld", static_cast<long long>(x->ne[1]),
                 static_cast<long long>(g));
        x = ggml_reshape_2d(ctx, x, gc, x->ne[1] / g);
    }
    const int64_t rows = x->ne[1], span = rows - n;
    const int64_t d = taps > 1 ? span / (taps - 1) : 0;
    if (span < 0 || (taps > 1 && (d < 1 || span % (taps - 1) != 0))) fail("stock_conv: inconsistent operands");
    ggml_tensor * y = nullptr;
    for (int64_t j = 0; j < taps; ++j) {
        ggml_tensor * wj = ggml_view_2d(ctx, w, gc, N, w->nb[1], j * w->nb[2]);
        ggml_tensor * xj = ggml_view_2d(ctx, x, gc, n, x->nb[1], j * d * x->nb[1]);
        ggml_tensor * p = mul_mat(ctx, wj, xj);
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
