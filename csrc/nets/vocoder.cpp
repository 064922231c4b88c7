// The codec decoder graph (spec §6.1) and the Session calls that run it. Activations are
// channel-fastest (ne = [C, T]); the convolutions are conv_gemm custom ops over panel-packed
// weights, SnakeBeta a custom op that also writes the next conv's left context (ops/vocoder_ops.h).
//
// A graph decodes n frames of one segment (one reference chunk) from the segment's carried
// state and updates that state in place: each conv's last input rows are copied back, and the
// transformer's keys/values go to a per-segment cache. Attention runs over the cache padded to
// a multiple of 32 keys with the padding masked: the padded keys only add exact zeros to the
// SIMD sums, so a frame's result does not depend on how many frames share its graph.
#include "nets/vocoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/conv_gemm.h"
#include "ops/snake_beta.h"
#include "runtime/transformer.h"
#include "runtime/error.h"
#include "runtime/graph.h"
#include "runtime/session.h"

namespace qtts {

namespace {

constexpr int kDilations[3] = {1, 3, 9};
constexpr int64_t kConvNextKernel = 7, kVocKernel = 7;
constexpr float kConvNextEps = 1e-6f;
constexpr int64_t kKeyPad = 32;         // attention key padding, a multiple of ggml's F32 SIMD step
constexpr int64_t kMaxGraphFrames = 50;  // 4 s of audio per graph: bounds the compute buffer
constexpr int64_t kConvWarmup = 16;      // frames through the conv stack before the first kept one

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Rows t..t+width/C-1 of x, for every t < rows, as one [width, rows] matrix without copying:
// consecutive rows overlap. ggml_view_2d rejects views larger than dense, so patch a 1-D view
// (the CPU mul_mat reads src1 rows through nb[1]).
ggml_tensor * overlapping_rows(ggml_context * ctx, ggml_tensor * x, int64_t width, int64_t rows) {
    ggml_tensor * v = ggml_view_1d(ctx, x, width, 0);
    v->ne[1] = rows;
    v->nb[1] = x->nb[1];
    v->nb[2] = v->nb[3] = x->nb[1] * rows;
    return v;
}

struct Builder {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const CodecDecoderWeights & w;
    CodecState & st;

    // After the graph has read `left`, it receives the last rows of xp for the next graph.
    void keep(ggml_tensor * xp, ggml_tensor * left) {
        const int64_t p = left->ne[1];
        ggml_tensor * tail = ggml_view_2d(ctx, xp, xp->ne[0], p, xp->nb[1], (xp->ne[1] - p) * xp->nb[1]);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, tail, left));
    }
    ggml_tensor * with_left(ggml_tensor * x, ggml_tensor * left) {
        ggml_tensor * xp = ggml_concat(ctx, left, x, 1);
        keep(xp, left);
        return xp;
    }
    ggml_tensor * snake(ggml_tensor * x, const Snake & s, ggml_tensor * left) {
        ggml_tensor * y = snake_beta(ctx, x, s.exp_alpha, s.inv_beta, left);
        if (left) keep(y, left);
        return y;
    }

    // the transformer's linears are single-tap conv-GEMM panels
    ggml_tensor * gemm(ggml_tensor * x, ggml_tensor * wt) { return conv_gemm(ctx, x, wt, x->ne[1], nullptr, nullptr); }

    ggml_tensor * rvq(ggml_tensor * codes, int64_t n) {
        auto embd = [&](int g) {
            return ggml_get_rows(ctx, w.codebooks[g], ggml_view_1d(ctx, codes, n, g * codes->nb[1]));
        };
        ggml_tensor * rest = embd(1);
        for (int g = 2; g < w.n_quantizers; ++g) rest = ggml_add(ctx, rest, embd(g));
        return named(ggml_add(ctx, ggml_mul_mat(ctx, w.rvq_first_out, embd(0)), ggml_mul_mat(ctx, w.rvq_rest_out, rest)),
                     "cd.rvq");
    }

