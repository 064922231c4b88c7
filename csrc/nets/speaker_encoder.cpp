// The speaker encoder's graph (docs/model.md, "Speaker encoder"). Activations are channel-fastest (ne = [C, T]);
// the time-distributed convolutions (ops/conv_gemm.h on the native path) run over reflect-padded
// inputs built with one get_rows each; they and the statistics over time (ops/time_stats.h) come
// from CodecOps, which picks the native or the portable form (runtime/codec_ops.h).
#include "nets/speaker_encoder.h"

#include <string>
#include <vector>

#include "runtime/codec_ops.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/graph.h"
#include "runtime/loader.h"
#include "runtime/names.h"

namespace qtts {

void load_speaker_encoder(GgufFile & f, int talker_width, SpeakerEncoder & s) {
    s.embd = f.count(kv::SPK_EMBEDDING_LENGTH, 1, kMaxWidth);
    if (s.embd != talker_width) {
        f.key_error(kv::SPK_EMBEDDING_LENGTH, format("= %d differs from the talker width %d", s.embd, talker_width));
    }
    s.mel_dim = f.count(kv::SPK_MEL_DIM, 1, 1024);
    constexpr int n_convs = kSpeakerBlocks + 2, mfa = kSpeakerBlocks + 1;
    s.channels = f.counts(kv::SPK_CHANNELS, n_convs, n_convs, 1, kMaxWidth);
    s.kernel_sizes = f.counts(kv::SPK_KERNEL_SIZES, n_convs, n_convs, 1, kMaxKernel);
    s.dilations = f.counts(kv::SPK_DILATIONS, n_convs, n_convs, 1, kMaxKernel);
    s.attn_channels = f.count(kv::SPK_ATTENTION_CHANNELS, 1, kMaxWidth);
    s.res2net_scale = f.count(kv::SPK_RES2NET_SCALE, 2, kMaxGroups);
    s.se_channels = f.count(kv::SPK_SE_CHANNELS, 1, kMaxWidth);
    s.sample_rate = f.count(kv::SPK_SAMPLE_RATE, kMinRate, kMaxRate);
    const auto & c = s.channels;
    int blocks_out = 0;  // the MFA concatenates the blocks' outputs
    for (int b = 1; b <= kSpeakerBlocks; ++b) blocks_out += c[b];
    if (c[mfa] != blocks_out) {
        f.key_error(kv::SPK_CHANNELS, format("must end with the sum of channels 1 to %d", kSpeakerBlocks));
    }
    // "same" convolutions pad (k - 1) * d / 2 on each side: an even kernel would shorten the output
    for (int k : s.kernel_sizes) {
        if (k % 2 == 0) f.key_error(kv::SPK_KERNEL_SIZES, format("holds the even kernel size %d", k));
    }
    const int64_t mel = s.mel_dim, ks0 = s.kernel_sizes[0];
    s.conv0 = load_panels(f, tn::SPK_CONV0, ks0, mel, c[0]);
    s.conv0_b = f.tensor(tn::SPK_CONV0_B, {c[0]}, WeightKind::F32);
    for (int b = 1; b <= kSpeakerBlocks; ++b) {
        if (c[b] % s.res2net_scale != 0) {
            f.key_error(kv::SPK_CHANNELS, format("element %d = %d is not divisible by '%s' = %d", b, c[b],
                                                 kv::SPK_RES2NET_SCALE, s.res2net_scale));
        }
        SpeakerEncoder::Block blk;
        const int64_t in = c[b - 1], out = c[b], sub = c[b] / s.res2net_scale, k = s.kernel_sizes[b];
        blk.tdnn1 = load_panels(f, format(tn::SPK_TDNN1, b), 1, in, out);
        blk.tdnn1_b = f.tensor(format(tn::SPK_TDNN1_B, b), {out}, WeightKind::F32);
        for (int r = 0; r + 1 < s.res2net_scale; ++r) {
            blk.res2net.push_back(load_panels(f, format(tn::SPK_RES2NET, b, r), k, sub, sub));
            blk.res2net_b.push_back(f.tensor(format(tn::SPK_RES2NET_B, b, r), {sub}, WeightKind::F32));
        }
        blk.tdnn2 = load_panels(f, format(tn::SPK_TDNN2, b), 1, out, out);
        blk.tdnn2_b = f.tensor(format(tn::SPK_TDNN2_B, b), {out}, WeightKind::F32);
        blk.se1 = f.tensor(format(tn::SPK_SE1, b), {out, s.se_channels}, WeightKind::F32);
        blk.se1_b = f.tensor(format(tn::SPK_SE1_B, b), {s.se_channels}, WeightKind::F32);
        blk.se2 = f.tensor(format(tn::SPK_SE2, b), {s.se_channels, out}, WeightKind::F32);
        blk.se2_b = f.tensor(format(tn::SPK_SE2_B, b), {out}, WeightKind::F32);
        s.blocks.push_back(std::move(blk));
    }
    const int64_t cm = c[mfa];
    s.mfa = load_panels(f, tn::SPK_MFA, 1, cm, cm);
    s.mfa_b = f.tensor(tn::SPK_MFA_B, {cm}, WeightKind::F32);
    s.asp_tdnn = load_panels(f, tn::SPK_ASP_TDNN, 1, cm, s.attn_channels);
    s.asp_tdnn_stats = f.tensor(tn::SPK_ASP_TDNN_STATS, {2 * cm, s.attn_channels}, WeightKind::F32);
    s.asp_tdnn_b = f.tensor(tn::SPK_ASP_TDNN_B, {s.attn_channels}, WeightKind::F32);
    s.asp_conv = load_panels(f, tn::SPK_ASP_CONV, 1, s.attn_channels, cm);
    s.asp_conv_b = f.tensor(tn::SPK_ASP_CONV_B, {cm}, WeightKind::F32);
    s.fc = f.tensor(tn::SPK_FC, {2 * cm, s.embd}, WeightKind::F32);
    s.fc_b = f.tensor(tn::SPK_FC_B, {s.embd}, WeightKind::F32);
}

void speaker_encoder_convs(const SpeakerEncoder & s, std::vector<PanelConv> & out) {
    for (const ggml_tensor * t : {s.conv0, s.mfa, s.asp_tdnn, s.asp_conv}) out.push_back({t, 1});
    for (const SpeakerEncoder::Block & b : s.blocks) {
        out.push_back({b.tdnn1, 1});
        out.push_back({b.tdnn2, 1});
        for (const ggml_tensor * t : b.res2net) out.push_back({t, 1});
    }
}

namespace {

struct SpeakerBuilder {
    ggml_context * ctx;
    const SpeakerEncoder & w;
    CodecOps ops;
    int64_t T;
    std::vector<int> pads;  // reflect pads used, one index input per pad ("se.reflect.<p>")

