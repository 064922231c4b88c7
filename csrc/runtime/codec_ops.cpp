#include "runtime/codec_ops.h"

#include "ops/conv_gemm.h"
#include "ops/elu_left.h"
#include "ops/layout.h"
#include "ops/snake_beta.h"
#include "ops/stock.h"
#include "ops/time_stats.h"
#include "runtime/error.h"
#include "runtime/graph.h"

namespace qtts {

ConvWeights::~ConvWeights() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
}

void ConvWeights::begin(const GgmlErrorCapture & log, size_t n, const char * what) {
    ggml_init_params ip = {ggml_tensor_overhead() * (n + 1), nullptr, /*no_alloc=*/true};
    ctx_ = ggml_init(ip);
    if (!ctx_) engine_fail(log, "could not create a ggml context for the %s conv weights", what);
}

void ConvWeights::build(const std::vector<PanelConv> & convs, ggml_backend_dev_t dev) {
    GgmlErrorCapture log;
    begin(log, convs.size(), "portable");
    for (const PanelConv & c : convs) {
        const ggml_tensor * p = c.panel;
        const int64_t cin = p->ne[1], k = p->ne[2], n = p->ne[0] * p->ne[3], g = c.stride;
        if (g < 1 || k % g != 0)
            fail("portable weights: '%s' has kernel %lld, not a multiple of its stride %lld", p->name,
                 static_cast<long long>(k), static_cast<long long>(g));
        ggml_tensor * t = ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, g * cin, n, k / g);
        ggml_set_name(t, p->name);
        copies_[p] = t;
    }
    buf_ = ggml_backend_alloc_ctx_tensors_from_buft(ctx_, ggml_backend_dev_buffer_type(dev));
    if (!buf_) engine_fail(log, "out of memory for the portable conv weights on %s", ggml_backend_dev_name(dev));
    ggml_backend_buffer_set_usage(buf_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    std::vector<float> src, dst;
    for (const PanelConv & c : convs) {
        const ggml_tensor * p = c.panel;
        const int64_t P = p->ne[0], cin = p->ne[1], k = p->ne[2], panels = p->ne[3], n = P * panels, g = c.stride;
        src.resize(static_cast<size_t>(ggml_nelements(p)));
        dst.resize(src.size());
        ggml_backend_tensor_get(p, src.data(), 0, ggml_nbytes(p));
        // panel element (lane, c, tap, q) is W[tap, c, o = q*P + lane]; its copy sits at
        // (c + (tap % g) * cin, o, tap / g)
        for (int64_t q = 0; q < panels; ++q) {
            for (int64_t tap = 0; tap < k; ++tap) {
                for (int64_t ci = 0; ci < cin; ++ci) {
                    const float * s = src.data() + P * (ci + cin * (tap + k * q));
                    const int64_t row = ci + (tap % g) * cin, slab = (tap / g) * n;
                    for (int64_t lane = 0; lane < P; ++lane) dst[row + g * cin * (slab + q * P + lane)] = s[lane];
                }
            }
        }
        ggml_backend_tensor_set(copies_.at(p), dst.data(), 0, dst.size() * sizeof(float));
    }
}

void ConvWeights::build_bf16(const std::vector<PanelConv> & convs,
                             const std::function<void(const ggml_tensor *)> & packed) {
    GgmlErrorCapture log;
    begin(log, convs.size(), "BF16");
    for (const PanelConv & c : convs) {
        const ggml_tensor * p = c.panel;
        if (c.stride != 1 || !conv_packs_bf16(p)) continue;
        copies_[p] = ggml_new_tensor_4d(ctx_, GGML_TYPE_BF16, kBf16Block, p->ne[1] / (kBf16Block / kPanelWidth),
                                        p->ne[2], p->ne[3]);
        ggml_set_name(copies_[p], p->name);
    }
    if (copies_.empty()) return;
    buf_ = ggml_backend_alloc_ctx_tensors_from_buft(ctx_, ggml_backend_cpu_buffer_type());
    if (!buf_) engine_fail(log, "out of memory for the BF16 conv weights");
    ggml_backend_buffer_set_usage(buf_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    std::vector<float> src;
    for (const auto & [p, t] : copies_) {
        // the native path's panels are in host memory: read in place, no copy of the largest
        const float * from = static_cast<const float *>(p->data);
        if (!ggml_backend_buffer_is_host(p->buffer)) {
            src.resize(static_cast<size_t>(ggml_nelements(p)));
            ggml_backend_tensor_get(p, src.data(), 0, ggml_nbytes(p));
            from = src.data();
        }
        conv_pack_bf16(from, p->ne[1], p->ne[2], p->ne[3], static_cast<uint16_t *>(t->data));
        if (packed) packed(p);
    }
}

ggml_tensor * ConvWeights::get(const ggml_tensor * panel) const {
    ggml_tensor * t = find(panel);
    if (!t) fail("no copy of the conv weight '%s'", panel->name);
    return t;
}

ggml_tensor * ConvWeights::find(const ggml_tensor * panel) const {
    auto it = copies_.find(panel);
    return it == copies_.end() ? nullptr : it->second;
}

ggml_tensor * CodecOps::native_weight(ggml_tensor * panel) const {
    ggml_tensor * copy = bf16 ? bf16->find(panel) : nullptr;
    return copy ? copy : panel;
}

ggml_tensor * CodecOps::conv(ggml_tensor * xp, ggml_tensor * panel, int64_t n, ggml_tensor * b, ggml_tensor * res,
                             int64_t k, int64_t s) const {
    if (portable) return stock_conv(ctx, xp, portable->get(panel), n, b, res);
    if (s == 1) return conv_gemm(ctx, xp, native_weight(panel), n, b, res);
    // one tap over k*Cin channels of overlapping windows (docs/kernels.md, "Custom CPU ops")
    const int64_t cin = xp->ne[0];
    ggml_tensor * w1 = ggml_reshape_4d(ctx, panel, panel->ne[0], cin * k, 1, panel->ne[3]);
    return conv_gemm(ctx, overlapping_rows(ctx, xp, cin * k, n, s * xp->nb[1]), w1, n, b, res);
}

ggml_tensor * CodecOps::conv_segments(ggml_tensor * xp, ggml_tensor * panel, ggml_tensor * segments, int64_t n,
                                      ggml_tensor * b) const {
    if (portable) fail("conv_segments: the portable path has no segmented conv");
    return conv_gemm(ctx, xp, native_weight(panel), n, b, nullptr, segments);
}

ggml_tensor * CodecOps::snake(ggml_tensor * x, ggml_tensor * exp_alpha, ggml_tensor * inv_beta,
                              ggml_tensor * left) const {
    return portable ? stock_snake(ctx, x, exp_alpha, inv_beta, left) : snake_beta(ctx, x, exp_alpha, inv_beta, left);
}

ggml_tensor * CodecOps::elu(ggml_tensor * x, ggml_tensor * left, int64_t pad) const {
    return portable ? stock_elu(ctx, x, left, pad) : elu_left(ctx, x, left, pad);
}

ggml_tensor * CodecOps::time_stats(ggml_tensor * x, ggml_tensor * logits) const {
    return portable ? stock_time_stats(ctx, x, logits) : qtts::time_stats(ctx, x, logits);
}

void require_host_weights(const ggml_tensor * weight, bool native, const char * what) {
    if (native && !ggml_backend_buffer_is_host(weight->buffer)) {
        throw EngineError(format("%s needs its weights in host memory, which this model's device did not allow", what),
                          {});
    }
}

}  // namespace qtts
