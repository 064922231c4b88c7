// The aligner's audio encoder (docs/aligner.md, "The model"): the log-mel frames cut into chunks
// of chunk_frames (the last one padded with zeros, or taken whole when the audio is shorter than
// one chunk, as the reference pads its chunks to the longest), three stride-2 Conv2d + GELU per
// chunk, the flattened channels x bins projected to the layers' width, a sinusoid position per
// token of its chunk; then the layers attend within windows of chunks_per_window chunks (the
// reference's flash-attention windows, cu_seqlens), so each window is one graph of its own.
// Activations are channel-fastest (ne = [C, T], the convs' [C, time, bins, chunks]); each conv
// reads its input as [time, bins, C, chunks], as ggml_im2col takes it.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nets/aligner.h"
#include "ops/stock.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/graph.h"
#include "runtime/loader.h"
#include "runtime/names.h"

namespace qtts {

int64_t AudioEncoder::conv_len(int64_t n) {
    for (int i = 0; i < kAudioConvs; ++i) n = (n + 1) / 2;
    return n;
}

int64_t AudioEncoder::tokens(int64_t n_frames) const {
    const int64_t tail = n_frames % chunk_frames;
    return n_frames / chunk_frames * chunk_tokens() + (tail ? conv_len(tail) : 0);
}

void load_audio_encoder(GgufFile & f, AudioEncoder & e) {
    auto key = [](const char * pattern) { return format(pattern, kv::P_ALIGNER_AUDIO); };
    e.sample_rate = f.count(kv::AENC_SAMPLE_RATE, kMinRate, kMaxRate);
    e.n_fft = f.count(kv::AENC_N_FFT, 2, 1 << 16);
    e.hop = f.count(kv::AENC_HOP_LENGTH, 1, e.n_fft);
    e.n_mels = f.count(kv::AENC_MEL_BINS, 1, 1024);
    e.channels = f.count(kv::AENC_CONV_CHANNELS, 1, kMaxWidth);
    e.n_embd = f.count(key(kv::T_EMBEDDING_LENGTH).c_str(), 1, kMaxWidth);
    e.n_ff = f.count(key(kv::T_FEED_FORWARD_LENGTH).c_str(), 1, 4 * kMaxWidth);
    e.n_layer = f.count(key(kv::T_BLOCK_COUNT).c_str(), 1, kMaxLayers);
    const std::string heads = key(kv::T_HEAD_COUNT);
    e.n_head = f.count(heads.c_str(), 1, kMaxHeads);
    if (e.n_embd % e.n_head != 0) {
        f.key_error(heads.c_str(), format("= %d does not divide the width %d", e.n_head, e.n_embd));
    }
    e.eps = f.real(key(kv::T_NORM_EPS).c_str(), 0.0f, 1.0f);
    e.out_dim = f.count(kv::AENC_OUTPUT_LENGTH, 1, kMaxWidth);
    e.chunk_frames = f.count(kv::AENC_CHUNK_FRAMES, 1, 1 << 16);
    // the reference's window holds n_window_infer // (2 n_window) whole chunks: at least one
    e.window_frames = f.count(kv::AENC_WINDOW_FRAMES, e.chunk_frames, 1 << 20);

    const int64_t c = e.channels, d = e.n_embd;
    for (int i = 0; i < kAudioConvs; ++i) {
        const std::string name = format(tn::AENC_CONV, i);
        e.conv[i] =
            i == 0 ? f.tensor(name, {3, 3, 1, c}, WeightKind::F32) : f.tensor(name, {9 * c, c}, WeightKind::MATMUL);
        e.conv_b[i] = f.tensor(format(tn::AENC_CONV_B, i), {c}, WeightKind::F32);
    }
    e.conv_out = f.tensor(tn::AENC_CONV_OUT, {c * AudioEncoder::conv_len(e.n_mels), d}, WeightKind::MATMUL);
    for (int il = 0; il < e.n_layer; ++il) {
        auto n = [&](const char * pattern) { return format(pattern, tn::AENC, il); };
        auto vec = [&](const char * pattern, int64_t len) { return f.tensor(n(pattern), {len}, WeightKind::F32); };
        auto mat = [&](const char * pattern, int64_t in, int64_t out) {
            return f.tensor(n(pattern), {in, out}, WeightKind::MATMUL);
        };
        AudioEncoderLayer & l = e.layers.emplace_back();
        l.attn_norm = vec(tn::L_ATTN_NORM, d);
        l.attn_norm_b = vec(tn::L_ATTN_NORM_B, d);
        l.wq = mat(tn::L_ATTN_Q, d, d);
        l.bq = vec(tn::L_ATTN_Q_B, d);
        l.wk = mat(tn::L_ATTN_K, d, d);
        l.bk = vec(tn::L_ATTN_K_B, d);
        l.wv = mat(tn::L_ATTN_V, d, d);
        l.bv = vec(tn::L_ATTN_V_B, d);
        l.wo = mat(tn::L_ATTN_OUT, d, d);
        l.bo = vec(tn::L_ATTN_OUT_B, d);
        l.ffn_norm = vec(tn::L_FFN_NORM, d);
        l.ffn_norm_b = vec(tn::L_FFN_NORM_B, d);
        l.fc1 = mat(tn::L_FFN_UP, d, e.n_ff);
        l.fc1_b = vec(tn::L_FFN_UP_B, e.n_ff);
        l.fc2 = mat(tn::L_FFN_DOWN, e.n_ff, d);
        l.fc2_b = vec(tn::L_FFN_DOWN_B, d);
    }
    e.out_norm = f.tensor(tn::AENC_OUTPUT_NORM, {d}, WeightKind::F32);
    e.out_norm_b = f.tensor(tn::AENC_OUTPUT_NORM_B, {d}, WeightKind::F32);
    e.proj1 = f.tensor(tn::AENC_PROJ1, {d, d}, WeightKind::MATMUL);
    e.proj1_b = f.tensor(tn::AENC_PROJ1_B, {d}, WeightKind::F32);
    e.proj2 = f.tensor(tn::AENC_PROJ2, {d, e.out_dim}, WeightKind::MATMUL);
    e.proj2_b = f.tensor(tn::AENC_PROJ2_B, {e.out_dim}, WeightKind::F32);
}

namespace {

constexpr const char * kMel = "aenc.mel";  // F32 [chunk_len, n_mels, 1, chunks]
constexpr const char * kPos = "aenc.pos";  // F32 [n_embd, conv_len(chunk_len)]

struct EncoderBuilder {
    ggml_context * ctx;
    const AudioEncoder & e;

