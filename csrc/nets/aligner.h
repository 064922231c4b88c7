// Qwen3-ForcedAligner (docs/aligner.md): an audio encoder over 16 kHz log-mel frames (three
// stride-2 Conv2d per chunk of frames, a projection, Whisper-style layers attending within
// windows of chunks, two projections into the decoder's width) and a Qwen3 decoder whose head
// gives one timestamp class per position, read at the prompt's <timestamp> slots.
// The weights and loaders are here, the encoder's graphs and runner in aligner_encoder.cpp, the
// decoder's in aligner.cpp; the runners borrow a CodecRunner from whoever holds the compute
// buffers (runtime/aligner_session).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ggml.h"
#include "runtime/codec_ops.h"
#include "runtime/transformer.h"

namespace qtts {

class GgufFile;

inline constexpr int kAudioConvs = 3;

struct AudioEncoderLayer {
    ggml_tensor *attn_norm = nullptr, *attn_norm_b = nullptr;  // LayerNorm [n_embd]
    ggml_tensor *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr, *wv = nullptr, *bv = nullptr;
    ggml_tensor *wo = nullptr, *bo = nullptr;                   // n_embd -> n_embd, with biases
    ggml_tensor *ffn_norm = nullptr, *ffn_norm_b = nullptr;    // LayerNorm [n_embd]
    ggml_tensor *fc1 = nullptr, *fc1_b = nullptr;              // n_embd -> n_ff, GELU
    ggml_tensor *fc2 = nullptr, *fc2_b = nullptr;              // n_ff -> n_embd
};

struct AudioEncoder {
    // the log-mel front end (computed on the host, runtime/audio/mel.py) the encoder was trained on
    int sample_rate = 0, n_fft = 0, hop = 0, n_mels = 0;
    int channels = 0;  // of the convs
    int n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, out_dim = 0;
    // frames per conv chunk (the reference's 2 * n_window) and per attention window (n_window_infer)
    int chunk_frames = 0, window_frames = 0;
    float eps = 1e-5f;  // torch's LayerNorm default, which the reference keeps
    // conv 0: [3, 3, 1, channels] (ggml order, F32); 1 and 2: the matrices [channels * 9,
    // channels] they are multiplied as (any matrix type); biases [channels]
    std::array<ggml_tensor *, kAudioConvs> conv{}, conv_b{};
    ggml_tensor * conv_out = nullptr;                          // [channels * conv_len(n_mels), n_embd]
    std::vector<AudioEncoderLayer> layers;
    ggml_tensor *out_norm = nullptr, *out_norm_b = nullptr;    // [n_embd]
    ggml_tensor *proj1 = nullptr, *proj1_b = nullptr;          // n_embd -> n_embd, GELU
    ggml_tensor *proj2 = nullptr, *proj2_b = nullptr;          // n_embd -> out_dim

    // The length of n rows after the three stride-2 convs (kernel 3, padding 1): halved three
    // times, rounding up.
    static int64_t conv_len(int64_t n);
    int64_t chunk_tokens() const { return conv_len(chunk_frames); }
    int64_t chunks_per_window() const { return window_frames / chunk_frames; }
    // The tokens of n_frames mel frames: whole chunks, then the last one's (the reference's
    // _get_feat_extract_output_lengths).
    int64_t tokens(int64_t n_frames) const;
};

struct AlignerDecoder {
    Transformer tfm;  // QWEN3
    int vocab = 0, n_classes = 0;
    ggml_tensor * token_embd = nullptr;   // [n_embd, vocab]
    ggml_tensor * output_norm = nullptr;  // [n_embd]
    ggml_tensor * head = nullptr;         // [n_embd, n_classes]: the timestamp classes
};

void load_audio_encoder(GgufFile & f, AudioEncoder & e);
// out_dim: the encoder's output width, which the audio positions of the prompt take.
void load_aligner_decoder(GgufFile & f, int out_dim, AlignerDecoder & d);

// The encoder's output [tokens(n_frames), out_dim] row-major for a log-mel [n_mels, n_frames]
// row-major (the reference's input_features): one graph per attention window, run by `r`. The
// named intermediates `stages` (tests: "aenc.conv2", "aenc.embed", "aenc.<layer>.out"), if any,
// go to `got`, each window's after the previous one's.
std::vector<float> encode_audio(const AudioEncoder & e, const CodecRunner & r, const std::vector<float> & mel,
                                int64_t n_frames, const std::vector<std::string> & stages = {},
                                std::vector<std::vector<float>> * got = nullptr);

// The token table's rows of ids, [ids, n_embd] row-major.
std::vector<float> aligner_embed(const AlignerDecoder & d, const CodecRunner & r, const std::vector<int32_t> & ids);

// The timestamp logits [slots, n_classes] row-major at the positions `slots` (ascending) of the
// sequence of n input embeddings embd [n, n_embd]: the decoder prefills `cache` (reserved here,
// fused: attended by the fused CPU op) in chunks of `chunk` positions, and each chunk's slots go
// through the final norm and the head.
std::vector<float> aligner_logits(const AlignerDecoder & d, const CodecRunner & r, KvCache & cache, bool fused,
                                  const std::vector<float> & embd, int64_t n, const std::vector<int32_t> & slots,
                                  int chunk);

}  // namespace qtts
