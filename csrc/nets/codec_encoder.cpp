// The codec (Mimi) encoder (spec §6.2): waveform -> codes [ceil(N/1920), 16].
//
// The SEANet conv stack is causal, so it runs over chunks of whole 12.5 Hz frames with each
// conv's left context carried between chunks (memory stays bounded for long clips); only the
// last chunk gets the reference's per-conv "extra" right padding. The 25 Hz embeddings then go
// through one graph: the full-causal transformer, the replicate-padded ×2 downsample and the
// split RVQ (semantic and acoustic both quantise the same embedding).
//
// Activations are channel-fastest (ne = [C, T]). A stride-s conv with kernel k reads, for
// output t, rows t*s .. t*s+k-1 of its padded input: one contiguous run of k*C floats, so it is a
// single-tap conv-GEMM over overlapping rows (the panel layout of k taps equals that of one tap
// over k*C channels).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/conv_gemm.h"
#include "ops/elu_left.h"
#include "runtime/error.h"
#include "runtime/graph.h"
#include "runtime/session.h"

namespace qtts {

namespace {

constexpr int64_t kChunkFrames = 25;  // 12.5 Hz frames per conv-stack graph (2 s of audio)

ggml_tensor * overlapping_rows(ggml_context * ctx, ggml_tensor * x, int64_t width, int64_t rows, size_t step) {
    ggml_tensor * v = ggml_view_1d(ctx, x, width, 0);
    v->ne[1] = rows;
    v->nb[1] = step;
    v->nb[2] = v->nb[3] = step * rows;
    return v;
}

int64_t left_rows(const CodecEncoderWeights::Conv & c) { return c.kernel - c.stride; }

struct ConvStackBuilder {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const CodecEncoderWeights & w;
    EncoderState & st;
    bool last;

    void keep(ggml_tensor * xp, ggml_tensor * left) {
        const int64_t p = left->ne[1];
        ggml_tensor * tail = ggml_view_2d(ctx, xp, xp->ne[0], p, xp->nb[1], (xp->ne[1] - p) * xp->nb[1]);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, tail, left));
    }

    // A causal conv of kernel k, stride s over ELU(x) (x itself for the waveform), x [Cin, L]: its
    // input is [left context; ELU(x)], and in the last chunk zero rows up to a whole number of
    // strides, as the reference's extra right padding.
    ggml_tensor * conv(ggml_tensor * x, bool elu, ggml_tensor * wt, ggml_tensor * b, int64_t k, int64_t s,
                       ggml_tensor * left, ggml_tensor * res = nullptr) {
        const int64_t L = x->ne[1], pad = last && L % s != 0 ? s - L % s : 0, n = (L + pad) / s, cin = x->ne[0];
        ggml_tensor * xp = x;
        if (elu) {
            xp = elu_left(ctx, x, left, pad);
        } else {
            if (pad) xp = ggml_pad(ctx, xp, 0, static_cast<int>(pad), 0, 0);
            if (left) xp = ggml_concat(ctx, left, xp, 1);
        }
        if (left) keep(xp, left);
        if (s == 1) return conv_gemm(ctx, xp, wt, n, b, res);
        ggml_tensor * w1 = ggml_reshape_4d(ctx, wt, wt->ne[0], cin * k, 1, wt->ne[3]);
        return conv_gemm(ctx, overlapping_rows(ctx, xp, cin * k, n, s * xp->nb[1]), w1, n, b, res);
    }

    ggml_tensor * build(ggml_tensor * x) {
        const auto & c0 = w.convs[0];
        x = named(conv(x, false, c0.w, c0.b, c0.kernel, 1, st.conv_left[0]), "ce.conv0");
        for (size_t i = 0; i < w.ratios.size(); ++i) {
            const CodecEncoderWeights::Residual & r = w.res[i];
            ggml_tensor * h = conv(x, true, r.conv1, r.conv1_b, w.residual_kernel_size, 1, st.res_left[i]);
            x = named(conv(h, true, r.conv2, r.conv2_b, 1, 1, nullptr, x), "ce.res%zu", i);
            const auto & c = w.convs[i + 1];
            x = named(conv(x, true, c.w, c.b, c.kernel, c.stride, st.conv_left[i + 1]), "ce.down%zu", i);
        }
        const auto & cl = w.convs.back();
        return named(conv(x, true, cl.w, cl.b, cl.kernel, 1, st.conv_left.back()), "ce.seanet");
    }
};

struct QuantizerBuilder {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const CodecEncoderWeights & w;

    // the transformer's linears are single-tap conv-GEMM panels
    ggml_tensor * gemm(ggml_tensor * x, ggml_tensor * wt) { return conv_gemm(ctx, x, wt, x->ne[1], nullptr, nullptr); }