    // Reflect "same" padding of p frames on both sides: rows p..1, 0..T-1, T-2..T-1-p.
    ggml_tensor * reflect(ggml_tensor * x, int p) {
        if (p == 0) return x;
        std::string name = "se.reflect." + std::to_string(p);
        ggml_tensor * idx = ggml_get_tensor(ctx, name.c_str());
        if (!idx) {
            idx = named(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T + 2 * p), "%s", name.c_str());
            ggml_set_input(idx);
            pads.push_back(p);
        }
        return ggml_get_rows(ctx, rows_operand(ctx, x), idx);  // x: a Res2Net split, a view at an offset
    }

    ggml_tensor * conv(ggml_tensor * x, ggml_tensor * wt, ggml_tensor * b, int k, int d) {
        return ggml_relu(ctx, ops.conv(reflect(x, (k - 1) * d / 2), wt, T, b, nullptr));
    }

    ggml_tensor * block(ggml_tensor * x, int b) {
        const SpeakerEncoder::Block & blk = w.blocks[b - 1];
        const int k = w.kernel_sizes[b], d = w.dilations[b], scale = w.res2net_scale;
        // Res2Net: chunk i (i >= 1) is replaced in place by its conv output, so u ends up holding the
        // concatenation; chunk i is read (into chunk i+1's input) before it is overwritten
        ggml_tensor * u = conv(x, blk.tdnn1, blk.tdnn1_b, 1, 1);
        const int64_t sub = u->ne[0] / scale;
        ggml_tensor * cat = ops.portable ? ggml_view_2d(ctx, u, sub, T, u->nb[1], 0) : u;
        ggml_tensor * y = nullptr;
        for (int i = 1; i < scale; ++i) {
            ggml_tensor * c = ggml_view_2d(ctx, u, sub, T, u->nb[1], i * sub * sizeof(float));
            y = conv(i == 1 ? c : ggml_add(ctx, c, y), blk.res2net[i - 1], blk.res2net_b[i - 1], k, d);
            // not every GPU backend has ggml_set: the portable graph concatenates
            cat = ops.portable ? ggml_concat(ctx, cat, y, 0)
                               : ggml_set_2d_inplace(ctx, cat, y, u->nb[1], i * sub * sizeof(float));
        }
        ggml_tensor * v = conv(cat, blk.tdnn2, blk.tdnn2_b, 1, 1);
        // squeeze-excitation: channel gates from the time average
        ggml_tensor * mean = ggml_view_2d(ctx, ops.time_stats(v, nullptr), v->ne[0], 1, v->nb[1], 0);
        ggml_tensor * s = ggml_relu(ctx, linear(ctx, mean, blk.se1, blk.se1_b));
        s = ggml_sigmoid(ctx, linear(ctx, s, blk.se2, blk.se2_b));
        return named(ggml_add(ctx, ggml_mul(ctx, v, s), x), "se.block%d", b);
    }