    ggml_tensor * layer_norm(ggml_tensor * x, ggml_tensor * w, ggml_tensor * b) const {
        return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, x, e.eps), w), b);
    }

    // Bidirectional attention among the graph's n positions (one window).
    ggml_tensor * attention(ggml_tensor * x, const AudioEncoderLayer & l, int il) const {
        const int64_t n = x->ne[1], heads = e.n_head, hd = e.n_embd / heads;
        auto split = [&](ggml_tensor * w, ggml_tensor * b) {
            return ggml_reshape_3d(ctx, linear(ctx, x, w, b), hd, heads, n);
        };
        ggml_tensor * q = ggml_permute(ctx, split(l.wq, l.bq), 0, 2, 1, 3);  // [hd, n, heads]
        ggml_tensor * k = ggml_permute(ctx, split(l.wk, l.bk), 0, 2, 1, 3);
        ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, split(l.wv, l.bv), 1, 2, 0, 3));  // [n, hd, heads]
        ggml_tensor * kq = mul_mat(ctx, k, q);                                                  // [n_k, n_q, heads]
        kq = named(ggml_soft_max_ext(ctx, kq, nullptr, 1.0f / std::sqrt(static_cast<float>(hd)), 0.0f),
                   "aenc.%d.attn_w", il);
        ggml_tensor * out = ggml_permute(ctx, mul_mat(ctx, vt, kq), 0, 2, 1, 3);  // [hd, heads, n]
        return linear(ctx, ggml_cont_2d(ctx, out, e.n_embd, n), l.wo, l.bo);
    }

    ggml_tensor * layer(ggml_tensor * x, int il) const {
        const AudioEncoderLayer & l = e.layers[il];
        x = named(ggml_add(ctx, x, attention(layer_norm(x, l.attn_norm, l.attn_norm_b), l, il)), "aenc.%d.attn_res",
                  il);
        ggml_tensor * h = ggml_gelu_erf(ctx, linear(ctx, layer_norm(x, l.ffn_norm, l.ffn_norm_b), l.fc1, l.fc1_b));
        return named(ggml_add(ctx, x, linear(ctx, h, l.fc2, l.fc2_b)), "aenc.%d.out", il);
    }

    // Conv2d i (kernel 3, stride 2, padding 1) + GELU of x [time, bins, in, chunks]: its windows
    // as F32 columns (ggml_conv_2d's would be F16) times the kernel, [channels, time', bins', chunks].
    // im2col reads only its kernel's shape; for the stored matrices the first conv's kernel, its 9
    // x channels values, stands in reshaped as [3, 3, channels, 1] (a weight: nothing to allocate).
    ggml_tensor * conv(ggml_tensor * x, int i) const {
        ggml_tensor * shape = i == 0 ? e.conv[0] : ggml_reshape_4d(ctx, e.conv[0], 3, 3, e.channels, 1);
        ggml_tensor * cols = ggml_im2col(ctx, shape, x, 2, 2, 1, 1, 1, 1, true, GGML_TYPE_F32);
        const int64_t k = cols->ne[0], t = cols->ne[1], bins = cols->ne[2], n = cols->ne[3];
        ggml_tensor * w = i == 0 ? ggml_reshape_2d(ctx, e.conv[0], k, e.channels) : e.conv[i];
        ggml_tensor * y = matmul(ctx, w, ggml_reshape_2d(ctx, cols, k, t * bins * n));
        y = named(ggml_gelu_erf(ctx, ggml_add(ctx, y, e.conv_b[i])), "aenc.conv%d", i);
        return ggml_reshape_4d(ctx, y, e.channels, t, bins, n);
    }

    // n_chunks chunks of chunk_len frames in, the first n_tokens tokens out: [out_dim, n_tokens].
    ggml_tensor * build(int64_t chunk_len, int64_t n_chunks, int64_t n_tokens) const {
        ggml_tensor * x = input(ggml_new_tensor_4d(ctx, GGML_TYPE_F32, chunk_len, e.n_mels, 1, n_chunks), kMel);
        for (int i = 0; i < kAudioConvs; ++i) {
            if (i > 0) x = ggml_cont(ctx, ggml_permute(ctx, x, 2, 0, 1, 3));  // [time, bins, channels, chunks]
            x = conv(x, i);
        }
        const int64_t t = x->ne[1], bins = x->ne[2];
        // each token's channels x bins, bins fastest, as the reference flattens them
        x = ggml_cont(ctx, ggml_permute(ctx, x, 1, 2, 0, 3));  // [bins, channels, time, chunks]
        x = matmul(ctx, e.conv_out, ggml_reshape_2d(ctx, x, bins * e.channels, t * n_chunks));
        ggml_tensor * pos = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, e.n_embd, t), kPos);
        x = ggml_add(ctx, ggml_reshape_3d(ctx, x, e.n_embd, t, n_chunks), pos);
        x = named(ggml_view_2d(ctx, x, e.n_embd, n_tokens, x->nb[1], 0), "aenc.embed");
        for (int il = 0; il < e.n_layer; ++il) x = layer(x, il);
        x = layer_norm(x, e.out_norm, e.out_norm_b);
        x = ggml_gelu_erf(ctx, linear(ctx, x, e.proj1, e.proj1_b));
        return named(linear(ctx, x, e.proj2, e.proj2_b), "aenc.out");
    }
};