    ggml_tensor * layer_norm(ggml_tensor * x, ggml_tensor * g, ggml_tensor * b) {
        return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, x, w.hp.eps), g), b);
    }

    ggml_tensor * attention(ggml_tensor * x, ggml_tensor * pos, const LayerWeights & l) {
        const TransformerHParams & hp = w.hp;
        const int64_t n = x->ne[1], hd = hp.head_dim;
        auto rope = [&](ggml_tensor * t) {
            return ggml_rope_ext(ctx, t, pos, nullptr, hd, GGML_ROPE_TYPE_NEOX, 0, hp.rope_base, 1.0f, 0.0f, 1.0f,
                                 0.0f, 0.0f);
        };
        ggml_tensor * q = rope(ggml_reshape_3d(ctx, gemm(x, l.wq), hd, hp.n_head, n));
        ggml_tensor * k = rope(ggml_reshape_3d(ctx, gemm(x, l.wk), hd, hp.n_head_kv, n));
        ggml_tensor * v = ggml_reshape_3d(ctx, gemm(x, l.wv), hd, hp.n_head_kv, n);
        ggml_tensor * kq = ggml_mul_mat(ctx, ggml_permute(ctx, k, 0, 2, 1, 3), ggml_permute(ctx, q, 0, 2, 1, 3));
        kq = ggml_soft_max_ext(ctx, ggml_diag_mask_inf(ctx, kq, 0), nullptr, 1.0f / std::sqrt(static_cast<float>(hd)),
                               0.0f);
        ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, v, 1, 2, 0, 3));  // [n, hd, n_head_kv]
        ggml_tensor * o = ggml_permute(ctx, ggml_mul_mat(ctx, vt, kq), 0, 2, 1, 3);
        return gemm(ggml_cont_2d(ctx, o, hd * hp.n_head, n), l.wo);
    }

    ggml_tensor * transformer(ggml_tensor * x, ggml_tensor * pos) {
        for (size_t il = 0; il < w.layers.size(); ++il) {
            const LayerWeights & l = w.layers[il];
            ggml_tensor * a = attention(layer_norm(x, l.attn_norm, l.attn_norm_b), pos, l);
            x = ggml_add(ctx, x, ggml_mul(ctx, a, l.attn_scale));
            ggml_tensor * h = layer_norm(x, l.ffn_norm, l.ffn_norm_b);
            h = gemm(ggml_gelu_erf(ctx, gemm(h, l.ffn_up)), l.ffn_down);
            x = named(ggml_add(ctx, x, ggml_mul(ctx, h, l.ffn_scale)), "ce.tfm.%zu", il);
        }
        return x;
    }

    // Nearest codebook entry per column of r [D, n]: argmax of 2 r.e - |e|^2 (|r|^2 is common).
    ggml_tensor * nearest(ggml_tensor * r, ggml_tensor * cb) {
        ggml_tensor * e2 = ggml_reshape_2d(ctx, ggml_sum_rows(ctx, ggml_sqr(ctx, cb)), cb->ne[1], 1);
        ggml_tensor * score = ggml_sub(ctx, ggml_scale(ctx, ggml_mul_mat(ctx, cb, r), 2.0f), e2);
        return ggml_argmax(ctx, score);
    }

    ggml_tensor * build(ggml_tensor * emb, ggml_tensor * pos, ggml_tensor * pad_idx, int64_t n_out) {
        ggml_tensor * x = transformer(emb, pos);
        // ×2 downsample, causal with replicate padding: one GEMM over overlapping rows
        ggml_tensor * xp = ggml_get_rows(ctx, x, pad_idx);
        const int64_t h = x->ne[0], k = 2 * w.down_stride;
        ggml_tensor * wd = ggml_reshape_4d(ctx, w.downsample, w.downsample->ne[0], h * k, 1, w.downsample->ne[3]);
        x = named(conv_gemm(ctx, overlapping_rows(ctx, xp, h * k, n_out, w.down_stride * xp->nb[1]), wd, n_out, nullptr,
                            nullptr),
                  "ce.down");
        ggml_tensor * codes = nullptr;
        ggml_tensor * sem = nearest(ggml_mul_mat(ctx, w.sem_in, x), w.sem_codebooks[0]);
        codes = named(sem, "ce.codes.0");
        ggml_set_output(codes);
        ggml_tensor * r = ggml_mul_mat(ctx, w.acu_in, x);
        for (size_t g = 0; g < w.acu_codebooks.size(); ++g) {
            ggml_tensor * idx = named(nearest(r, w.acu_codebooks[g]), "ce.codes.%zu", g + 1);
            ggml_set_output(idx);
            ggml_build_forward_expand(gf, idx);
            if (g + 1 < w.acu_codebooks.size()) r = ggml_sub(ctx, r, ggml_get_rows(ctx, w.acu_codebooks[g], idx));
        }
        return codes;
    }
};

}  // namespace

