#include "runtime/model.h"

#include <algorithm>
#include <cctype>

#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/metadata.h"
#include "runtime/names.h"

namespace qtts {

namespace {

std::string key(const char * pattern, const char * prefix) { return format(pattern, prefix); }

// Bounds on hyper-parameters: well above every released checkpoint, low enough that no value
// can size a giant allocation or overflow the int arithmetic of the graphs.
constexpr int kMaxWidth = 1 << 16, kMaxVocab = 1 << 22, kMaxLayers = 1024, kMaxHeads = 1024, kMaxKernel = 64;
constexpr int kMaxGroups = 64, kMaxRate = 192000, kMinRate = 8000;

TransformerHParams read_transformer(const GgufFile & f, const char * prefix, bool has_context) {
    TransformerHParams hp;
    const std::string heads = key(kv::T_HEAD_COUNT, prefix), kv_heads = key(kv::T_HEAD_COUNT_KV, prefix);
    const std::string head_dim = key(kv::T_KEY_LENGTH, prefix);
    hp.n_embd = f.count(key(kv::T_EMBEDDING_LENGTH, prefix).c_str(), 1, kMaxWidth);
    hp.n_ff = f.count(key(kv::T_FEED_FORWARD_LENGTH, prefix).c_str(), 1, 4 * kMaxWidth);
    hp.n_layer = f.count(key(kv::T_BLOCK_COUNT, prefix).c_str(), 1, kMaxLayers);
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
    hp.eps = f.real(key(kv::T_NORM_EPS, prefix).c_str(), 0.0f, 1.0f);
    hp.rope_base = f.real(key(kv::T_ROPE_FREQ_BASE, prefix).c_str(), 1.0f, 1e12f, /*closed=*/true);
    if (has_context) hp.n_ctx = f.count(key(kv::T_CONTEXT_LENGTH, prefix).c_str(), 1, 1 << 24);
    return hp;
}

// The product of positive factors, or -1 once it exceeds INT32_MAX (corrupt metadata).
int64_t product(const std::vector<int> & v) {
    int64_t p = 1;
    for (int x : v) {
        p *= x;
        if (p > INT32_MAX) return -1;
    }
    return p;
}

// conv-GEMM weights: k taps of `in` channels into n outputs, stored as panels [P, in, k, n/P]
ggml_tensor * panels(GgufFile & f, const std::string & name, int64_t k, int64_t in, int64_t n) {
    const int64_t p = n % 16 == 0 ? 16 : n;
    return f.tensor(name, {p, in, k, n / p}, WeightKind::F32);
}

// Transformer layer weights. Variants: q/k norms (talker, predictor); LayerScale and conv-GEMM
// panel linears (codecs); LayerNorm with bias and a plain GELU MLP (codec encoder).
enum class LayerStyle { QWEN3, CODEC_DECODER, MIMI };

std::vector<LayerWeights> load_layers(GgufFile & f, const char * net, const TransformerHParams & hp,
                                      LayerStyle style, WeightKind matmul) {
    // grown layer by layer: a corrupt, huge block_count ends at the first missing tensor, not in bad_alloc
    std::vector<LayerWeights> layers;
    const int64_t d = hp.n_embd, q = int64_t(hp.n_head) * hp.head_dim, kv = int64_t(hp.n_head_kv) * hp.head_dim;
    for (int i = 0; i < hp.n_layer; ++i) {
        auto n = [&](const char * pat) { return format(pat, net, i); };
        LayerWeights & l = layers.emplace_back();
        l.attn_norm = f.tensor(n(tn::L_ATTN_NORM), {d}, WeightKind::F32);
        auto mat = [&](const char * pat, int64_t in, int64_t out) {
            return style == LayerStyle::QWEN3 ? f.tensor(n(pat), {in, out}, matmul) : panels(f, n(pat), 1, in, out);
        };
        l.wq = mat(tn::L_ATTN_Q, d, q);
        l.wk = mat(tn::L_ATTN_K, d, kv);
        l.wv = mat(tn::L_ATTN_V, d, kv);
        l.wo = mat(tn::L_ATTN_OUT, q, d);
        l.ffn_norm = f.tensor(n(tn::L_FFN_NORM), {d}, WeightKind::F32);
        l.ffn_up = mat(tn::L_FFN_UP, d, hp.n_ff);
        l.ffn_down = mat(tn::L_FFN_DOWN, hp.n_ff, d);
        if (style == LayerStyle::QWEN3) {
            l.q_norm = f.tensor(n(tn::L_ATTN_Q_NORM), {hp.head_dim}, WeightKind::F32);
            l.k_norm = f.tensor(n(tn::L_ATTN_K_NORM), {hp.head_dim}, WeightKind::F32);
        } else {
            l.attn_scale = f.tensor(n(tn::L_ATTN_SCALE), {d}, WeightKind::F32);
            l.ffn_scale = f.tensor(n(tn::L_FFN_SCALE), {d}, WeightKind::F32);
        }
        if (style == LayerStyle::MIMI) {
            l.attn_norm_b = f.tensor(n(tn::L_ATTN_NORM_B), {d}, WeightKind::F32);
            l.ffn_norm_b = f.tensor(n(tn::L_FFN_NORM_B), {d}, WeightKind::F32);
        } else {
            l.ffn_gate = mat(tn::L_FFN_GATE, d, hp.n_ff);
        }
    }
    return layers;
}

void load_talker(GgufFile & f, TalkerWeights & t) {
    t.hp = read_transformer(f, kv::P_TALKER, true);
    t.text_vocab = f.count(kv::TALKER_TEXT_VOCAB_SIZE, 1, kMaxVocab);
    t.text_embd = f.count(kv::TALKER_TEXT_EMBEDDING_LENGTH, 1, kMaxWidth);
    t.codec_vocab = f.count(kv::TALKER_CODEC_VOCAB_SIZE, 1, kMaxVocab);
    t.n_code_groups = f.count(kv::TALKER_NUM_CODE_GROUPS, 2, kMaxGroups);
    // the sections split the rotated pairs among time, height and width: together all of them
    t.mrope_section = f.counts(kv::TALKER_MROPE_SECTION, 1, 4, 0, t.hp.head_dim / 2);
    int pairs = 0;
    for (int x : t.mrope_section) pairs += x;
    if (pairs != t.hp.head_dim / 2) {
        f.key_error(kv::TALKER_MROPE_SECTION, format("sums to %d, expected half the head dimension (%d)", pairs,
                                                     t.hp.head_dim / 2));
    }
    const int64_t d = t.hp.n_embd, te = t.text_embd;
    t.text_tok = f.tensor(tn::TALKER_TEXT_EMBD, {te, t.text_vocab}, WeightKind::TABLE);
    t.fc1 = f.tensor(tn::TALKER_TEXT_FC1, {te, te}, WeightKind::MATMUL);
    t.fc1_b = f.tensor(tn::TALKER_TEXT_FC1_B, {te}, WeightKind::F32);
    t.fc2 = f.tensor(tn::TALKER_TEXT_FC2, {te, d}, WeightKind::MATMUL);
    t.fc2_b = f.tensor(tn::TALKER_TEXT_FC2_B, {d}, WeightKind::F32);
    t.codec_embd = f.tensor(tn::TALKER_CODEC_EMBD, {d, t.codec_vocab}, WeightKind::TABLE);
    t.output_norm = f.tensor(tn::TALKER_OUTPUT_NORM, {d}, WeightKind::F32);
    t.codec_head = f.tensor(tn::TALKER_CODEC_HEAD, {d, t.codec_vocab}, WeightKind::MATMUL);
    t.layers = load_layers(f, tn::TALKER, t.hp, LayerStyle::QWEN3, WeightKind::MATMUL);
}

void load_code_predictor(GgufFile & f, const TalkerWeights & t, CodePredictorWeights & c) {
    c.hp = read_transformer(f, kv::P_CODE_PRED, true);
    c.vocab = f.count(kv::CODE_PRED_VOCAB_SIZE, 1, kMaxVocab);
    const int64_t d = t.hp.n_embd, dc = c.hp.n_embd;
    c.layers = load_layers(f, tn::CODE_PRED, c.hp, LayerStyle::QWEN3, WeightKind::MATMUL);
    c.output_norm = f.tensor(tn::CODE_PRED_OUTPUT_NORM, {dc}, WeightKind::F32);
    for (int j = 0; j + 1 < t.n_code_groups; ++j) {
        c.codec_embd.push_back(f.tensor(format(tn::CODE_PRED_CODEC_EMBD, j), {d, c.vocab}, WeightKind::TABLE));
        c.lm_head.push_back(f.tensor(format(tn::CODE_PRED_LM_HEAD, j), {dc, c.vocab}, WeightKind::MATMUL));
    }
    // 0.6B predictors are as wide as the talker (identity projection, no tensors)
    const bool proj = d != dc;
    c.mtp_proj = f.tensor(tn::CODE_PRED_MTP_PROJ, {d, dc}, WeightKind::MATMUL, proj);
    c.mtp_proj_b = f.tensor(tn::CODE_PRED_MTP_PROJ_B, {dc}, WeightKind::F32, proj);
}

void load_speaker_encoder(GgufFile & f, int talker_width, SpeakerEncoderWeights & s) {
    s.embd = f.count(kv::SPK_EMBEDDING_LENGTH, 1, kMaxWidth);
    if (s.embd != talker_width) {
        f.key_error(kv::SPK_EMBEDDING_LENGTH, format("= %d differs from the talker width %d", s.embd, talker_width));
    }
    s.mel_dim = f.count(kv::SPK_MEL_DIM, 1, 1024);
    s.channels = f.counts(kv::SPK_CHANNELS, 5, 5, 1, kMaxWidth);
    s.kernel_sizes = f.counts(kv::SPK_KERNEL_SIZES, 5, 5, 1, kMaxKernel);
    s.dilations = f.counts(kv::SPK_DILATIONS, 5, 5, 1, kMaxKernel);
    s.attn_channels = f.count(kv::SPK_ATTENTION_CHANNELS, 1, kMaxWidth);
    s.res2net_scale = f.count(kv::SPK_RES2NET_SCALE, 2, kMaxGroups);
    s.se_channels = f.count(kv::SPK_SE_CHANNELS, 1, kMaxWidth);
    s.sample_rate = f.count(kv::SPK_SAMPLE_RATE, kMinRate, kMaxRate);
    const auto & c = s.channels;
    if (c[4] != c[1] + c[2] + c[3]) f.key_error(kv::SPK_CHANNELS, "must end with the sum of channels 1 to 3");
    // "same" convolutions pad (k - 1) * d / 2 on each side: an even kernel would shorten the output
    for (int k : s.kernel_sizes) {
        if (k % 2 == 0) f.key_error(kv::SPK_KERNEL_SIZES, format("holds the even kernel size %d", k));
    }
    const int64_t mel = s.mel_dim, ks0 = s.kernel_sizes[0];
    s.conv0 = panels(f, tn::SPK_CONV0, ks0, mel, c[0]);
    s.conv0_b = f.tensor(tn::SPK_CONV0_B, {c[0]}, WeightKind::F32);
    for (int b = 1; b <= 3; ++b) {
        if (c[b] % s.res2net_scale != 0) {
            f.key_error(kv::SPK_CHANNELS, format("element %d = %d is not divisible by '%s' = %d", b, c[b],
                                                 kv::SPK_RES2NET_SCALE, s.res2net_scale));
        }
        SpeakerEncoderWeights::Block blk;
        const int64_t in = c[b - 1], out = c[b], sub = c[b] / s.res2net_scale, k = s.kernel_sizes[b];
        blk.tdnn1 = panels(f, format(tn::SPK_TDNN1, b), 1, in, out);
        blk.tdnn1_b = f.tensor(format(tn::SPK_TDNN1_B, b), {out}, WeightKind::F32);
        for (int r = 0; r + 1 < s.res2net_scale; ++r) {
            blk.res2net.push_back(panels(f, format(tn::SPK_RES2NET, b, r), k, sub, sub));
            blk.res2net_b.push_back(f.tensor(format(tn::SPK_RES2NET_B, b, r), {sub}, WeightKind::F32));
        }
        blk.tdnn2 = panels(f, format(tn::SPK_TDNN2, b), 1, out, out);
        blk.tdnn2_b = f.tensor(format(tn::SPK_TDNN2_B, b), {out}, WeightKind::F32);
        blk.se1 = f.tensor(format(tn::SPK_SE1, b), {out, s.se_channels}, WeightKind::F32);
        blk.se1_b = f.tensor(format(tn::SPK_SE1_B, b), {s.se_channels}, WeightKind::F32);
        blk.se2 = f.tensor(format(tn::SPK_SE2, b), {s.se_channels, out}, WeightKind::F32);
        blk.se2_b = f.tensor(format(tn::SPK_SE2_B, b), {out}, WeightKind::F32);
        s.blocks.push_back(std::move(blk));
    }
    const int64_t cm = c[4];
    s.mfa = panels(f, tn::SPK_MFA, 1, cm, cm);
    s.mfa_b = f.tensor(tn::SPK_MFA_B, {cm}, WeightKind::F32);
    s.asp_tdnn = panels(f, tn::SPK_ASP_TDNN, 1, cm, s.attn_channels);
    s.asp_tdnn_stats = f.tensor(tn::SPK_ASP_TDNN_STATS, {2 * cm, s.attn_channels}, WeightKind::F32);
    s.asp_tdnn_b = f.tensor(tn::SPK_ASP_TDNN_B, {s.attn_channels}, WeightKind::F32);
    s.asp_conv = panels(f, tn::SPK_ASP_CONV, 1, s.attn_channels, cm);
    s.asp_conv_b = f.tensor(tn::SPK_ASP_CONV_B, {cm}, WeightKind::F32);
    s.fc = f.tensor(tn::SPK_FC, {2 * cm, s.embd}, WeightKind::F32);
    s.fc_b = f.tensor(tn::SPK_FC_B, {s.embd}, WeightKind::F32);
}

Snake load_snake(GgufFile & f, const std::string & a, const std::string & b, int64_t ch) {
    return {f.tensor(a, {ch}, WeightKind::F32), f.tensor(b, {ch}, WeightKind::F32)};
}

void load_codec_decoder(GgufFile & f, const TalkerWeights & t, const CodePredictorWeights & cp,
                        CodecDecoderWeights & c) {
    c.hp = read_transformer(f, kv::P_CODEC_DEC, false);
    c.codebook_size = f.count(kv::DEC_CODEBOOK_SIZE, 1, kMaxVocab);
    c.codebook_dim = f.count(kv::DEC_CODEBOOK_DIM, 2, kMaxWidth);
    if (c.codebook_dim % 2 != 0) f.key_error(kv::DEC_CODEBOOK_DIM, format("= %d is odd", c.codebook_dim));
    c.latent_dim = f.count(kv::DEC_LATENT_DIM, 1, kMaxWidth);
    c.decoder_dim = f.count(kv::DEC_DECODER_DIM, 1, kMaxWidth);
    c.n_quantizers = f.count(kv::DEC_NUM_QUANTIZERS, 2, kMaxGroups);
    // generated frames come here: one code per group, each from the predictor's vocabulary
    require_same(f, kv::DEC_NUM_QUANTIZERS, c.n_quantizers, kv::TALKER_NUM_CODE_GROUPS, t.n_code_groups);
    require_same(f, kv::DEC_CODEBOOK_SIZE, c.codebook_size, kv::CODE_PRED_VOCAB_SIZE, cp.vocab);
    if (c.codebook_size > t.codec_vocab) {
        f.key_error(kv::DEC_CODEBOOK_SIZE, format("= %d exceeds '%s' = %d", c.codebook_size,
                                                  kv::TALKER_CODEC_VOCAB_SIZE, t.codec_vocab));
    }
    c.sliding_window = f.count(kv::DEC_SLIDING_WINDOW, 1, 1 << 20);
    c.sample_rate = f.count(kv::DEC_SAMPLE_RATE, kMinRate, kMaxRate);
    c.upsample_rates = f.counts(kv::DEC_UPSAMPLE_RATES, 1, 8, 1, kMaxKernel);
    c.upsampling_ratios = f.counts(kv::DEC_UPSAMPLING_RATIOS, 0, 8, 1, kMaxKernel);
    c.hop_length = f.count(kv::DEC_HOP_LENGTH, 1, 1 << 16);
    const int64_t r1 = product(c.upsample_rates), r2 = product(c.upsampling_ratios);
    if (r1 < 0 || r2 < 0 || r1 * r2 != c.hop_length) {
        f.key_error(kv::DEC_HOP_LENGTH, format("= %d is not the product of '%s' and '%s'", c.hop_length,
                                               kv::DEC_UPSAMPLE_RATES, kv::DEC_UPSAMPLING_RATIOS));
    }
    const int n_voc = static_cast<int>(c.upsample_rates.size());
    // each vocoder block halves the channels
    if (c.decoder_dim % (1 << n_voc) != 0) {
        f.key_error(kv::DEC_DECODER_DIM, format("= %d is not divisible by 2^%d (one halving per upsample rate)",
                                                c.decoder_dim, n_voc));
    }
    const int64_t half = c.codebook_dim / 2, cd = c.codebook_dim, lat = c.latent_dim, h = c.hp.n_embd;
    for (int g = 0; g < c.n_quantizers; ++g) {
        c.codebooks.push_back(f.tensor(format(tn::DEC_CODEBOOK, g), {half, c.codebook_size}, WeightKind::F32));
    }
    c.rvq_first_out = f.tensor(tn::DEC_RVQ_FIRST_OUT, {half, cd}, WeightKind::F32);
    c.rvq_rest_out = f.tensor(tn::DEC_RVQ_REST_OUT, {half, cd}, WeightKind::F32);
    auto gemm = [&](const std::string & name, int64_t k, int64_t in, int64_t n) { return panels(f, name, k, in, n); };
    c.pre_conv = gemm(tn::DEC_PRE_CONV, 3, cd, lat);
    c.pre_conv_b = f.tensor(tn::DEC_PRE_CONV_B, {lat}, WeightKind::F32);
    c.tfm_in = f.tensor(tn::DEC_TFM_IN, {lat, h}, WeightKind::F32);
    c.tfm_in_b = f.tensor(tn::DEC_TFM_IN_B, {h}, WeightKind::F32);
    c.tfm_norm = f.tensor(tn::DEC_TFM_NORM, {h}, WeightKind::F32);
    c.tfm_out = f.tensor(tn::DEC_TFM_OUT, {h, lat}, WeightKind::F32);
    c.tfm_out_b = f.tensor(tn::DEC_TFM_OUT_B, {lat}, WeightKind::F32);
    c.layers = load_layers(f, tn::CODEC_DEC, c.hp, LayerStyle::CODEC_DECODER, WeightKind::F32);
    for (size_t i = 0; i < c.upsampling_ratios.size(); ++i) {
        const int u = static_cast<int>(i);
        CodecDecoderWeights::Upsample up;
        up.conv = gemm(format(tn::DEC_UP_CONV, u), 1, lat, c.upsampling_ratios[i] * lat);
        up.conv_b = f.tensor(format(tn::DEC_UP_CONV_B, u), {lat}, WeightKind::F32);
        up.dwconv = f.tensor(format(tn::DEC_UP_DWCONV, u), {lat, 7}, WeightKind::F32);
        up.dwconv_b = f.tensor(format(tn::DEC_UP_DWCONV_B, u), {lat}, WeightKind::F32);
        up.norm = f.tensor(format(tn::DEC_UP_NORM, u), {lat}, WeightKind::F32);
        up.norm_b = f.tensor(format(tn::DEC_UP_NORM_B, u), {lat}, WeightKind::F32);
        up.pw1 = panels(f, format(tn::DEC_UP_PW1, u), 1, lat, 4 * lat);
        up.pw1_b = f.tensor(format(tn::DEC_UP_PW1_B, u), {4 * lat}, WeightKind::F32);
        up.pw2 = panels(f, format(tn::DEC_UP_PW2, u), 1, 4 * lat, lat);
        up.pw2_b = f.tensor(format(tn::DEC_UP_PW2_B, u), {lat}, WeightKind::F32);
        up.gamma = f.tensor(format(tn::DEC_UP_GAMMA, u), {lat}, WeightKind::F32);
        c.upsample.push_back(up);
    }
    const int64_t dd = c.decoder_dim;
    c.voc_in = gemm(tn::DEC_VOC_IN, 7, lat, dd);
    c.voc_in_b = f.tensor(tn::DEC_VOC_IN_B, {dd}, WeightKind::F32);
    for (int b = 0; b < n_voc; ++b) {
        const int64_t in = dd >> b, out = dd >> (b + 1), r = c.upsample_rates[b];
        CodecDecoderWeights::VocBlock blk;
        blk.snake = load_snake(f, format(tn::DEC_VOC_SNAKE_A, b), format(tn::DEC_VOC_SNAKE_B, b), in);
        blk.up = gemm(format(tn::DEC_VOC_UP, b), 1, in, 2 * r * out);
        blk.up_b = f.tensor(format(tn::DEC_VOC_UP_B, b), {out}, WeightKind::F32);
        for (int j = 0; j < 3; ++j) {
            CodecDecoderWeights::Residual res;
            res.snake1 = load_snake(f, format(tn::DEC_RES_SNAKE1_A, b, j), format(tn::DEC_RES_SNAKE1_B, b, j), out);
            res.conv1 = gemm(format(tn::DEC_RES_CONV1, b, j), 7, out, out);
            res.conv1_b = f.tensor(format(tn::DEC_RES_CONV1_B, b, j), {out}, WeightKind::F32);
            res.snake2 = load_snake(f, format(tn::DEC_RES_SNAKE2_A, b, j), format(tn::DEC_RES_SNAKE2_B, b, j), out);
            res.conv2 = gemm(format(tn::DEC_RES_CONV2, b, j), 1, out, out);
            res.conv2_b = f.tensor(format(tn::DEC_RES_CONV2_B, b, j), {out}, WeightKind::F32);
            blk.res.push_back(res);
        }
        c.voc.push_back(std::move(blk));
    }
    const int64_t last = dd >> n_voc;
    c.out_snake = load_snake(f, tn::DEC_OUT_SNAKE_A, tn::DEC_OUT_SNAKE_B, last);
    c.out_conv = gemm(tn::DEC_OUT_CONV, 7, last, 1);
    c.out_conv_b = f.tensor(tn::DEC_OUT_CONV_B, {1}, WeightKind::F32);
}

void load_codec_encoder(GgufFile & f, const CodecDecoderWeights & dec, CodecEncoderWeights & e) {
    e.hp = read_transformer(f, kv::P_CODEC_ENC, false);
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
    // encoded reference frames go back into the talker and the decoder as generated ones do
    require_same(f, kv::ENC_NUM_QUANTIZERS, e.n_quantizers, kv::DEC_NUM_QUANTIZERS, dec.n_quantizers);
    require_same(f, kv::ENC_CODEBOOK_SIZE, e.codebook_size, kv::DEC_CODEBOOK_SIZE, dec.codebook_size);
    require_same(f, kv::ENC_SAMPLE_RATE, e.sample_rate, kv::DEC_SAMPLE_RATE, dec.sample_rate);
    require_same(f, kv::ENC_HOP_LENGTH, e.hop_length, kv::DEC_HOP_LENGTH, dec.hop_length);
    // the channels double per ratio: at most 8 ratios keep n_filters << 8 within the width bound
    std::vector<int> ups = f.counts(kv::ENC_UPSAMPLING_RATIOS, 1, 8, 1, kMaxKernel);
    e.ratios.assign(ups.rbegin(), ups.rend());
    const int64_t prod = product(e.ratios);
    if (prod <= 0 || e.hop_length % prod != 0) {
        f.key_error(kv::ENC_HOP_LENGTH, format("= %d is not a multiple of the product of '%s'", e.hop_length,
                                               kv::ENC_UPSAMPLING_RATIOS));
    }
    e.down_stride = static_cast<int>(e.hop_length / prod);
    // SEANet: conv, then per ratio [residual, ELU, strided conv], then ELU and the last conv.
    int layer = 0;
    int64_t ch = e.n_filters;
    auto conv = [&](int64_t in, int64_t out, int k, int stride) {
        CodecEncoderWeights::Conv c{layer, static_cast<int>(in), static_cast<int>(out), k, stride};
        c.w = panels(f, format(tn::ENC_CONV, layer), k, in, out);
        c.b = f.tensor(format(tn::ENC_CONV_B, layer), {out}, WeightKind::F32);
        e.convs.push_back(c);
        ++layer;
    };
    conv(1, ch, e.kernel_size, 1);
    for (int r : e.ratios) {
        CodecEncoderWeights::Residual res;
        res.layer = layer;
        const int64_t hidden = ch / e.compress;
        res.conv1 = panels(f, format(tn::ENC_RES_CONV1, layer), e.residual_kernel_size, ch, hidden);
        res.conv1_b = f.tensor(format(tn::ENC_RES_CONV1_B, layer), {hidden}, WeightKind::F32);
        res.conv2 = panels(f, format(tn::ENC_RES_CONV2, layer), 1, hidden, ch);
        res.conv2_b = f.tensor(format(tn::ENC_RES_CONV2_B, layer), {ch}, WeightKind::F32);
        e.res.push_back(res);
        layer += 2;  // the residual block and the ELU after it
        conv(ch, 2 * ch, 2 * r, r);
        ch *= 2;
    }
    ++layer;  // ELU
    const int64_t h = e.hp.n_embd;
    conv(ch, h, e.last_kernel_size, 1);
    e.layers = load_layers(f, tn::CODEC_ENC, e.hp, LayerStyle::MIMI, WeightKind::F32);
    e.downsample = panels(f, tn::ENC_DOWNSAMPLE, 2 * e.down_stride, h, h);
    const int64_t cbd = e.codebook_dim;
    e.sem_in = f.tensor(tn::ENC_SEM_IN, {h, cbd}, WeightKind::F32);
    e.acu_in = f.tensor(tn::ENC_ACU_IN, {h, cbd}, WeightKind::F32);
    e.sem_codebooks.push_back(f.tensor(format(tn::ENC_SEM_CODEBOOK, 0), {cbd, e.codebook_size}, WeightKind::F32));
    for (int g = 0; g + 1 < e.n_quantizers; ++g) {
        e.acu_codebooks.push_back(
            f.tensor(format(tn::ENC_ACU_CODEBOOK, g), {cbd, e.codebook_size}, WeightKind::F32));
    }
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
    return s;
}

}  // namespace

std::vector<std::string> device_names() {
    std::vector<std::string> out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) out.emplace_back(ggml_backend_dev_name(ggml_backend_dev_get(i)));
    return out;
}

