// The codec encoder (Mimi-style: waveform -> codes [ceil(N / hop), n_quantizers]) that gives an
// ICL voice its reference codes (docs/model.md, "Codec encoder").
#pragma once

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "runtime/codec_ops.h"
#include "runtime/graph.h"
#include "runtime/transformer.h"

namespace qtts {

class GgufFile;

// SEANet convolutions are conv-GEMM panels (runtime/loader.h); H = transformer width,
// cbd = codebook_dim.
struct CodecEncoder {
    Transformer tfm;  // CODEC_ENCODER, full-causal
    int n_filters = 0, kernel_size = 0, last_kernel_size = 0, residual_kernel_size = 0;
    int dilation_growth_rate = 0, compress = 0, codebook_size = 0, codebook_dim = 0, n_quantizers = 0;
    int sample_rate = 0, hop_length = 0, down_stride = 0;
    std::vector<int> ratios;  // SEANet downsampling order (reversed upsampling_ratios)
    struct Conv {
        int layer = 0, in = 0, out = 0, kernel = 0, stride = 1;
        ggml_tensor *w = nullptr, *b = nullptr;  // in -> out, `kernel` taps
    };
    struct Residual {
        int layer = 0;
        ggml_tensor *conv1 = nullptr, *conv1_b = nullptr;  // ch -> ch / compress, residual_kernel_size taps
        ggml_tensor *conv2 = nullptr, *conv2_b = nullptr;  // ch / compress -> ch, 1 tap
    };
    std::vector<Conv> convs;     // the first, one per ratio (stride = ratio), the last (-> H)
    std::vector<Residual> res;   // one per ratio
    ggml_tensor * downsample = nullptr;                         // H -> H, 2 down_stride taps
    ggml_tensor *sem_in = nullptr, *acu_in = nullptr;           // [H, cbd]
    std::vector<ggml_tensor *> sem_codebooks, acu_codebooks;    // [cbd, codebook_size]: 1 and n_quantizers - 1
};

void load_codec_encoder(GgufFile & f, CodecEncoder & e);
// Every panel weight with its stride, for the portable path's copies (runtime/codec_ops.h).
void codec_encoder_convs(const CodecEncoder & e, std::vector<PanelConv> & out);

// The encoder runs its causal conv stack chunk by chunk (codec_encoder.cpp), each conv reading
// the last input rows of the chunk before.
class EncoderState {
public:
    EncoderState(const CodecEncoder & w, ggml_backend_t backend);

    std::vector<ggml_tensor *> conv_left;  // per conv: [in, kernel - stride] (null when none)
    std::vector<ggml_tensor *> res_left;   // per residual block: [channels, kernel - 1]

private:
    StateBuffer state_;
};

// Codes [ceil(N / hop), n_quantizers] row-major of N samples at the codec's rate: graphs run by
// `r`, chunk by chunk over a fresh EncoderState.
std::vector<int32_t> encode(const CodecEncoder & w, const CodecRunner & r, const std::vector<float> & samples);

}  // namespace qtts