    ggml_tensor * attention(ggml_tensor * x, ggml_tensor * pos, ggml_tensor * mask, int il, int64_t n_kv) {
        const TransformerHParams & hp = w.hp;
        const LayerWeights & l = w.layers[il];
        const int64_t n = x->ne[1], hd = hp.head_dim, nkv = hp.n_head_kv;
        auto rope = [&](ggml_tensor * t) {
            return ggml_rope_ext(ctx, t, pos, nullptr, hd, GGML_ROPE_TYPE_NEOX, 0, hp.rope_base, 1.0f, 0.0f, 1.0f,
                                 0.0f, 0.0f);
        };
        ggml_tensor * q = rope(ggml_reshape_3d(ctx, gemm(x, l.wq), hd, hp.n_head, n));
        ggml_tensor * k = rope(ggml_reshape_3d(ctx, gemm(x, l.wk), hd, nkv, n));
        ggml_tensor * v = ggml_reshape_3d(ctx, gemm(x, l.wv), hd, nkv, n);
        const size_t es = sizeof(float), row = hd * nkv * es;
        ggml_tensor *ck = st.k[il], *cv = st.v[il];
        ggml_build_forward_expand(gf, ggml_cpy(ctx, k, ggml_view_3d(ctx, ck, hd, nkv, n, hd * es, row, st.n_past * row)));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, v, ggml_view_3d(ctx, cv, hd, nkv, n, hd * es, row, st.n_past * row)));
        ggml_tensor * K = ggml_view_3d(ctx, ck, hd, n_kv, nkv, row, hd * es, 0);
        ggml_tensor * V = ggml_view_3d(ctx, cv, hd, n_kv, nkv, row, hd * es, 0);
        ggml_tensor * kq = ggml_mul_mat(ctx, K, ggml_permute(ctx, q, 0, 2, 1, 3));  // [n_kv, n, n_head]
        kq = ggml_soft_max_ext(ctx, kq, mask, 1.0f / std::sqrt(static_cast<float>(hd)), 0.0f);
        ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, V, 1, 0, 2, 3));  // [n_kv, hd, nkv]
        ggml_tensor * o = ggml_permute(ctx, ggml_mul_mat(ctx, vt, kq), 0, 2, 1, 3);
        return gemm(ggml_cont_2d(ctx, o, hd * hp.n_head, n), l.wo);
    }

    ggml_tensor * transformer(ggml_tensor * x, ggml_tensor * pos, ggml_tensor * mask, int64_t n_kv) {
        const float eps = w.hp.eps;
        x = linear(ctx, x, w.tfm_in, w.tfm_in_b);
        for (int il = 0; il < static_cast<int>(w.layers.size()); ++il) {
            const LayerWeights & l = w.layers[il];
            ggml_tensor * a = attention(rms_norm(ctx, x, l.attn_norm, eps), pos, mask, il, n_kv);
            x = named(ggml_add(ctx, x, ggml_mul(ctx, a, l.attn_scale)), "cd.tfm.%d.attn_res", il);
            ggml_tensor * h = rms_norm(ctx, x, l.ffn_norm, eps);
            h = gemm(ggml_swiglu_split(ctx, gemm(h, l.ffn_gate), gemm(h, l.ffn_up)), l.ffn_down);
            x = named(ggml_add(ctx, x, ggml_mul(ctx, h, l.ffn_scale)), "cd.tfm.%d.out", il);
        }
        return named(linear(ctx, rms_norm(ctx, x, w.tfm_norm, eps), w.tfm_out, w.tfm_out_b), "cd.tfm");
    }

    // Causal ConvTranspose with kernel = stride: one GEMM whose tap-major outputs are the frames.
    ggml_tensor * upsample(ggml_tensor * x, int i) {
        const CodecDecoderWeights::Upsample & u = w.upsample[i];
        const int64_t C = w.latent_dim, n = x->ne[1] * w.upsampling_ratios[i];
        x = ggml_add(ctx, ggml_reshape_2d(ctx, conv_gemm(ctx, x, u.conv, x->ne[1], nullptr, nullptr), C, n), u.conv_b);
        // ConvNeXt: causal depthwise k7 as a sum of shifted rows, then LayerNorm over channels
        ggml_tensor * xp = with_left(x, st.up[i]);
        ggml_tensor * h = nullptr;
        for (int64_t k = 0; k < kConvNextKernel; ++k) {
            ggml_tensor * tap = ggml_mul(ctx, ggml_view_2d(ctx, xp, C, n, xp->nb[1], k * xp->nb[1]),
                                         ggml_view_1d(ctx, u.dwconv, C, k * u.dwconv->nb[1]));
            h = h ? ggml_add(ctx, h, tap) : tap;
        }
        h = ggml_add(ctx, h, u.dwconv_b);
        h = ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, h, kConvNextEps), u.norm), u.norm_b);
        h = conv_gemm(ctx, ggml_gelu_erf(ctx, conv_gemm(ctx, h, u.pw1, n, u.pw1_b, nullptr)), u.pw2, n, u.pw2_b, nullptr);
        return named(ggml_add(ctx, x, ggml_mul(ctx, h, u.gamma)), "cd.up%d", i);
    }

    // SnakeBeta, causal ConvTranspose (kernel 2r, stride r, r trimmed on the right) as one GEMM
    // over the frames and their predecessor plus an add of the two halves, 3 residual units.
    ggml_tensor * voc_block(ggml_tensor * x, int b) {
        const CodecDecoderWeights::VocBlock & blk = w.voc[b];
        const int64_t n = x->ne[1], r = w.upsample_rates[b], C = w.decoder_dim >> (b + 1);
        ggml_tensor * y = conv_gemm(ctx, snake(x, blk.snake, st.blocks[b].up), blk.up, n + 1, nullptr, nullptr);
        const size_t cb = C * sizeof(float);
        ggml_tensor * cur = ggml_view_3d(ctx, y, C, r, n, cb, y->nb[1], y->nb[1]);  // taps 0..r-1 of frame t
        ggml_tensor * prev = ggml_view_3d(ctx, y, C, r, n, cb, y->nb[1], r * cb);   // taps r..2r-1 of frame t-1
        x = ggml_add(ctx, ggml_reshape_2d(ctx, ggml_add(ctx, cur, prev), C, r * n), blk.up_b);
        for (int j = 0; j < 3; ++j) {
            const CodecDecoderWeights::Residual & u = blk.res[j];
            ggml_tensor * h = conv_gemm(ctx, snake(x, u.snake1, st.blocks[b].res[j]), u.conv1, r * n, u.conv1_b, nullptr);
            // the block's output is "cd.blk<b>.res2"
            x = named(conv_gemm(ctx, snake(h, u.snake2, nullptr), u.conv2, r * n, u.conv2_b, x), "cd.blk%d.res%d", b, j);
        }
        return x;
    }

    // full = false stops after the transformer: it only advances the segment's state (the
    // transformer's keys/values and the pre-conv context) for frames whose audio is not needed.
    ggml_tensor * build(int64_t n, int64_t n_kv, bool full) {
        ggml_tensor * codes = named(ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n, w.n_quantizers), "cd.codes");
        ggml_tensor * pos = named(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), "cd.pos");
        ggml_tensor * mask = named(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_kv, n), "cd.mask");
        for (ggml_tensor * t : {codes, pos, mask}) ggml_set_input(t);

        ggml_tensor * x = with_left(rvq(codes, n), st.pre_conv);
        x = named(conv_gemm(ctx, x, w.pre_conv, n, w.pre_conv_b, nullptr), "cd.pre_conv");
        x = transformer(x, pos, mask, n_kv);
        if (!full) return x;
        for (int i = 0; i < static_cast<int>(w.upsample.size()); ++i) x = upsample(x, i);
        x = named(conv_gemm(ctx, with_left(x, st.voc_in), w.voc_in, x->ne[1], w.voc_in_b, nullptr), "cd.voc_in");
        for (int b = 0; b < static_cast<int>(w.voc.size()); ++b) x = voc_block(x, b);
        // 1 output channel: ggml's mul_mat over overlapping rows beats a one-lane GEMM panel
        const int64_t L = x->ne[1], C = x->ne[0];
        ggml_tensor * s = snake(x, w.out_snake, st.out);
        ggml_tensor * wav = ggml_mul_mat(ctx, ggml_reshape_2d(ctx, w.out_conv, kVocKernel * C, 1),
                                         overlapping_rows(ctx, s, kVocKernel * C, L));
        return named(ggml_clamp(ctx, ggml_add(ctx, wav, w.out_conv_b), -1.0f, 1.0f), "cd.wav");
    }
};