    ggml_tensor * build(ggml_tensor * mel) {
        ggml_tensor * x = named(conv(mel, w.conv0, w.conv0_b, w.kernel_sizes[0], w.dilations[0]), "se.block0");
        ggml_tensor * cat = nullptr;
        for (int b = 1; b <= kSpeakerBlocks; ++b) {
            x = block(x, b);
            cat = cat ? ggml_concat(ctx, cat, x, 0) : x;
        }
        x = named(conv(cat, w.mfa, w.mfa_b, 1, 1), "se.mfa");
        // attentive statistics pooling; the attention TDNN's input [x; mean; std] splits into x and
        // the time-constant statistics, which add one column
        const int64_t C = x->ne[0];
        ggml_tensor * stats = ggml_reshape_2d(ctx, ops.time_stats(x, nullptr), 2 * C, 1);
        ggml_tensor * col = linear(ctx, stats, w.asp_tdnn_stats, w.asp_tdnn_b);
        ggml_tensor * a =
            ggml_tanh(ctx, ggml_relu(ctx, ggml_add(ctx, ops.conv(x, w.asp_tdnn, T, nullptr, nullptr), col)));
        a = named(ops.conv(a, w.asp_conv, T, w.asp_conv_b, nullptr), "se.asp_logits");
        ggml_tensor * pooled = named(ggml_reshape_2d(ctx, ops.time_stats(x, a), 2 * C, 1), "se.pooled");
        return named(linear(ctx, pooled, w.fc, w.fc_b), "se.xvector");
    }
};

}  // namespace

std::vector<float> speaker_embed(const SpeakerEncoder & w, const CodecRunner & r, const std::vector<float> & mel,
                                 int64_t n_frames) {
    require_host_weights(w.conv0, !r.portable, "the speaker encoder");
    int max_pad = 0;
    for (size_t i = 0; i < w.kernel_sizes.size(); ++i)
        max_pad = std::max(max_pad, (w.kernel_sizes[i] - 1) * w.dilations[i] / 2);
    if (n_frames <= max_pad) {
        fail("speaker encoder: %lld mel frames are too few; the reflect padding needs more than %d (use a longer "
             "reference clip)",
             static_cast<long long>(n_frames), max_pad);
    }
    if (static_cast<int64_t>(mel.size()) != n_frames * w.mel_dim) {
        fail("speaker encoder: mel must have shape [frames, %d], got %zu values for %lld frames", w.mel_dim, mel.size(),
             static_cast<long long>(n_frames));
    }
    std::vector<int> pads;
    ggml_cgraph * gf = r.run(
        [&](ggml_context * ctx, ggml_cgraph *) {
            ggml_tensor * x = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w.mel_dim, n_frames), "se.mel");
            SpeakerBuilder b{ctx, w, r.ops(ctx), n_frames, {}};
            ggml_tensor * out = b.build(x);
            pads = b.pads;
            return out;
        },
        [&](ggml_cgraph * graph) {
            set_input(graph, "se.mel", mel);
            for (int p : pads) {
                std::vector<int32_t> idx;
                for (int64_t i = p; i >= 1; --i) idx.push_back(static_cast<int32_t>(i));
                for (int64_t i = 0; i < n_frames; ++i) idx.push_back(static_cast<int32_t>(i));
                for (int64_t i = n_frames - 2; i >= n_frames - 1 - p; --i) idx.push_back(static_cast<int32_t>(i));
                std::string name = "se.reflect." + std::to_string(p);
                set_input(graph, name.c_str(), idx);
            }
        });
    return read_output(gf);
}

}  // namespace qtts