std::vector<const ggml_tensor *> Model::tensors(const std::string & prefix) const {
    std::vector<const ggml_tensor *> out;
    for (ggml_tensor * t = ggml_get_first_tensor(file_->meta()); t; t = ggml_get_next_tensor(file_->meta(), t)) {
        if (t->buffer && std::string(t->name).rfind(prefix, 0) == 0) out.push_back(t);
    }
    return out;
}

ggml_backend_dev_t select_device(const std::string & device) {
    const std::string want = lower(device);
    ggml_backend_dev_t cpu = nullptr;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        enum ggml_backend_dev_type t = ggml_backend_dev_type(d);
        if (t == GGML_BACKEND_DEVICE_TYPE_CPU && !cpu) cpu = d;
        if (want == "auto" && (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU)) return d;
        if (want != "auto" && want != "cpu" && lower(ggml_backend_dev_name(d)) == want) return d;
    }
    if ((want == "auto" || want == "cpu") && cpu) return cpu;
    std::string names;
    for (const std::string & n : device_names()) names += (names.empty() ? "" : ", ") + n;
    fail("unknown device '%s'; available: auto, cpu, %s", device.c_str(), names.c_str());
}

Model::Model(const std::string & path_, const std::string & device_name) : path(path_) {
    file_ = std::make_unique<GgufFile>(path);
    GgufFile & f = *file_;
    file_size = f.file_size();
    const uint32_t version = f.u32(kv::FORMAT_VERSION);
    if (version != kv::FORMAT) {
        fail("%s: format version %u is not supported by this qtts (expected %u); re-convert the checkpoint",
             path.c_str(), version, kv::FORMAT);
    }
    name = f.has(kv::MODEL_NAME) ? f.str(kv::MODEL_NAME) : "";
    variant = f.str(kv::VARIANT);
    size = f.str(kv::SIZE);
    if (variant != "base" && variant != "custom_voice" && variant != "voice_design") {
        fail("%s: unknown variant '%s'", path.c_str(), variant.c_str());
    }
    read_metadata(f, *this);

    load_talker(f, talker);
    load_code_predictor(f, talker, code_pred);
    if (variant == "base") {
        speaker_encoder = std::make_unique<SpeakerEncoderWeights>();
        load_speaker_encoder(f, talker.hp.n_embd, *speaker_encoder);
    }
    load_codec_decoder(f, talker, code_pred, codec_decoder);
    load_codec_encoder(f, codec_decoder, codec_encoder);
    check_metadata(f, *this);
    f.check_complete();

    device = select_device(device_name);
    // The codecs and the speaker encoder run custom CPU ops (ops/vocoder_ops.h, encoder_ops.h): on another
    // device their weights stay in host memory and their graphs on the CPU backend.
    buffers_ = f.place(device, {"codec_dec.", "codec_enc.", "spk_enc."});
    for (ggml_backend_buffer_t b : buffers_) weight_bytes += ggml_backend_buffer_get_size(b);
    const std::string dev = ggml_backend_dev_name(device);
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    const bool on_host = cpu && ggml_backend_buffer_is_host(codec_decoder.pre_conv->buffer);
    const std::string host = on_host ? ggml_backend_dev_name(cpu) : dev;
    component_devices["talker"] = component_devices["code_predictor"] = dev;
    component_devices["codec_decoder"] = component_devices["codec_encoder"] = host;
    if (speaker_encoder) component_devices["speaker_encoder"] = host;
}

Model::~Model() {
    for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_free(b);
}

}  // namespace qtts
