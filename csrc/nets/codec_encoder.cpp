// The codec encoder's loader and graphs (docs/model.md, "Codec encoder"): waveform -> codes
// [ceil(N / hop), n_quantizers].
//
// The SEANet conv stack is causal, so it runs over chunks of whole 12.5 Hz frames with each
// conv's left context carried between chunks (memory stays bounded for long clips); only the
// last chunk gets the reference's per-conv "extra" right padding. The 25 Hz embeddings then go
// through one graph: the full-causal transformer, the replicate-padded ×2 downsample and the
// split RVQ (semantic and acoustic both quantise the same embedding).
//
// Activations are channel-fastest (ne = [C, T]). A stride-s conv with kernel k reads, for
// output t, rows t*s .. t*s+k-1 of its padded input: one contiguous run of k*C floats, so on the
// native path it is a single-tap conv-GEMM over overlapping rows (the panel layout of k taps
// equals that of one tap over k*C channels); the portable path reads the input as groups of s
// rows (runtime/codec_ops.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nets/codec_encoder.h"

#include "runtime/codec_ops.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/loader.h"
#include "runtime/names.h"

namespace qtts {

void load_codec_encoder(GgufFile & f, CodecEncoder & e) {
    e.tfm = load_transformer(f, kv::P_CODEC_ENC, tn::CODEC_ENC, /*has_context=*/false, LayerStyle::CODEC_ENCODER);
    e.n_filters = f.count(kv::ENC_NUM_FILTERS, 1, 4096);
    e.kernel_size = f.count(kv::ENC_KERNEL_SIZE, 1, kMaxKernel);
    e.last_kernel_size = f.count(kv::ENC_LAST_KERNEL_SIZE, 1, kMaxKernel);
    e.residual_kernel_size = f.count(kv::ENC_RESIDUAL_KERNEL_SIZE, 1, kMaxKernel);
    e.dilation_growth_rate = f.count(kv::ENC_DILATION_GROWTH_RATE, 1, 16);
    // the residual blocks narrow the channels by this factor: at least one must remain
    e.compress = f.count(kv::ENC_COMPRESS, 1, e.n_filters);
    e.codebook_size = f.count(kv::ENC_CODEBOOK_SIZE, 1, kMaxVocab);
    e.codebook_dim = f.count(kv::ENC_CODEBOOK_DIM, 1, kMaxWidth);
    e.n_quantizers = f.count(kv::ENC_NUM_QUANTIZERS, 2, kMaxGroups);
    e.sample_rate = f.count(kv::ENC_SAMPLE_RATE, kMinRate, kMaxRate);
    e.hop_length = f.count(kv::ENC_HOP_LENGTH, 1, 1 << 16);
    // the channels double per ratio: at most 8 ratios keep n_filters << 8 within the width bound
    std::vector<int> ups = f.counts(kv::ENC_UPSAMPLING_RATIOS, 1, 8, 1, kMaxKernel);
    e.ratios.assign(ups.rbegin(), ups.rend());
    const int64_t prod = product(e.ratios);
    if (prod <= 0 || e.hop_length % prod != 0) {
        f.key_error(kv::ENC_HOP_LENGTH,
                    format("= %d is not a multiple of the product of '%s'", e.hop_length, kv::ENC_UPSAMPLING_RATIOS));
    }
    e.down_stride = static_cast<int>(e.hop_length / prod);
    // SEANet: conv, then per ratio [residual, ELU, strided conv], then ELU and the last conv.
    int layer = 0;
    int64_t ch = e.n_filters;
    auto conv = [&](int64_t in, int64_t out, int k, int stride) {
        CodecEncoder::Conv c{layer, static_cast<int>(in), static_cast<int>(out), k, stride};
        c.w = load_panels(f, format(tn::ENC_CONV, layer), k, in, out);
        c.b = f.tensor(format(tn::ENC_CONV_B, layer), {out}, WeightKind::F32);
        e.convs.push_back(c);
        ++layer;
    };
    conv(1, ch, e.kernel_size, 1);
    for (int r : e.ratios) {
        CodecEncoder::Residual res;
        res.layer = layer;
        const int64_t hidden = ch / e.compress;
        res.conv1 = load_panels(f, format(tn::ENC_RES_CONV1, layer), e.residual_kernel_size, ch, hidden);
        res.conv1_b = f.tensor(format(tn::ENC_RES_CONV1_B, layer), {hidden}, WeightKind::F32);
        res.conv2 = load_panels(f, format(tn::ENC_RES_CONV2, layer), 1, hidden, ch);
        res.conv2_b = f.tensor(format(tn::ENC_RES_CONV2_B, layer), {ch}, WeightKind::F32);
        e.res.push_back(res);
        layer += 2;  // the residual block and the ELU after it
        conv(ch, 2 * ch, 2 * r, r);
        ch *= 2;
    }
    ++layer;  // ELU
    const int64_t h = e.tfm.hp.n_embd;
    conv(ch, h, e.last_kernel_size, 1);
    e.downsample = load_panels(f, tn::ENC_DOWNSAMPLE, 2 * e.down_stride, h, h);
    const int64_t cbd = e.codebook_dim;
    e.sem_in = f.tensor(tn::ENC_SEM_IN, {h, cbd}, WeightKind::F32);
    e.acu_in = f.tensor(tn::ENC_ACU_IN, {h, cbd}, WeightKind::F32);
    e.sem_codebooks.push_back(f.tensor(format(tn::ENC_SEM_CODEBOOK, 0), {cbd, e.codebook_size}, WeightKind::F32));
    for (int g = 0; g + 1 < e.n_quantizers; ++g) {
        e.acu_codebooks.push_back(f.tensor(format(tn::ENC_ACU_CODEBOOK, g), {cbd, e.codebook_size}, WeightKind::F32));
    }
}

void codec_encoder_convs(const CodecEncoder & e, std::vector<PanelConv> & out) {
    for (const CodecEncoder::Conv & c : e.convs) out.push_back({c.w, c.stride});
    // the transformer's linear layers are single-tap panels too (StackOptions::portable)
    for (const TransformerLayer & l : e.tfm.layers) {
        for (const ggml_tensor * t : layer_matrices(l)) out.push_back({t, 1});
    }
    for (const CodecEncoder::Residual & r : e.res) {
        out.push_back({r.conv1, 1});
        out.push_back({r.conv2, 1});
    }
    out.push_back({e.downsample, e.down_stride});
}

namespace {

constexpr int64_t kChunkFrames = 25;  // 12.5 Hz frames per conv-stack graph (2 s of audio)

int64_t left_rows(const CodecEncoder::Conv & c) { return c.kernel - c.stride; }

struct ConvStackBuilder {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const CodecEncoder & w;
    EncoderState & st;
    bool last;
    CodecOps ops;

