// The vocoder's loader, its graph and the Session calls that run it (docs/model.md, "Vocoder"). Activations are
// channel-fastest (ne = [C, T]); the convolutions and SnakeBeta come from CodecOps: on the native
// path conv_gemm over panel-packed weights and a SnakeBeta op that also writes the next conv's
// left context (ops/snake_beta.h), on the portable path their stock-op forms (ops/stock.h).
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

#include "runtime/codec_ops.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/loader.h"
#include "runtime/names.h"
#include "runtime/session.h"

namespace qtts {

namespace {

constexpr float kConvNextEps = 1e-6f;
// Attention keys are padded to a multiple of this, ggml's F32 SIMD step, with the padding masked.
constexpr int64_t kKeyPad = 32;
constexpr int64_t kMaxGraphFrames = 50;  // 4 s of audio per graph: bounds the compute buffer
constexpr int64_t kConvWarmup = 16;      // frames through the conv stack before the first kept one

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
        f.key_error(kv::DEC_DECODER_DIM, format("= %d is not divisible by 2^%d (one halving per upsample rate)",
                                                c.decoder_dim, n_voc));
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
    for (const ggml_tensor * t : {c.pre_conv, c.voc_in, c.out_conv}) out.push_back({t, 1});
    for (const Vocoder::Upsample & u : c.upsample) {
        for (const ggml_tensor * t : {u.conv, u.pw1, u.pw2}) out.push_back({t, 1});
    }
    for (const Vocoder::VocBlock & b : c.voc) {
        out.push_back({b.up, 1});
        for (const Vocoder::Residual & r : b.res) {
            out.push_back({r.conv1, 1});
            out.push_back({r.conv2, 1});
        }
    }
}

namespace {

struct Builder {
    ggml_context * ctx;
    ggml_cgraph * gf;
    const Vocoder & w;
    VocoderState & st;
    CodecOps ops;

    ggml_tensor * with_left(ggml_tensor * x, ggml_tensor * left) {
        ggml_tensor * xp = ggml_concat(ctx, left, x, 1);
        keep(ctx, gf, xp, left);
        return xp;
    }
    ggml_tensor * snake(ggml_tensor * x, const Snake & s, ggml_tensor * left) {
        ggml_tensor * y = ops.snake(x, s.exp_alpha, s.inv_beta, left);
        if (left) keep(ctx, gf, y, left);
        return y;
    }

    ggml_tensor * rvq(ggml_tensor * codes, int64_t n) {
        auto embd = [&](int g) {
            return ggml_get_rows(ctx, w.codebooks[g], ggml_view_1d(ctx, codes, n, g * codes->nb[1]));
        };
        ggml_tensor * rest = embd(1);
        for (int g = 2; g < w.n_quantizers; ++g) rest = ggml_add(ctx, rest, embd(g));
        return named(ggml_add(ctx, mul_mat(ctx, w.rvq_first_out, embd(0)), mul_mat(ctx, w.rvq_rest_out, rest)),
                     "cd.rvq");
    }

    ggml_tensor * transformer(ggml_tensor * x, ggml_tensor * pos, ggml_tensor * mask, int64_t n_kv) {
        x = linear(ctx, x, w.tfm_in, w.tfm_in_b);
        const KvWindow kv{&st.k, &st.v, st.n_past, n_kv};
        StackOptions o;
        o.prefix = "cd.tfm";
        o.kv = &kv;
        o.mask = mask;
        x = transformer_stack(ctx, gf, x, pos, w.tfm, o);
        return named(linear(ctx, rms_norm(ctx, x, w.tfm_norm, w.tfm.hp.eps), w.tfm_out, w.tfm_out_b), "cd.tfm");
    }

    // Causal ConvTranspose with kernel = stride: one GEMM whose tap-major outputs are the frames.
    ggml_tensor * upsample(ggml_tensor * x, int i) {
        const Vocoder::Upsample & u = w.upsample[i];
        const int64_t C = w.latent_dim, n = x->ne[1] * w.upsampling_ratios[i];
        x = ggml_add(ctx, ggml_reshape_2d(ctx, ops.conv(x, u.conv, x->ne[1], nullptr, nullptr), C, n), u.conv_b);
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
        h = ops.conv(ggml_gelu_erf(ctx, ops.conv(h, u.pw1, n, u.pw1_b, nullptr)), u.pw2, n, u.pw2_b, nullptr);
        return named(ggml_add(ctx, x, ggml_mul(ctx, h, u.gamma)), "cd.up%d", i);
    }

