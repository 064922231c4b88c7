#include "runtime/transformer.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "ops/attend.h"
#include "runtime/codec_ops.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/loader.h"
#include "runtime/names.h"

namespace qtts {

TransformerHParams read_transformer_hparams(const GgufFile & f, const char * prefix, bool has_context) {
    auto key = [&](const char * pattern) { return format(pattern, prefix); };
    TransformerHParams hp;
    const std::string heads = key(kv::T_HEAD_COUNT), kv_heads = key(kv::T_HEAD_COUNT_KV);
    const std::string head_dim = key(kv::T_KEY_LENGTH);
    hp.n_embd = f.count(key(kv::T_EMBEDDING_LENGTH).c_str(), 1, kMaxWidth);
    hp.n_ff = f.count(key(kv::T_FEED_FORWARD_LENGTH).c_str(), 1, 4 * kMaxWidth);
    hp.n_layer = f.count(key(kv::T_BLOCK_COUNT).c_str(), 1, kMaxLayers);
    hp.n_head = f.count(heads.c_str(), 1, kMaxHeads);
    hp.n_head_kv = f.count(kv_heads.c_str(), 1, kMaxHeads);
    // grouped-query attention broadcasts each KV head over a whole group of query heads
    if (hp.n_head % hp.n_head_kv != 0) {
        f.key_error(kv_heads.c_str(), format("= %d does not divide '%s' = %d", hp.n_head_kv, heads.c_str(), hp.n_head));
    }
    hp.head_dim = f.count(head_dim.c_str(), 2, 4096);
    // NEOX rope rotates pairs of dimensions
    if (hp.head_dim % 2 != 0) f.key_error(head_dim.c_str(), format("= %d is odd (rope needs pairs)", hp.head_dim));
    if (int64_t(hp.n_head) * hp.head_dim > 4 * kMaxWidth) {
        f.key_error(head_dim.c_str(), format("= %d times %d heads is too wide", hp.head_dim, hp.n_head));
    }
    hp.eps = f.real(key(kv::T_NORM_EPS).c_str(), 0.0f, 1.0f);
    hp.rope_base = f.real(key(kv::T_ROPE_FREQ_BASE).c_str(), 1.0f, 1e12f, /*closed=*/true);
    if (has_context) hp.n_ctx = f.count(key(kv::T_CONTEXT_LENGTH).c_str(), 1, 1 << 24);
    return hp;
}

namespace {

// A QWEN3 layer's joined weights (TransformerLayer::wqkv ...), where its parts allow.
void join_layer(GgufFile & f, TransformerLayer & l, const TransformerHParams & hp, const std::string & blk) {
    // parts of one type (K-quant targets give attn_v another type, convert/quantize.py: those
    // layers keep separate q, k, v products); GgufFile::place lays the parts end to end
    l.wqkv = f.join(blk + "attn_qkv.weight", {l.wq, l.wk, l.wv}, /*copy=*/false);
    l.ffn_gate_up = f.join(blk + "ffn_gate_up.weight", {l.ffn_gate, l.ffn_up}, /*copy=*/false);
    if (!l.wqkv) return;
    std::vector<ggml_tensor *> norms(static_cast<size_t>(hp.n_head), l.q_norm);
    norms.insert(norms.end(), static_cast<size_t>(hp.n_head_kv), l.k_norm);
    l.qk_norm = f.join(blk + "attn_qk_norm.weight", norms, /*copy=*/true);
}

}  // namespace

Transformer load_transformer(GgufFile & f, const char * prefix, const char * net, bool has_context, LayerStyle style) {
    Transformer t;
    t.style = style;
    t.hp = read_transformer_hparams(f, prefix, has_context);
    const TransformerHParams & hp = t.hp;
    const int64_t d = hp.n_embd, q = int64_t(hp.n_head) * hp.head_dim, kv = int64_t(hp.n_head_kv) * hp.head_dim;
    const bool qwen3 = style == LayerStyle::QWEN3;
    // grown layer by layer: a corrupt, huge block_count ends at the first missing tensor, not in bad_alloc
    for (int i = 0; i < hp.n_layer; ++i) {
        auto n = [&](const char * pat) { return format(pat, net, i); };
        auto mat = [&](const char * pat, int64_t in, int64_t out) {
            return qwen3 ? f.tensor(n(pat), {in, out}, WeightKind::MATMUL) : load_panels(f, n(pat), 1, in, out);
        };
        auto vec = [&](const char * pat, int64_t len) { return f.tensor(n(pat), {len}, WeightKind::F32); };
        TransformerLayer & l = t.layers.emplace_back();
        l.attn_norm = vec(tn::L_ATTN_NORM, d);
        l.wq = mat(tn::L_ATTN_Q, d, q);
        l.wk = mat(tn::L_ATTN_K, d, kv);
        l.wv = mat(tn::L_ATTN_V, d, kv);
        l.wo = mat(tn::L_ATTN_OUT, q, d);
        l.ffn_norm = vec(tn::L_FFN_NORM, d);
        l.ffn_up = mat(tn::L_FFN_UP, d, hp.n_ff);
        l.ffn_down = mat(tn::L_FFN_DOWN, hp.n_ff, d);
        if (qwen3) {
            l.q_norm = vec(tn::L_ATTN_Q_NORM, hp.head_dim);
            l.k_norm = vec(tn::L_ATTN_K_NORM, hp.head_dim);
        } else {
            l.attn_scale = vec(tn::L_ATTN_SCALE, d);
            l.ffn_scale = vec(tn::L_FFN_SCALE, d);
        }
        if (style == LayerStyle::CODEC_ENCODER) {
            l.attn_norm_b = vec(tn::L_ATTN_NORM_B, d);
            l.ffn_norm_b = vec(tn::L_FFN_NORM_B, d);
        } else {
            l.ffn_gate = mat(tn::L_FFN_GATE, d, hp.n_ff);
        }
        if (qwen3) join_layer(f, l, hp, n("%s.blk.%d."));
    }
    return t;
}

std::vector<ggml_tensor *> layer_matrices(const TransformerLayer & l) {
    std::vector<ggml_tensor *> out;
    if (l.wqkv) {
        out.push_back(l.wqkv);
    } else {
        out.insert(out.end(), {l.wq, l.wk, l.wv});
    }
    out.push_back(l.wo);
    if (l.ffn_gate_up) {
        out.push_back(l.ffn_gate_up);
    } else {
        if (l.ffn_gate) out.push_back(l.ffn_gate);
        out.push_back(l.ffn_up);
    }
    out.push_back(l.ffn_down);
    return out;
}

ggml_tensor * new_cache_k(ggml_context * ctx, const TransformerHParams & hp, int64_t n_ctx, bool fused) {
    if (fused) return ggml_new_tensor_3d(ctx, GGML_TYPE_F32, hp.head_dim, n_ctx, hp.n_head_kv);
    return ggml_new_tensor_3d(ctx, GGML_TYPE_F32, hp.head_dim, hp.n_head_kv, n_ctx);
}

ggml_tensor * new_cache_v(ggml_context * ctx, const TransformerHParams & hp, int64_t n_ctx, bool fused) {
    if (fused) return new_cache_k(ctx, hp, n_ctx, true);
    return ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_ctx, hp.head_dim, hp.n_head_kv);
}