void check_codes(const CodecDecoderWeights & w, const std::vector<int32_t> & codes, int64_t n) {
    const int64_t g = w.n_quantizers;
    if (n < 0 || static_cast<int64_t>(codes.size()) != n * g) {
        fail("codes must have shape [n, %lld], got %zu values for %lld frames", static_cast<long long>(g), codes.size(),
             static_cast<long long>(n));
    }
    for (size_t i = 0; i < codes.size(); ++i) {
        if (codes[i] < 0 || codes[i] >= w.codebook_size) {
            fail("code %d at frame %lld, codebook %lld is outside [0, %d)", codes[i], static_cast<long long>(i / g),
                 static_cast<long long>(i % g), w.codebook_size);
        }
    }
}

}  // namespace

CodecState::CodecState(const CodecDecoderWeights & w, ggml_backend_t backend) {
    const size_t n_tensors = 4 + 2 * w.layers.size() + w.upsample.size() + 4 * w.voc.size();
    ggml_init_params ip = {ggml_tensor_overhead() * n_tensors, nullptr, /*no_alloc=*/true};
    ctx_ = ggml_init(ip);
    if (!ctx_) fail("could not create the codec state context");
    n_ctx = round_up(kCodecChunk + kCodecContext, kKeyPad);
    const TransformerHParams & hp = w.hp;
    auto f32 = [&](int64_t a, int64_t b) { return ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, a, b); };
    pre_conv = f32(w.codebook_dim, 2);
    for (size_t il = 0; il < w.layers.size(); ++il) {
        k.push_back(ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, hp.head_dim, hp.n_head_kv, n_ctx));
        v.push_back(ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, hp.head_dim, hp.n_head_kv, n_ctx));
    }
    for (size_t i = 0; i < w.upsample.size(); ++i) up.push_back(f32(w.latent_dim, kConvNextKernel - 1));
    voc_in = f32(w.latent_dim, kVocKernel - 1);
    for (size_t b = 0; b < w.voc.size(); ++b) {
        Block blk;
        blk.up = f32(w.decoder_dim >> b, 1);
        for (int d : kDilations) blk.res.push_back(f32(w.decoder_dim >> (b + 1), (kVocKernel - 1) * d));
        blocks.push_back(blk);
    }
    out = f32(w.decoder_dim >> w.voc.size(), kVocKernel - 1);
    buf_ = ggml_backend_alloc_ctx_tensors(ctx_, backend);
    if (!buf_) {
        ggml_free(ctx_);
        fail("could not allocate the codec decoder state");
    }
    reset();
}