    // SnakeBeta, causal ConvTranspose (kernel 2r, stride r, r trimmed on the right) as one GEMM
    // over the frames and their predecessor plus an add of the two halves, 3 residual units.
    ggml_tensor * voc_block(ggml_tensor * x, int b) {
        const Vocoder::VocBlock & blk = w.voc[b];
        const int64_t n = x->ne[1], r = w.upsample_rates[b], C = w.decoder_dim >> (b + 1);
        ggml_tensor * y = ops.conv(snake(x, blk.snake, st.blocks[b].up), blk.up, n + 1, nullptr, nullptr);
        const size_t cb = C * sizeof(float);
        ggml_tensor * cur = ggml_view_3d(ctx, y, C, r, n, cb, y->nb[1], y->nb[1]);  // taps 0..r-1 of frame t
        ggml_tensor * prev = ggml_view_3d(ctx, y, C, r, n, cb, y->nb[1], r * cb);   // taps r..2r-1 of frame t-1
        x = ggml_add(ctx, ggml_reshape_2d(ctx, ggml_add(ctx, cur, prev), C, r * n), blk.up_b);
        for (int j = 0; j < kResidualUnits; ++j) {
            const Vocoder::Residual & u = blk.res[j];
            ggml_tensor * h = ops.conv(snake(x, u.snake1, st.blocks[b].res[j]), u.conv1, r * n, u.conv1_b, nullptr);
            // the block's output is "cd.blk<b>.res2"
            x = named(ops.conv(snake(h, u.snake2, nullptr), u.conv2, r * n, u.conv2_b, x), "cd.blk%d.res%d", b, j);
        }
        return x;
    }

    // full = false stops after the transformer: it only advances the segment's state (the
    // transformer's keys/values and the pre-conv context) for frames whose audio is not needed.
    ggml_tensor * build(int64_t n, int64_t n_kv, bool full) {
        ggml_tensor * codes = input(ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n, w.n_quantizers), "cd.codes");
        ggml_tensor * pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), "cd.pos");
        ggml_tensor * mask = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_kv, n), "cd.mask");

        ggml_tensor * x = with_left(rvq(codes, n), st.pre_conv);
        x = named(ops.conv(x, w.pre_conv, n, w.pre_conv_b, nullptr), "cd.pre_conv");
        x = transformer(x, pos, mask, n_kv);
        if (!full) return x;
        for (int i = 0; i < static_cast<int>(w.upsample.size()); ++i) x = upsample(x, i);
        x = named(ops.conv(with_left(x, st.voc_in), w.voc_in, x->ne[1], w.voc_in_b, nullptr), "cd.voc_in");
        for (int b = 0; b < static_cast<int>(w.voc.size()); ++b) x = voc_block(x, b);
        const int64_t L = x->ne[1], C = x->ne[0];
        ggml_tensor * s = snake(x, w.out_snake, st.out);
        // 1 output channel: ggml's mul_mat over overlapping rows beats a one-lane GEMM panel
        ggml_tensor * wav = ops.portable ? ops.conv(s, w.out_conv, L, nullptr, nullptr)
                                         : mul_mat(ctx, ggml_reshape_2d(ctx, w.out_conv, kVocKernel * C, 1),
                                                        overlapping_rows(ctx, s, kVocKernel * C, L));
        return named(ggml_clamp(ctx, ggml_add(ctx, wav, w.out_conv_b), -1.0f, 1.0f), "cd.wav");
    }
};