void KvCache::release() {
    state_.release();
    k.clear();
    v.clear();
    n_ctx_ = 0;
    epoch_ = 0;
    fused_ = false;
}

void KvCache::reserve(ggml_backend_t backend, const TransformerHParams & hp, int n_ctx, bool fused) {
    const int width = hp.head_dim * hp.n_head_kv;
    if (state_.allocated() && n_ctx == n_ctx_ && n_layer_ == hp.n_layer && width_ == width && fused == fused_) return;
    release();
    if (n_ctx < 1) fail("KV cache needs at least one position, got %d", n_ctx);
    ggml_context * ctx = state_.begin(2 * static_cast<size_t>(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        k.push_back(named(new_cache_k(ctx, hp, n_ctx, fused), "cache_k.%d", il));
        v.push_back(named(new_cache_v(ctx, hp, n_ctx, fused), "cache_v.%d", il));
    }
    try {
        state_.allocate(backend, format("a KV cache of %d positions", n_ctx).c_str());
    } catch (...) {
        release();
        throw;
    }
    // a masked window reads positions not written yet: zeros, not NaN, under a zero weight
    if (!fused) state_.clear();
    n_ctx_ = n_ctx;
    n_layer_ = hp.n_layer;
    width_ = width;
    fused_ = fused;
    static std::atomic<uint64_t> allocations{0};
    epoch_ = ++allocations;
}

int64_t kv_window(int64_t n_used, int64_t lane_len) {
    return std::min(lane_len, (n_used + kKvBucket - 1) / kKvBucket * kKvBucket);
}

KvStepInputs kv_step_inputs(const TransformerHParams & hp, int64_t n_ctx, int64_t lane_len, int64_t window,
                            const std::vector<int32_t> & pos) {
    const int64_t lanes = static_cast<int64_t>(pos.size()), hd = hp.head_dim, nkv = hp.n_head_kv;
    KvStepInputs in;
    in.k_rows.resize(lanes);
    in.v_rows.resize(static_cast<size_t>(hd * nkv * lanes));
    in.mask.assign(static_cast<size_t>(window * lanes), -INFINITY);
    for (int64_t b = 0; b < lanes; ++b) {
        if (pos[b] >= window) {
            fail("KV step: position %d of lane %lld is outside its window", pos[b], static_cast<long long>(b));
        }
        // a lane that sits the step out writes its last position and attends its first
        const int64_t at = b * lane_len + (pos[b] < 0 ? lane_len - 1 : pos[b]);
        in.k_rows[b] = at;
        // the V cache is [n_ctx, hd, n_head_kv]: element (at, c, h), in the order v's values come
        for (int64_t h = 0; h < nkv; ++h) {
            for (int64_t c = 0; c < hd; ++c) in.v_rows[(b * nkv + h) * hd + c] = (h * hd + c) * n_ctx + at;
        }
        std::fill_n(in.mask.begin() + b * window, std::max(pos[b], 0) + 1, 0.0f);
    }
    return in;
}

KvStepGraph kv_step_graph(ggml_context * ctx, const TransformerHParams & hp, int64_t lanes, int64_t window,
                          const char * prefix) {
    KvStepGraph g;
    g.rows.k = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I64, lanes), format("%s.kv_rows_k", prefix).c_str());
    g.rows.v = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I64, int64_t(hp.head_dim) * hp.n_head_kv * lanes),
                     format("%s.kv_rows_v", prefix).c_str());
    g.mask = input(ggml_new_tensor_4d(ctx, GGML_TYPE_F32, window, 1, 1, lanes), format("%s.kv_mask", prefix).c_str());
    return g;
}