    // A causal conv of kernel k, stride s over ELU(x) (x itself for the waveform), x [Cin, L]: its
    // input is [left context; ELU(x)], and in the last chunk zero rows up to a whole number of
    // strides, as the reference's extra right padding.
    ggml_tensor * conv(ggml_tensor * x, bool elu, ggml_tensor * wt, ggml_tensor * b, int64_t k, int64_t s,
                       ggml_tensor * left, ggml_tensor * res = nullptr) {
        const int64_t L = x->ne[1], pad = last && L % s != 0 ? s - L % s : 0, n = (L + pad) / s;
        ggml_tensor * xp = x;
        if (elu) {
            xp = ops.elu(x, left, pad);
        } else {
            if (pad) xp = ggml_pad(ctx, xp, 0, static_cast<int>(pad), 0, 0);
            if (left) xp = ggml_concat(ctx, left, xp, 1);
        }
        if (left) keep(ctx, gf, xp, left);
        return ops.conv(xp, wt, n, b, res, k, s);
    }

    ggml_tensor * build(ggml_tensor * x) {
        const auto & c0 = w.convs[0];
        x = named(conv(x, false, c0.w, c0.b, c0.kernel, 1, st.conv_left[0]), "ce.conv0");
        for (size_t i = 0; i < w.ratios.size(); ++i) {
            const CodecEncoder::Residual & r = w.res[i];
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
    const CodecEncoder & w;
    CodecOps ops;

    // Nearest codebook entry per column of r [D, n]: argmax of 2 r.e - |e|^2 (|r|^2 is common).
    ggml_tensor * nearest(ggml_tensor * r, ggml_tensor * cb) {
        ggml_tensor * e2 = ggml_reshape_2d(ctx, ggml_sum_rows(ctx, ggml_sqr(ctx, cb)), cb->ne[1], 1);
        ggml_tensor * score = ggml_sub(ctx, ggml_scale(ctx, mul_mat(ctx, cb, r), 2.0f), e2);
        return ggml_argmax(ctx, score);
    }

    ggml_tensor * build(ggml_tensor * emb, ggml_tensor * pos, ggml_tensor * pad_idx, int64_t n_out) {
        StackOptions o;
        o.prefix = "ce.tfm";
        o.portable = ops.portable;
        ggml_tensor * x = transformer_stack(ctx, gf, emb, pos, w.tfm, o);
        // ×2 downsample, causal with replicate padding: one GEMM over overlapping rows
        ggml_tensor * xp = ggml_get_rows(ctx, x, pad_idx);
        const int64_t k = 2 * w.down_stride;
        x = named(ops.conv(xp, w.downsample, n_out, nullptr, nullptr, k, w.down_stride), "ce.down");
        ggml_tensor * codes = nullptr;
        ggml_tensor * sem = nearest(mul_mat(ctx, w.sem_in, x), w.sem_codebooks[0]);
        codes = named(sem, "ce.codes.0");
        ggml_set_output(codes);
        ggml_tensor * r = mul_mat(ctx, w.acu_in, x);
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

EncoderState::EncoderState(const CodecEncoder & w, ggml_backend_t backend) {
    ggml_context * ctx = state_.begin(w.convs.size() + w.res.size());
    for (const auto & c : w.convs) {
        const int64_t p = left_rows(c);
        conv_left.push_back(p > 0 ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, c.in, p) : nullptr);
    }
    for (size_t i = 0; i < w.res.size(); ++i) {
        res_left.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w.convs[i].out, w.residual_kernel_size - 1));
    }
    state_.allocate(backend, "the codec encoder state");
    state_.clear();  // zeros are the causal padding
}

std::vector<int32_t> encode(const CodecEncoder & w, const CodecRunner & r, const std::vector<float> & samples) {
    require_host_weights(w.downsample, !r.portable, "the codec encoder");
    const int64_t N = static_cast<int64_t>(samples.size()), hop = w.hop_length;
    if (N < 1) fail("encode needs at least one sample");
    for (int64_t i = 0; i < N; ++i) {
        if (!std::isfinite(samples[i])) fail("encode: sample %lld is not finite", static_cast<long long>(i));
    }
    EncoderState st(w, r.state_backend);
    const int64_t h = w.tfm.hp.n_embd, chunk = kChunkFrames * hop, sub = hop / w.down_stride;
    std::vector<float> emb;  // [T25, h] row-major
    for (int64_t a = 0; a < N; a += chunk) {
        const int64_t n = std::min(chunk, N - a);
        const bool last = a + n == N;
        ggml_cgraph * gf = r.run(
            [&](ggml_context * ctx, ggml_cgraph * graph) {
                ggml_tensor * x = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, n), "ce.wav");
                ConvStackBuilder b{ctx, graph, w, st, last, r.ops(ctx)};
                return b.build(x);
            },
            [&](ggml_cgraph * graph) { set_input(graph, "ce.wav", samples.data() + a, n * sizeof(float)); });
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
    ggml_cgraph * gf = r.run(
        [&](ggml_context * ctx, ggml_cgraph * graph) {
            ggml_tensor * e = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, h, T), "ce.emb");
            ggml_tensor * p = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T), "ce.pos");
            ggml_tensor * pi =
                input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, static_cast<int64_t>(pad_idx.size())), "ce.pad_idx");
            QuantizerBuilder b{ctx, graph, w, r.ops(ctx)};
            return b.build(e, p, pi, n_out);
        },
        [&](ggml_cgraph * graph) {
            set_input(graph, "ce.emb", emb);
            set_input(graph, "ce.pos", pos);
            set_input(graph, "ce.pad_idx", pad_idx);
        });
    std::vector<int32_t> codes(static_cast<size_t>(n_out * G));
    std::vector<int32_t> level(static_cast<size_t>(n_out));
    for (int64_t g = 0; g < G; ++g) {
        const std::string name = "ce.codes." + std::to_string(g);
        ggml_backend_tensor_get(ggml_graph_get_tensor(gf, name.c_str()), level.data(), 0,
                                level.size() * sizeof(int32_t));
        for (int64_t t = 0; t < n_out; ++t) codes[t * G + g] = level[t];
    }
    return codes;
}

}  // namespace qtts