void check_codes(const Vocoder & w, const std::vector<int32_t> & codes, int64_t n) {
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

VocoderState::VocoderState(const Vocoder & w, ggml_backend_t backend) {
    const size_t n_layer = w.tfm.layers.size();
    ggml_context * ctx = state_.begin(4 + 2 * n_layer + w.upsample.size() + (1 + kResidualUnits) * w.voc.size());
    n_ctx = round_up(kDecodeChunk + kDecodeContext, kKeyPad);
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

std::vector<float> Session::codec_run(VocoderState & st, const int32_t * codes, int64_t n,
                                      const std::vector<std::string> & stages, std::vector<CodecStage> * got,
                                      bool full) {
    const Phase phase(*this, "vocoder");
    const Vocoder & w = model_->vocoder;
    const int64_t g = w.n_quantizers, n_kv = round_up(st.n_past + n, kKeyPad);
    if (n_kv > st.n_ctx) fail("codec decoder: segment of %lld frames exceeds its cache", static_cast<long long>(st.n_past + n));
    ggml_cgraph * gf = run(
        [&](ggml_context * ctx, ggml_cgraph * graph) {
            Builder b{ctx, graph, w, st, codec_ops(ctx)};
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
            set_input(graph, "cd.codes", ids);
            set_input(graph, "cd.pos", pos);
            set_input(graph, "cd.mask", mask);
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
    const Vocoder & w = model_->vocoder;
    const int64_t g = w.n_quantizers, hop = w.hop_length, f0 = s.n_frames, f1 = f0 + n;
    for (int64_t c = f0 / kDecodeChunk;; ++c) {
        const int64_t emit = std::max(c * kDecodeChunk, s.silent_until), end = c * kDecodeChunk + kDecodeChunk;
        const int64_t start = c * kDecodeChunk - std::min(c * kDecodeChunk, kDecodeContext);
        if (start >= f1) break;
        const int slot = static_cast<int>(c % 2);
        if (s.chunk[slot] != c) {
            if (!s.slot[slot]) s.slot[slot] = std::make_unique<VocoderState>(w, codec_backend());
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

void Session::require_cpu_codec(const char * what) const {
    if (model_->ops == OpsPath::native && !ggml_backend_buffer_is_host(model_->vocoder.pre_conv->buffer)) {
        throw EngineError(format("%s needs its weights in host memory, which this model's device did not allow", what),
                          {});
    }
}

std::vector<float> Session::decode(const std::vector<int32_t> & codes, int64_t n) {
    check_codes(model_->vocoder, codes, n);
    if (n < 1) fail("decode needs at least one frame");
    CodecStream s;
    std::vector<float> out;
    codec_push(s, codes.data(), n, out);
    return out;
}

void Session::decode_stream_reset(int64_t silent_frames, int stream) {
    if (silent_frames < 0) fail("decode_stream_reset: silent_frames must be >= 0");
    if (stream < 0) fail("decode stream ids are >= 0, got %d", stream);
    CodecStream & s = codec_streams_[stream];
    s.n_frames = 0;
    s.silent_until = silent_frames;
    s.chunk[0] = s.chunk[1] = -1;
}

std::vector<float> Session::decode_stream_push(const std::vector<int32_t> & codes, int64_t n, int stream) {
    check_codes(model_->vocoder, codes, n);
    auto it = codec_streams_.find(stream);
    if (it == codec_streams_.end()) {
        if (stream != 0) fail("decode stream %d was not started (decode_stream_reset first)", stream);
        it = codec_streams_.emplace(0, CodecStream{}).first;
    }
    std::vector<float> out;
    codec_push(it->second, codes.data(), n, out);
    return out;
}

void Session::decode_stream_close(int stream) {
    if (stream == 0) {
        decode_stream_reset(0, 0);
    } else if (codec_streams_.erase(stream) == 0) {
        fail("decode stream %d is not open", stream);
    }
}

std::vector<CodecStage> Session::decode_stages(const std::vector<int32_t> & codes, int64_t n,
                                               const std::vector<std::string> & stages) {
    check_codes(model_->vocoder, codes, n);
    if (n < 1 || n > kDecodeChunk) fail("decode_stages takes 1 to %lld frames", static_cast<long long>(kDecodeChunk));
    require_cpu_codec("the codec decoder");
    VocoderState st(model_->vocoder, codec_backend());
    std::vector<CodecStage> got;
    codec_run(st, codes.data(), n, stages, &got, true);
    return got;
}

}  // namespace qtts