void set_kv_step_inputs(ggml_cgraph * gf, const KvStepInputs & in, const char * prefix) {
    set_input(gf, format("%s.kv_rows_k", prefix).c_str(), in.k_rows);
    set_input(gf, format("%s.kv_rows_v", prefix).c_str(), in.v_rows);
    set_input(gf, format("%s.kv_mask", prefix).c_str(), in.mask);
}

ggml_tensor * rms_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, float eps) {
    return ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), w);
}

namespace {

struct LayerBuilder {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const Transformer & t;
    const StackOptions & o;
    ggml_tensor * pos;

    // QWEN3 weights are ggml matrices; the codecs' are single-tap conv-GEMM panels, each a conv
    // of its net's native or portable ops
    ggml_tensor * mat(ggml_tensor * x, ggml_tensor * w) const {
        if (t.style == LayerStyle::QWEN3) return matmul(ctx, w, x);
        return CodecOps{ctx, o.portable, nullptr}.conv(x, w, x->ne[1], nullptr, nullptr);
    }

    ggml_tensor * norm(ggml_tensor * x, ggml_tensor * w, ggml_tensor * b) const {
        if (!b) return rms_norm(ctx, x, w, t.hp.eps);
        return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, x, t.hp.eps), w), b);
    }

    ggml_tensor * rope(ggml_tensor * x) const {
        return ggml_rope_ext(ctx, x, pos, nullptr, t.hp.head_dim, GGML_ROPE_TYPE_NEOX, 0, t.hp.rope_base,
                             /*freq_scale=*/1.0f, /*ext_factor=*/0.0f, /*attn_factor=*/1.0f, 0.0f, 0.0f);
    }

    ggml_tensor * attention(ggml_tensor * x, const TransformerLayer & l, int il) const {
        const TransformerHParams & hp = t.hp;
        const char * p = o.prefix;
        const int64_t n = x->ne[1], hd = hp.head_dim, nh = hp.n_head, nkv = hp.n_head_kv;
        ggml_tensor *q, *k, *v;
        if (l.wqkv) {
            // one product; a position's q, k and v heads lie side by side in its column, so that
            // heads [from, from + heads) of every position are a view
            ggml_tensor * qkv = mat(x, l.wqkv);
            auto heads = [&](ggml_tensor * t, size_t column, int64_t from, int64_t count) {
                return ggml_view_3d(ctx, t, hd, count, n, hd * sizeof(float), column, from * hd * sizeof(float));
            };
            v = named(heads(qkv, qkv->nb[1], nh + nkv, nkv), "%s.%d.v", p, il);
            // every element of the norm and of RoPE depends on its own head and position alone:
            // q's and k's heads together give the bits of two separate passes
            ggml_tensor * qk = rms_norm(ctx, heads(qkv, qkv->nb[1], 0, nh + nkv), l.qk_norm, hp.eps);
            qk = named(rope(qk), "%s.%d.qk", p, il);
            q = heads(qk, qk->nb[2], 0, nh);
            k = heads(qk, qk->nb[2], nh, nkv);
        } else {
            q = ggml_reshape_3d(ctx, mat(x, l.wq), hd, nh, n);
            k = ggml_reshape_3d(ctx, mat(x, l.wk), hd, nkv, n);
            v = named(ggml_reshape_3d(ctx, mat(x, l.wv), hd, nkv, n), "%s.%d.v", p, il);
            if (l.q_norm) q = rms_norm(ctx, q, l.q_norm, hp.eps);
            if (l.k_norm) k = rms_norm(ctx, k, l.k_norm, hp.eps);
            q = rope(q);
            k = rope(k);
        }
        q = named(q, "%s.%d.q", p, il);
        k = named(k, "%s.%d.k", p, il);
        ggml_tensor * out = o.segments ? attend_segments(q, k, v, il) : attend(q, k, v, o.kv, o.mask, il, pos);
        return named(mat(out, l.wo), "%s.%d.attn_out", p, il);
    }

    // Each segment's rows of q, k, v [hd, heads, n_all] attended over its own cache; the outputs
    // one after the other.
    ggml_tensor * attend_segments(ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, int il) const {
        std::vector<ggml_tensor *> outs;
        int64_t at = 0;
        for (const KvSegment & s : *o.segments) {
            auto rows = [&](ggml_tensor * t) {
                return ggml_view_3d(ctx, t, t->ne[0], t->ne[1], s.n, t->nb[1], t->nb[2], at * t->nb[2]);
            };
            outs.push_back(attend(rows(q), rows(k), rows(v), &s.kv, s.mask, il, nullptr));
            at += s.n;
        }
        return concat_rows(ctx, std::move(outs));
    }

    // The causal mask [n_kv, n] of n queries after n_past positions: 0 where key i <= n_past + j
    // for query j, -1e30 after (ggml_diag_mask_inf's keys); built from stock ops that every
    // backend has, since ggml-metal lacks that op (the graph would leave the GPU there). The
    // softmax adds 0 or -1e30 to the scaled scores: every row keeps its key 0, so the masked
    // ones' weights are exactly 0 and the rest are those of the masked scores bit for bit. Not
    // -inf: ggml-metal's tri multiplies by 0 or 1, and 0 * -inf is NaN.
    ggml_tensor * causal_mask(int64_t n_kv, int64_t n, int64_t n_past) const {
        auto filled = [&](int64_t keys, float value) {
            return ggml_fill(ctx, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, keys, n), value);
        };
        ggml_tensor * m = ggml_tri(ctx, filled(n_kv - n_past, -1e30f), GGML_TRI_TYPE_UPPER);  // key > query
        return n_past > 0 ? ggml_concat(ctx, filled(n_past, 0.0f), m, 0) : m;
    }

    // Softmax attention of q [hd, n_head, n] (at positions `at`) over the cache window `kv` (k, v
    // written into it first) or, without one, over k, v themselves; [hd * n_head, n].
    ggml_tensor * attend(ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const KvWindow * kv, ggml_tensor * mask,
                         int il, ggml_tensor * at) const {
        const TransformerHParams & hp = t.hp;
        const int64_t n_all = q->ne[2], hd = hp.head_dim, nkv = hp.n_head_kv;
        const int64_t lanes = kv ? kv->lanes : 1, n = n_all / lanes;
        // t [hd, heads, n_all] (a view of a joined product: heads contiguous, positions strided)
        // as [hd, heads, n, lanes], and as rows of hd * heads values, one per position
        auto by_lane = [&](ggml_tensor * t) {
            return ggml_view_4d(ctx, t, hd, t->ne[1], n, lanes, t->nb[1], t->nb[2], n * t->nb[2], 0);
        };
        auto positions = [&](ggml_tensor * t) { return ggml_view_2d(ctx, t, hd * t->ne[1], n_all, t->nb[2], 0); };
        // A fused cache (CPU, native ops): one op over the head-major K and V windows, at the
        // positions the graph's input gives when it runs (KvWindow::fused).
        if (kv && kv->fused) {
            if (mask) fail("%s: a fused KV cache takes no mask", o.prefix);
            const size_t row = hd * sizeof(float);
            auto window = [&](ggml_tensor * c) {
                return ggml_view_4d(ctx, c, hd, kv->n_kv, nkv, lanes, row, c->nb[2], kv->lane_stride * row,
                                    kv->first * row);
            };
            return attend_cached(ctx, q, k, v, window((*kv->k)[il]), window((*kv->v)[il]), at);
        }
        // K [hd, n_kv, nkv, lanes] and VT [n_kv, hd, nkv, lanes]; mul_mat broadcasts each KV head
        // over its query-head group in the order the reference's repeat_kv lays them out. This
        // cache keeps V transposed (positions along ne0) so that VT is a view of it, not a
        // per-step copy of the whole window (docs/architecture.md "KV cache").
        ggml_tensor *K, *VT;
        int64_t n_past = 0;
        if (kv) {
            ggml_tensor *ck = (*kv->k)[il], *cv = (*kv->v)[il];
            const size_t es = sizeof(float), row = hd * nkv * es, lane = kv->lane_stride * row;
            const size_t vrow = cv->ne[0] * es, vhead = hd * vrow, vlane = kv->lane_stride * es;
            n_past = kv->n_past;
            const int64_t first = kv->first;
            if (kv->rows) {
                // one row of K per new position; V, transposed, one element per value
                ggml_tensor * k_all = ggml_reshape_2d(ctx, ck, hd * nkv, ck->ne[2]);
                ggml_tensor * v_all = ggml_reshape_2d(ctx, cv, 1, ggml_nelements(cv));
                // v's values one per row: a view of a joined product's v has a gap between
                // positions, which set_rows' rows of one value cannot step over. Copied for one
                // lane too, so that the step's nodes do not depend on the lanes.
                if (v->nb[2] != v->nb[1] * v->ne[1]) v = ggml_cont(ctx, v);
                ggml_build_forward_expand(gf, ggml_set_rows(ctx, k_all, positions(k), kv->rows->k));
                ggml_build_forward_expand(
                    gf, ggml_set_rows(ctx, v_all, ggml_reshape_2d(ctx, v, 1, ggml_nelements(v)), kv->rows->v));
            } else {
                const int64_t at = first + n_past;
                ggml_tensor * k_slots = ggml_view_4d(ctx, ck, hd, nkv, n, lanes, hd * es, row, lane, at * row);
                ggml_tensor * v_slots = ggml_view_4d(ctx, cv, n, hd, nkv, lanes, vrow, vhead, vlane, at * es);
                ggml_tensor * v4 = ggml_permute(ctx, by_lane(v), 1, 2, 0, 3);
                ggml_build_forward_expand(gf, ggml_cpy(ctx, by_lane(k), k_slots));
                ggml_build_forward_expand(gf, ggml_cpy(ctx, v4, v_slots));
            }
            K = ggml_view_4d(ctx, ck, hd, kv->n_kv, nkv, lanes, row, hd * es, lane, first * row);
            VT = ggml_view_4d(ctx, cv, kv->n_kv, hd, nkv, lanes, vrow, vhead, vlane, first * es);
        } else {
            K = ggml_permute(ctx, k, 0, 2, 1, 3);
            VT = ggml_cont(ctx, ggml_permute(ctx, v, 1, 2, 0, 3));
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        if (kv && n == 1) return attend_one(q, K, VT, mask, scale, il);
        q = ggml_permute(ctx, by_lane(q), 0, 2, 1, 3);
        ggml_tensor * kq = mul_mat(ctx, K, q);  // [n_kv, n, n_head, lanes]
        if (!mask && n > 1) mask = causal_mask(kq->ne[0], n, n_past);
        kq = named(ggml_soft_max_ext(ctx, kq, mask, scale, 0.0f), "%s.%d.attn_w", o.prefix, il);
        ggml_tensor * out = ggml_permute(ctx, mul_mat(ctx, VT, kq), 0, 2, 1, 3);  // [hd, n_head, n, lanes]
        return ggml_cont_2d(ctx, out, hd * hp.n_head, n_all);
    }

    // One query per lane (a batched step): each KV head's group of query heads as the columns of
    // one product, so that each lane's K and V windows are read once per KV head, not once per
    // query head, and the output comes out in q's head order, [hd * n_head, lanes], with no copy
    // (docs/architecture.md "KV cache"). q [hd, n_head, lanes] (heads contiguous), K [hd, n_kv,
    // nkv, lanes], VT [n_kv, hd, nkv, lanes].
    ggml_tensor * attend_one(ggml_tensor * q, ggml_tensor * K, ggml_tensor * VT, ggml_tensor * mask, float scale,
                             int il) const {
        const int64_t hd = t.hp.head_dim, nh = t.hp.n_head, nkv = t.hp.n_head_kv, gqa = nh / nkv, lanes = q->ne[2];
        if (q->ne[1] != nh || q->nb[1] != hd * sizeof(float) || nh % nkv != 0) {
            fail("%s: one-query attention needs each position's %lld query heads side by side", o.prefix,
                 static_cast<long long>(nh));
        }
        ggml_tensor * qg = ggml_view_4d(ctx, q, hd, gqa, nkv, lanes, q->nb[1], gqa * q->nb[1], q->nb[2], 0);
        ggml_tensor * kq = mul_mat(ctx, K, qg);  // [n_kv, gqa, nkv, lanes]
        // the mask [n_kv, 1, 1, lanes] broadcasts over ne2: every head of a lane as one row there
        kq = ggml_reshape_4d(ctx, kq, kq->ne[0], 1, nh, lanes);
        kq = named(ggml_soft_max_ext(ctx, kq, mask, scale, 0.0f), "%s.%d.attn_w", o.prefix, il);
        kq = ggml_reshape_4d(ctx, kq, kq->ne[0], gqa, nkv, lanes);
        return ggml_reshape_2d(ctx, mul_mat(ctx, VT, kq), hd * nh, lanes);  // [hd, gqa, nkv, lanes]
    }

    ggml_tensor * mlp(ggml_tensor * h, const TransformerLayer & l) const {
        if (l.ffn_gate_up) {
            // ggml's GLU on one product: SiLU of each column's first half (gate) times its second (up)
            h = ggml_swiglu(ctx, mat(h, l.ffn_gate_up));
        } else if (l.ffn_gate) {
            h = ggml_swiglu_split(ctx, mat(h, l.ffn_gate), mat(h, l.ffn_up));
        } else {
            h = ggml_gelu_erf(ctx, mat(h, l.ffn_up));
        }
        return mat(h, l.ffn_down);
    }

    // x + f(x) * scale: LayerScale where the layer has one
    ggml_tensor * residual(ggml_tensor * x, ggml_tensor * fx, ggml_tensor * scale) const {
        return ggml_add(ctx, x, scale ? ggml_mul(ctx, fx, scale) : fx);
    }

    ggml_tensor * layer(ggml_tensor * x, int il) const {
        const TransformerLayer & l = t.layers[il];
        const char * p = o.prefix;
        ggml_tensor * h = named(norm(x, l.attn_norm, l.attn_norm_b), "%s.%d.attn_norm", p, il);
        x = named(residual(x, attention(h, l, il), l.attn_scale), "%s.%d.attn_res", p, il);
        h = named(norm(x, l.ffn_norm, l.ffn_norm_b), "%s.%d.ffn_norm", p, il);
        return named(residual(x, mlp(h, l), l.ffn_scale), "%s.%d.out", p, il);
    }
};

}  // namespace

