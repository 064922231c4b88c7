#include "runtime/transformer.h"

#include <cmath>

#include "runtime/error.h"
#include "runtime/graph.h"

namespace qtts {

KvCache::~KvCache() { release(); }

void KvCache::release() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
    buf_ = nullptr;
    ctx_ = nullptr;
    k.clear();
    v.clear();
    n_ctx_ = 0;
}

void KvCache::reserve(ggml_backend_t backend, const TransformerHParams & hp, int n_ctx) {
    const int width = hp.head_dim * hp.n_head_kv;
    if (buf_ && n_ctx == n_ctx_ && n_layer_ == hp.n_layer && width_ == width) return;
    release();
    if (n_ctx < 1) fail("KV cache needs at least one position, got %d", n_ctx);
    ggml_init_params ip = {ggml_tensor_overhead() * 2 * static_cast<size_t>(hp.n_layer), nullptr, /*no_alloc=*/true};
    ctx_ = ggml_init(ip);
    if (!ctx_) fail("could not create the KV cache context");
    for (int il = 0; il < hp.n_layer; ++il) {
        k.push_back(named(ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, hp.head_dim, hp.n_head_kv, n_ctx), "cache_k.%d", il));
        v.push_back(named(ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, hp.head_dim, hp.n_head_kv, n_ctx), "cache_v.%d", il));
    }
    buf_ = ggml_backend_alloc_ctx_tensors(ctx_, backend);
    if (!buf_) {
        release();
        fail("could not allocate a KV cache of %d positions", n_ctx);
    }
    n_ctx_ = n_ctx;
    n_layer_ = hp.n_layer;
    width_ = width;
}

ggml_tensor * rms_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, float eps) {
    return ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), w);
}

namespace {

ggml_tensor * rope(ggml_context * ctx, ggml_tensor * x, ggml_tensor * pos, const TransformerHParams & hp) {
    return ggml_rope_ext(ctx, x, pos, nullptr, hp.head_dim, GGML_ROPE_TYPE_NEOX, 0, hp.rope_base,
                         /*freq_scale=*/1.0f, /*ext_factor=*/0.0f, /*attn_factor=*/1.0f, 0.0f, 0.0f);
}

ggml_tensor * attention(ggml_context * ctx, ggml_cgraph * gf, ggml_tensor * x, ggml_tensor * pos,
                        const TransformerHParams & hp, const LayerWeights & l, ggml_tensor * ck, ggml_tensor * cv,
                        int n_past, const char * p, int il) {
    const int64_t n = x->ne[1], hd = hp.head_dim, nkv = hp.n_head_kv, n_kv = n_past + n;
    ggml_tensor * q = ggml_reshape_3d(ctx, linear(ctx, x, l.wq), hd, hp.n_head, n);
    ggml_tensor * k = ggml_reshape_3d(ctx, linear(ctx, x, l.wk), hd, nkv, n);
    ggml_tensor * v = named(ggml_reshape_3d(ctx, linear(ctx, x, l.wv), hd, nkv, n), "%s.%d.v", p, il);
    q = named(rope(ctx, rms_norm(ctx, q, l.q_norm, hp.eps), pos, hp), "%s.%d.q", p, il);
    k = named(rope(ctx, rms_norm(ctx, k, l.k_norm, hp.eps), pos, hp), "%s.%d.k", p, il);

    const size_t es = sizeof(float), row = hd * nkv * es;
    ggml_build_forward_expand(gf, ggml_cpy(ctx, k, ggml_view_3d(ctx, ck, hd, nkv, n, hd * es, row, n_past * row)));
    ggml_build_forward_expand(gf, ggml_cpy(ctx, v, ggml_view_3d(ctx, cv, hd, nkv, n, hd * es, row, n_past * row)));

    // [hd, n_kv, nkv] views of the cache; mul_mat broadcasts each KV head over its query-head group
    // in the order the reference's repeat_kv lays them out.
    ggml_tensor * K = ggml_view_3d(ctx, ck, hd, n_kv, nkv, row, hd * es, 0);
    ggml_tensor * V = ggml_view_3d(ctx, cv, hd, n_kv, nkv, row, hd * es, 0);
    ggml_tensor * kq = ggml_mul_mat(ctx, K, ggml_permute(ctx, q, 0, 2, 1, 3));  // [n_kv, n, n_head]
    if (n > 1) kq = ggml_diag_mask_inf(ctx, kq, n_past);
    kq = named(ggml_soft_max_ext(ctx, kq, nullptr, 1.0f / std::sqrt(static_cast<float>(hd)), 0.0f),
               "%s.%d.attn_w", p, il);
    ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, V, 1, 0, 2, 3));  // [n_kv, hd, nkv]
    ggml_tensor * o = ggml_permute(ctx, ggml_mul_mat(ctx, vt, kq), 0, 2, 1, 3);  // [hd, n_head, n]
    o = ggml_cont_2d(ctx, o, hd * hp.n_head, n);
    return named(linear(ctx, o, l.wo), "%s.%d.attn_out", p, il);
}

}  // namespace

ggml_tensor * decoder_stack(ggml_context * ctx, ggml_cgraph * gf, ggml_tensor * x, ggml_tensor * pos,
                            const TransformerHParams & hp, const std::vector<LayerWeights> & layers,
                            const KvCache & cache, int n_past, const char * prefix) {
    if (n_past + x->ne[1] > cache.n_ctx()) {
        fail("%s: position %lld is past the KV cache (%d)", prefix, static_cast<long long>(n_past + x->ne[1]),
             cache.n_ctx());
    }
    for (size_t il = 0; il < layers.size(); ++il) {
        const LayerWeights & l = layers[il];
        const int i = static_cast<int>(il);
        ggml_tensor * h = named(rms_norm(ctx, x, l.attn_norm, hp.eps), "%s.%d.attn_norm", prefix, i);
        x = named(ggml_add(ctx, x, attention(ctx, gf, h, pos, hp, l, cache.k[il], cache.v[il], n_past, prefix, i)),
                  "%s.%d.attn_res", prefix, i);
        h = named(rms_norm(ctx, x, l.ffn_norm, hp.eps), "%s.%d.ffn_norm", prefix, i);
        h = ggml_swiglu_split(ctx, linear(ctx, h, l.ffn_gate), linear(ctx, h, l.ffn_up));
        x = named(ggml_add(ctx, x, linear(ctx, h, l.ffn_down)), "%s.%d.out", prefix, i);
    }
    return x;
}

}  // namespace qtts