CodecState::~CodecState() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
}

void CodecState::reset() {
    // zeros are the causal padding, and keep the masked cache rows finite
    ggml_backend_buffer_clear(buf_, 0);
    n_past = 0;
}

std::vector<float> Session::codec_run(CodecState & st, const int32_t * codes, int64_t n,
                                      const std::vector<std::string> & stages, std::vector<CodecStage> * got,
                                      bool full) {
    const CodecDecoderWeights & w = model_->codec_decoder;
    const int64_t g = w.n_quantizers, n_kv = round_up(st.n_past + n, kKeyPad);
    if (n_kv > st.n_ctx) fail("codec decoder: segment of %lld frames exceeds its cache", static_cast<long long>(st.n_past + n));
    ggml_cgraph * gf = run(
        [&](ggml_context * ctx, ggml_cgraph * graph) {
            Builder b{ctx, graph, w, st};
            ggml_tensor * out = b.build(n, n_kv, full);
            for (const std::string & s : stages) {
                ggml_tensor * t = ggml_get_tensor(ctx, s.c_str());
                if (!t) fail("the codec decoder graph has no stage '%s'", s.c_str());
                ggml_set_output(t);
            }
            return out;
        },
        [&](ggml_cgraph * graph) {
            std::vector<int32_t> ids(static_cast<size_t>(n * g)), pos(static_cast<size_t>(n));
            for (int64_t t = 0; t < n; ++t) {
                for (int64_t q = 0; q < g; ++q) ids[q * n + t] = codes[t * g + q];
                pos[t] = static_cast<int32_t>(st.n_past + t);
            }
            // query t (position p) sees keys p-window+1..p of its segment
            std::vector<float> mask(static_cast<size_t>(n * n_kv), -INFINITY);
            for (int64_t t = 0; t < n; ++t) {
                const int64_t p = st.n_past + t;
                for (int64_t j = std::max<int64_t>(0, p - w.sliding_window + 1); j <= p; ++j) mask[t * n_kv + j] = 0.0f;
            }
            ggml_backend_tensor_set(ggml_graph_get_tensor(graph, "cd.codes"), ids.data(), 0, ids.size() * sizeof(int32_t));
            ggml_backend_tensor_set(ggml_graph_get_tensor(graph, "cd.pos"), pos.data(), 0, pos.size() * sizeof(int32_t));
            ggml_backend_tensor_set(ggml_graph_get_tensor(graph, "cd.mask"), mask.data(), 0, mask.size() * sizeof(float));
        });
    st.n_past += n;
    if (got) {
        for (const std::string & s : stages) {
            got->push_back({ggml_graph_get_tensor(gf, s.c_str())->ne[0], read_tensor(gf, s.c_str())});
        }
    }
    return read_output(gf);
}