ggml_tensor * transformer_stack(ggml_context * ctx, ggml_cgraph * gf, ggml_tensor * x, ggml_tensor * pos,
                                const Transformer & t, const StackOptions & o) {
    auto check = [&](const KvWindow & w, int64_t n, ggml_tensor * mask) {
        const int64_t n_ctx = w.k->empty() ? 0 : w.k->front()->ne[w.fused ? 1 : 2];
        if (w.v->size() != w.k->size() || (n_ctx > 0 && w.v->front()->ne[w.fused ? 1 : 0] != n_ctx)) {
            fail("%s: the V cache does not match the K cache", o.prefix);
        }
        const int64_t need = w.first + (w.lanes > 1 ? (w.lanes - 1) * w.lane_stride + w.n_kv : w.n_kv);
        if (w.rows && (w.fused || (w.lanes > 1 && n != w.lanes) || !mask)) {
            fail("%s: cache rows take one position per lane (or a single lane), a mask and a cache that is not fused",
                 o.prefix);
        }
        if (w.lanes < 1 || n % w.lanes != 0 || w.n_past + n / w.lanes > w.n_kv || need > n_ctx || w.first < 0 ||
            (w.lanes > 1 && w.lane_stride < w.n_kv)) {
            fail("%s: positions up to %lld are past the KV cache (%lld)", o.prefix,
                 static_cast<long long>(w.n_past + n / std::max<int64_t>(w.lanes, 1)), static_cast<long long>(n_ctx));
        }
    };
    if (o.kv) check(*o.kv, x->ne[1], o.mask);
    if (o.segments) {
        int64_t rows = 0;
        for (const KvSegment & s : *o.segments) {
            if (s.kv.lanes != 1 || s.kv.fused || !s.mask || s.n < 1) {
                fail("%s: a segment is one lane over a cache that is not fused, with a mask", o.prefix);
            }
            check(s.kv, s.n, s.mask);
            rows += s.n;
        }
        if (o.kv || o.mask || rows != x->ne[1]) {
            fail("%s: segments take the place of kv and mask, and cover the graph's %lld rows", o.prefix,
                 static_cast<long long>(x->ne[1]));
        }
    }
    const LayerBuilder b{ctx, gf, t, o, pos};
    for (int il = 0; il < static_cast<int>(t.layers.size()); ++il) x = b.layer(x, il);
    return x;
}

}  // namespace qtts