// The reference's sinusoids of `width` channels (sin, then cos) at positions 0..n-1, in float32
// as torch computes them: [n, width] row-major.
std::vector<float> sinusoids(int64_t width, int64_t n) {
    const int64_t half = width / 2;
    const float step = static_cast<float>(std::log(10000.0) / static_cast<double>(half - 1));
    std::vector<float> out(static_cast<size_t>(width * n));
    for (int64_t i = 0; i < half; ++i) {
        const float inv = std::exp(-step * static_cast<float>(i));
        for (int64_t p = 0; p < n; ++p) {
            const float a = static_cast<float>(p) * inv;
            out[p * width + i] = std::sin(a);
            out[p * width + half + i] = std::cos(a);
        }
    }
    return out;
}

}  // namespace

std::vector<float> encode_audio(const AudioEncoder & e, const CodecRunner & r, const std::vector<float> & mel,
                                int64_t n_frames, const std::vector<std::string> & stages,
                                std::vector<std::vector<float>> * got) {
    if (n_frames < 1 || n_frames > (int64_t(1) << 22)) {
        fail("aligner: %lld mel frames; need 1 to %lld", static_cast<long long>(n_frames),
             static_cast<long long>(int64_t(1) << 22));
    }
    if (static_cast<int64_t>(mel.size()) != n_frames * e.n_mels) {
        fail("aligner: mel must have shape [%d, frames], got %zu values for %lld frames", e.n_mels, mel.size(),
             static_cast<long long>(n_frames));
    }
    if (e.n_embd % 2 != 0 || e.n_embd < 4) fail("aligner: the sinusoid positions need an even width of at least 4");
    const int64_t cf = e.chunk_frames, n_chunks = (n_frames + cf - 1) / cf;
    // every chunk padded to the longest, as the reference batches them
    const int64_t chunk_len = n_chunks == 1 ? n_frames : cf, per_window = e.chunks_per_window();
    const int64_t t = AudioEncoder::conv_len(chunk_len);
    const std::vector<float> pos = sinusoids(e.n_embd, t);
    std::vector<float> out;
    out.reserve(static_cast<size_t>(e.tokens(n_frames) * e.out_dim));
    for (int64_t first = 0; first < n_chunks; first += per_window) {
        const int64_t nc = std::min(per_window, n_chunks - first);
        const bool last = first + nc == n_chunks;
        const int64_t tail = n_frames - (n_chunks - 1) * cf;  // frames of the last chunk
        const int64_t n_tokens = (nc - 1) * t + (last ? AudioEncoder::conv_len(tail) : t);
        std::vector<float> x(static_cast<size_t>(chunk_len * e.n_mels * nc), 0.0f);
        for (int64_t c = 0; c < nc; ++c) {
            const int64_t from = (first + c) * cf, len = std::min(chunk_len, n_frames - from);
            for (int64_t b = 0; b < e.n_mels; ++b) {
                const float * src = mel.data() + b * n_frames + from;
                std::copy(src, src + len, x.begin() + (c * e.n_mels + b) * chunk_len);
            }
        }
        ggml_cgraph * gf = r.run(
            [&](ggml_context * ctx, ggml_cgraph * g) {
                ggml_tensor * y = EncoderBuilder{ctx, e}.build(chunk_len, nc, n_tokens);
                for (const std::string & name : stages) {
                    ggml_tensor * t = ggml_get_tensor(ctx, name.c_str());
                    if (!t) fail("aligner: the encoder has no stage '%s'", name.c_str());
                    ggml_set_output(t);
                    ggml_build_forward_expand(g, t);
                }
                return y;
            },
            [&](ggml_cgraph * g) {
                set_input(g, kMel, x);
                set_input(g, kPos, pos);
            });
        const std::vector<float> y = read_output(gf);
        out.insert(out.end(), y.begin(), y.end());
        if (got) got->resize(stages.size());
        for (size_t i = 0; got && i < stages.size(); ++i) {
            const std::vector<float> v = read_tensor(gf, stages[i].c_str());
            (*got)[i].insert((*got)[i].end(), v.begin(), v.end());
        }
    }
    return out;
}

}  // namespace qtts