EncoderState::EncoderState(const CodecEncoderWeights & w, ggml_backend_t backend) {
    ggml_init_params ip = {ggml_tensor_overhead() * (w.convs.size() + w.res.size()), nullptr, /*no_alloc=*/true};
    ctx_ = ggml_init(ip);
    if (!ctx_) fail("could not create the codec encoder state context");
    for (const auto & c : w.convs) {
        const int64_t p = left_rows(c);
        conv_left.push_back(p > 0 ? ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, c.in, p) : nullptr);
    }
    for (size_t i = 0; i < w.res.size(); ++i) {
        res_left.push_back(ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, w.convs[i].out, w.residual_kernel_size - 1));
    }
    buf_ = ggml_backend_alloc_ctx_tensors(ctx_, backend);
    if (!buf_) {
        ggml_free(ctx_);
        fail("could not allocate the codec encoder state");
    }
    ggml_backend_buffer_clear(buf_, 0);  // zeros are the causal padding
}

EncoderState::~EncoderState() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
}

std::vector<int32_t> Session::encode(const std::vector<float> & samples) {
    const CodecEncoderWeights & w = model_->codec_encoder;
    require_cpu_codec("the codec encoder");
    const int64_t N = static_cast<int64_t>(samples.size()), hop = w.hop_length;
    if (N < 1) fail("encode needs at least one sample");
    for (int64_t i = 0; i < N; ++i) {
        if (!std::isfinite(samples[i])) fail("encode: sample %lld is not finite", static_cast<long long>(i));
    }
    EncoderState st(w, cpu_);
    const int64_t h = w.hp.n_embd, chunk = kChunkFrames * hop, sub = hop / w.down_stride;
    std::vector<float> emb;  // [T25, h] row-major
    for (int64_t a = 0; a < N; a += chunk) {
        const int64_t n = std::min(chunk, N - a);
        const bool last = a + n == N;
        ggml_cgraph * gf = run(
            [&](ggml_context * ctx, ggml_cgraph * graph) {
                ggml_tensor * x = named(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, n), "ce.wav");
                ggml_set_input(x);
                ConvStackBuilder b{ctx, graph, w, st, last};
                return b.build(x);
            },
            [&](ggml_cgraph * graph) {
                ggml_backend_tensor_set(ggml_graph_get_tensor(graph, "ce.wav"), samples.data() + a, 0, n * sizeof(float));
            });
        std::vector<float> part = read_output(gf);
        if (!last && static_cast<int64_t>(part.size()) != h * (n / sub)) fail("codec encoder: unexpected chunk output");
        emb.insert(emb.end(), part.begin(), part.end());
    }
    const int64_t T = static_cast<int64_t>(emb.size()) / h;
    const int64_t s = w.down_stride, n_out = (T + s - 1) / s;
    // replicate padding: k - s copies of the first frame, then whole strides with the last frame
    std::vector<int32_t> pad_idx(static_cast<size_t>(s), 0);
    for (int64_t t = 0; t < n_out * s; ++t) pad_idx.push_back(static_cast<int32_t>(std::min(t, T - 1)));
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(t);
    const int64_t G = w.n_quantizers;
    ggml_cgraph * gf = run(
        [&](ggml_context * ctx, ggml_cgraph * graph) {
            ggml_tensor * e = named(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, h, T), "ce.emb");
            ggml_tensor * p = named(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T), "ce.pos");
            ggml_tensor * pi = named(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, static_cast<int64_t>(pad_idx.size())),
                                     "ce.pad_idx");
            for (ggml_tensor * t : {e, p, pi}) ggml_set_input(t);
            QuantizerBuilder b{ctx, graph, w};
            return b.build(e, p, pi, n_out);
        },
        [&](ggml_cgraph * graph) {
            ggml_backend_tensor_set(ggml_graph_get_tensor(graph, "ce.emb"), emb.data(), 0, emb.size() * sizeof(float));
            ggml_backend_tensor_set(ggml_graph_get_tensor(graph, "ce.pos"), pos.data(), 0, pos.size() * sizeof(int32_t));
            ggml_backend_tensor_set(ggml_graph_get_tensor(graph, "ce.pad_idx"), pad_idx.data(), 0,
                                    pad_idx.size() * sizeof(int32_t));
        });
    std::vector<int32_t> codes(static_cast<size_t>(n_out * G));
    std::vector<int32_t> level(static_cast<size_t>(n_out));
    for (int64_t g = 0; g < G; ++g) {
        const std::string name = "ce.codes." + std::to_string(g);
        ggml_backend_tensor_get(ggml_graph_get_tensor(gf, name.c_str()), level.data(), 0, level.size() * sizeof(int32_t));
        for (int64_t t = 0; t < n_out; ++t) codes[t * G + g] = level[t];
    }
    return codes;
}

}  // namespace qtts