// Frames [f0, f0+n) of a stream: each chunk c (frames 300c.. 300c+299) is decoded by its own
// segment, fed from 25 frames earlier (c > 0) to warm it up, whose samples are dropped, as are
// those of frames before s.silent_until. Frames whose samples are dropped and that lie more than
// kConvWarmup frames before the first kept one only run up to the transformer: the conv stack
// after it forgets its input within a few frames (about 10 by its kernel sizes and rates), so
// its state at the first kept frame is bit-identical either way.
void Session::codec_push(CodecStream & s, const int32_t * codes, int64_t n, std::vector<float> & out) {
    require_cpu_codec("the codec decoder");
    const CodecDecoderWeights & w = model_->codec_decoder;
    const int64_t g = w.n_quantizers, hop = w.hop_length, f0 = s.n_frames, f1 = f0 + n;
    for (int64_t c = f0 / kCodecChunk;; ++c) {
        const int64_t emit = std::max(c * kCodecChunk, s.silent_until), end = c * kCodecChunk + kCodecChunk;
        const int64_t start = c * kCodecChunk - std::min(c * kCodecChunk, kCodecContext);
        if (start >= f1) break;
        const int slot = static_cast<int>(c % 2);
        if (s.chunk[slot] != c) {
            if (!s.slot[slot]) s.slot[slot] = std::make_unique<CodecState>(w, cpu_);
            s.slot[slot]->reset();
            s.chunk[slot] = c;
        }
        const int64_t warm = std::max(start, emit - kConvWarmup);  // first frame through the whole decoder
        for (int64_t a = std::max(f0, start), b_end = std::min(f1, end); a < b_end;) {
            const bool full = a >= warm;
            const int64_t m = std::min(kMaxGraphFrames, (full ? b_end : std::min(b_end, warm)) - a);
            std::vector<float> wav = codec_run(*s.slot[slot], codes + (a - f0) * g, m, {}, nullptr, full);
            const int64_t skip = std::max<int64_t>(0, emit - a);
            if (full && skip < m) out.insert(out.end(), wav.begin() + skip * hop, wav.end());
            a += m;
        }
    }
    s.n_frames = f1;
}

// The codecs' custom ops run on the CPU threadpool and read their weights and state from host
// memory (the loader keeps those weights there on any device).
void Session::require_cpu_codec(const char * what) const {
    if (!ggml_backend_buffer_is_host(model_->codec_decoder.pre_conv->buffer)) {
        fail("%s needs its weights in host memory, which this model's device did not allow", what);
    }
}

std::vector<float> Session::decode(const std::vector<int32_t> & codes, int64_t n) {
    check_codes(model_->codec_decoder, codes, n);
    if (n < 1) fail("decode needs at least one frame");
    CodecStream s;
    std::vector<float> out;
    codec_push(s, codes.data(), n, out);
    return out;
}

void Session::decode_stream_reset(int64_t silent_frames) {
    if (silent_frames < 0) fail("decode_stream_reset: silent_frames must be >= 0");
    codec_stream_.n_frames = 0;
    codec_stream_.silent_until = silent_frames;
    codec_stream_.chunk[0] = codec_stream_.chunk[1] = -1;
}

std::vector<float> Session::decode_stream_push(const std::vector<int32_t> & codes, int64_t n) {
    check_codes(model_->codec_decoder, codes, n);
    std::vector<float> out;
    codec_push(codec_stream_, codes.data(), n, out);
    return out;
}

std::vector<CodecStage> Session::decode_stages(const std::vector<int32_t> & codes, int64_t n,
                                               const std::vector<std::string> & stages) {
    check_codes(model_->codec_decoder, codes, n);
    if (n < 1 || n > kCodecChunk) fail("decode_stages takes 1 to %lld frames", static_cast<long long>(kCodecChunk));
    require_cpu_codec("the codec decoder");
    CodecState st(model_->codec_decoder, cpu_);
    std::vector<CodecStage> got;
    codec_run(st, codes.data(), n, stages, &got, true);
    return got;
}

}  // namespace qtts
