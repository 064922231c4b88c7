// The vocoder's loader and its carried state (docs/model.md, "Vocoder"); its graph and runners
// are in nets/vocoder_run.cpp.
#include "nets/vocoder.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "runtime/codec_ops.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/loader.h"
#include "runtime/names.h"

namespace qtts {

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

Snake load_snake(GgufFile & f, const std::string & a, const std::string & b, int64_t ch) {
    return {f.tensor(a, {ch}, WeightKind::F32), f.tensor(b, {ch}, WeightKind::F32)};
}

void load_vocoder(GgufFile & f, Vocoder & c) {
    c.tfm = load_transformer(f, kv::P_CODEC_DEC, tn::CODEC_DEC, /*has_context=*/false, LayerStyle::VOCODER);
    c.codebook_size = f.count(kv::DEC_CODEBOOK_SIZE, 1, kMaxVocab);
    c.codebook_dim = f.count(kv::DEC_CODEBOOK_DIM, 2, kMaxWidth);
    if (c.codebook_dim % 2 != 0) f.key_error(kv::DEC_CODEBOOK_DIM, format("= %d is odd", c.codebook_dim));
    c.latent_dim = f.count(kv::DEC_LATENT_DIM, 1, kMaxWidth);
    c.decoder_dim = f.count(kv::DEC_DECODER_DIM, 1, kMaxWidth);
    c.n_quantizers = f.count(kv::DEC_NUM_QUANTIZERS, 2, kMaxGroups);
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
        f.key_error(kv::DEC_DECODER_DIM,
                    format("= %d is not divisible by 2^%d (one halving per upsample rate)", c.decoder_dim, n_voc));
    }
    const int64_t half = c.codebook_dim / 2, cd = c.codebook_dim, lat = c.latent_dim, h = c.tfm.hp.n_embd;
    for (int g = 0; g < c.n_quantizers; ++g) {
        c.codebooks.push_back(f.tensor(format(tn::DEC_CODEBOOK, g), {half, c.codebook_size}, WeightKind::F32));
    }
    c.rvq_first_out = f.tensor(tn::DEC_RVQ_FIRST_OUT, {half, cd}, WeightKind::F32);
    c.rvq_rest_out = f.tensor(tn::DEC_RVQ_REST_OUT, {half, cd}, WeightKind::F32);
    c.pre_conv = load_panels(f, tn::DEC_PRE_CONV, kPreConvKernel, cd, lat);
    c.pre_conv_b = f.tensor(tn::DEC_PRE_CONV_B, {lat}, WeightKind::F32);
    c.tfm_in = f.tensor(tn::DEC_TFM_IN, {lat, h}, WeightKind::F32);
    c.tfm_in_b = f.tensor(tn::DEC_TFM_IN_B, {h}, WeightKind::F32);
    c.tfm_norm = f.tensor(tn::DEC_TFM_NORM, {h}, WeightKind::F32);
    c.tfm_out = f.tensor(tn::DEC_TFM_OUT, {h, lat}, WeightKind::F32);
    c.tfm_out_b = f.tensor(tn::DEC_TFM_OUT_B, {lat}, WeightKind::F32);
    for (size_t i = 0; i < c.upsampling_ratios.size(); ++i) {
        const int u = static_cast<int>(i);
        Vocoder::Upsample up;
        up.conv = load_panels(f, format(tn::DEC_UP_CONV, u), 1, lat, c.upsampling_ratios[i] * lat);
        up.conv_b = f.tensor(format(tn::DEC_UP_CONV_B, u), {lat}, WeightKind::F32);
        up.dwconv = f.tensor(format(tn::DEC_UP_DWCONV, u), {lat, kConvNextKernel}, WeightKind::F32);
        up.dwconv_b = f.tensor(format(tn::DEC_UP_DWCONV_B, u), {lat}, WeightKind::F32);
        up.norm = f.tensor(format(tn::DEC_UP_NORM, u), {lat}, WeightKind::F32);
        up.norm_b = f.tensor(format(tn::DEC_UP_NORM_B, u), {lat}, WeightKind::F32);
        up.pw1 = load_panels(f, format(tn::DEC_UP_PW1, u), 1, lat, 4 * lat);
        up.pw1_b = f.tensor(format(tn::DEC_UP_PW1_B, u), {4 * lat}, WeightKind::F32);
        up.pw2 = load_panels(f, format(tn::DEC_UP_PW2, u), 1, 4 * lat, lat);
        up.pw2_b = f.tensor(format(tn::DEC_UP_PW2_B, u), {lat}, WeightKind::F32);
        up.gamma = f.tensor(format(tn::DEC_UP_GAMMA, u), {lat}, WeightKind::F32);
        c.upsample.push_back(up);
    }
    const int64_t dd = c.decoder_dim;
    c.voc_in = load_panels(f, tn::DEC_VOC_IN, kVocKernel, lat, dd);
    c.voc_in_b = f.tensor(tn::DEC_VOC_IN_B, {dd}, WeightKind::F32);
    for (int b = 0; b < n_voc; ++b) {
        const int64_t in = dd >> b, out = dd >> (b + 1), r = c.upsample_rates[b];
        Vocoder::VocBlock blk;
        blk.snake = load_snake(f, format(tn::DEC_VOC_SNAKE_A, b), format(tn::DEC_VOC_SNAKE_B, b), in);
        blk.up = load_panels(f, format(tn::DEC_VOC_UP, b), 1, in, 2 * r * out);
        blk.up_b = f.tensor(format(tn::DEC_VOC_UP_B, b), {out}, WeightKind::F32);
        for (int j = 0; j < kResidualUnits; ++j) {
            Vocoder::Residual res;
            res.snake1 = load_snake(f, format(tn::DEC_RES_SNAKE1_A, b, j), format(tn::DEC_RES_SNAKE1_B, b, j), out);
            res.conv1 = load_panels(f, format(tn::DEC_RES_CONV1, b, j), kVocKernel, out, out);
            res.conv1_b = f.tensor(format(tn::DEC_RES_CONV1_B, b, j), {out}, WeightKind::F32);
            res.snake2 = load_snake(f, format(tn::DEC_RES_SNAKE2_A, b, j), format(tn::DEC_RES_SNAKE2_B, b, j), out);
            res.conv2 = load_panels(f, format(tn::DEC_RES_CONV2, b, j), 1, out, out);
            res.conv2_b = f.tensor(format(tn::DEC_RES_CONV2_B, b, j), {out}, WeightKind::F32);
            blk.res.push_back(res);
        }
        c.voc.push_back(std::move(blk));
    }
    const int64_t last = dd >> n_voc;
    c.out_snake = load_snake(f, tn::DEC_OUT_SNAKE_A, tn::DEC_OUT_SNAKE_B, last);
    c.out_conv = load_panels(f, tn::DEC_OUT_CONV, kVocKernel, last, 1);
    c.out_conv_b = f.tensor(tn::DEC_OUT_CONV_B, {1}, WeightKind::F32);
}

