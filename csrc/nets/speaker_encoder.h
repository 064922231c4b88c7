// The speaker encoder: an ECAPA-TDNN over log-mel frames that gives the x-vector the Base
// talker takes in its speaker slot (docs/model.md, "Speaker encoder"). Base models only.
#pragma once

#include <cstdint>
#include <vector>

#include "ggml.h"
#include "runtime/codec_ops.h"

namespace qtts {

class GgufFile;

// SE-Res2Net blocks between the first conv and the multi-layer feature aggregation (MFA).
inline constexpr int kSpeakerBlocks = 3;

// Convolutions are conv-GEMM panels (runtime/loader.h); C = channels, A = attn_channels,
// E = embd, S = se_channels; block b = 1..kSpeakerBlocks reads c[b-1] channels and gives c[b].
struct SpeakerEncoder {
    int embd = 0, mel_dim = 0, attn_channels = 0, res2net_scale = 0, se_channels = 0, sample_rate = 0;
    std::vector<int> channels, kernel_sizes, dilations;  // kSpeakerBlocks + 2 each: conv0, blocks, MFA
    ggml_tensor *conv0 = nullptr, *conv0_b = nullptr;    // mel -> c[0], kernel_sizes[0] taps
    struct Block {
        ggml_tensor *tdnn1 = nullptr, *tdnn1_b = nullptr;   // c[b-1] -> c[b], 1 tap
        ggml_tensor *tdnn2 = nullptr, *tdnn2_b = nullptr;   // c[b] -> c[b], 1 tap
        ggml_tensor *se1 = nullptr, *se1_b = nullptr;       // [c[b], S]: squeeze
        ggml_tensor *se2 = nullptr, *se2_b = nullptr;       // [S, c[b]]: excite
        std::vector<ggml_tensor *> res2net, res2net_b;     // per chunk 1..scale-1: c[b]/scale, k taps
    };
    std::vector<Block> blocks;
    // the attention TDNN reads [x; mean; std]: x through panels, the time-constant stats as a matrix
    ggml_tensor *mfa = nullptr, *mfa_b = nullptr;                 // c[4] -> c[4]
    ggml_tensor *asp_tdnn = nullptr, *asp_tdnn_b = nullptr;       // c[4] -> A
    ggml_tensor * asp_tdnn_stats = nullptr;                        // [2 c[4], A]
    ggml_tensor *asp_conv = nullptr, *asp_conv_b = nullptr;       // A -> c[4]
    ggml_tensor *fc = nullptr, *fc_b = nullptr;                   // [2 c[4], E]
};

// talker_width: the x-vector fills one talker input position.
void load_speaker_encoder(GgufFile & f, int talker_width, SpeakerEncoder & s);
// Every panel weight, for the portable path's copies (runtime/codec_ops.h).
void speaker_encoder_convs(const SpeakerEncoder & s, std::vector<PanelConv> & out);

// The x-vector [embd] of a log-mel [n_frames, mel_dim] row-major, one graph run by `r` (the
// network carries no state between calls).
std::vector<float> speaker_embed(const SpeakerEncoder & w, const CodecRunner & r, const std::vector<float> & mel,
                                 int64_t n_frames);

}  // namespace qtts