void vocoder_convs(const Vocoder & c, std::vector<PanelConv> & out) {
    for (const ggml_tensor * t : {c.pre_conv, c.out_conv}) out.push_back({t, 1});
    // the transformer's linear layers are single-tap panels too (StackOptions::portable)
    for (const TransformerLayer & l : c.tfm.layers) {
        for (const ggml_tensor * t : layer_matrices(l)) out.push_back({t, 1});
    }
    vocoder_fast_convs(c, out);
}

void vocoder_fast_convs(const Vocoder & c, std::vector<PanelConv> & out) {
    for (const Vocoder::Upsample & u : c.upsample) {
        for (const ggml_tensor * t : {u.conv, u.pw1, u.pw2}) out.push_back({t, 1});
    }
    out.push_back({c.voc_in, 1});
    for (const Vocoder::VocBlock & b : c.voc) {
        out.push_back({b.up, 1});
        for (const Vocoder::Residual & r : b.res) {
            out.push_back({r.conv1, 1});
            out.push_back({r.conv2, 1});
        }
    }
}

static std::atomic<uint64_t> next_state_id{1};

VocoderState::VocoderState(const Vocoder & w, ggml_backend_t backend) : id(next_state_id++) {
    const size_t n_layer = w.tfm.layers.size();
    ggml_context * ctx = state_.begin(4 + 2 * n_layer + w.upsample.size() + (1 + kResidualUnits) * w.voc.size());
    n_ctx = round_up(kDecodeChunk + kDecodeContext, kVocoderKeyPad);
    const TransformerHParams & hp = w.tfm.hp;
    auto f32 = [&](int64_t a, int64_t b) { return ggml_new_tensor_2d(ctx, GGML_TYPE_F32, a, b); };
    pre_conv = f32(w.codebook_dim, kPreConvKernel - 1);
    for (size_t il = 0; il < n_layer; ++il) {
        k.push_back(new_cache_k(ctx, hp, n_ctx));
        v.push_back(new_cache_v(ctx, hp, n_ctx));
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
    state_.allocate(backend, "the vocoder state");
    reset();
}

void VocoderState::reset() {
    // zeros are the causal padding, and keep the masked cache rows finite
    state_.clear();
    n_past = 0;
}

}  // namespace qtts
