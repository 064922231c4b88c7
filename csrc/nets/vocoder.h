// The vocoder (the 12 Hz codec's decoder: codes -> 24 kHz waveform) as a causal stream
// (docs/model.md, "Vocoder"). The network is causal end to end, so a graph over any run of
// frames computes their samples exactly, given the state carried from the frames before: the
// left context of every convolution and the keys and values of the sliding-window transformer.
// The runners below (nets/vocoder_run.cpp) run the reference's chunked decode this way, several
// streams in one graph (docs/serving.md, "Batched vocoder").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "runtime/codec_ops.h"
#include "runtime/graph.h"
#include "runtime/transformer.h"

namespace qtts {

class GgufFile;

// The reference decodes in chunks of 300 frames, each with up to 25 frames of left context and
// positions restarting at 0 (its `chunked_decode`); these are its defaults.
inline constexpr int64_t kDecodeChunk = 300;
inline constexpr int64_t kDecodeContext = 25;
inline constexpr int64_t kPreConvKernel = 3;   // the conv after the RVQ
inline constexpr int64_t kConvNextKernel = 7;  // the upsampling stages' depthwise conv
inline constexpr int64_t kVocKernel = 7;       // the vocoder's input, residual and output convs
inline constexpr int kResidualUnits = 3;      // per vocoder block
inline constexpr int kDilations[kResidualUnits] = {1, 3, 9};
// Attention keys are padded to a multiple of this, ggml's F32 SIMD step, with the padding masked.
inline constexpr int64_t kVocoderKeyPad = 32;

struct Snake {
    ggml_tensor *exp_alpha = nullptr, *inv_beta = nullptr;  // [channels] each
};

// Conv and ConvTranspose weights are conv-GEMM panels (runtime/loader.h) of `taps` taps;
// depthwise kernels are [C, k]. cd = codebook_dim, L = latent_dim, H = transformer width,
// V = decoder_dim (halved by each vocoder block).
struct Vocoder {
    Transformer tfm;  // VOCODER
    int codebook_size = 0, codebook_dim = 0, latent_dim = 0, decoder_dim = 0, n_quantizers = 0;
    int sliding_window = 0, sample_rate = 0, hop_length = 0;
    std::vector<int> upsample_rates, upsampling_ratios;
    std::vector<ggml_tensor *> codebooks;                          // per quantizer: [cd/2, codebook_size]
    ggml_tensor *rvq_first_out = nullptr, *rvq_rest_out = nullptr;  // [cd/2, cd]
    ggml_tensor *pre_conv = nullptr, *pre_conv_b = nullptr;        // cd -> L, kPreConvKernel taps
    ggml_tensor *tfm_in = nullptr, *tfm_in_b = nullptr;            // [L, H]
    ggml_tensor * tfm_norm = nullptr;                               // [H]
    ggml_tensor *tfm_out = nullptr, *tfm_out_b = nullptr;          // [H, L]
    struct Upsample {
        ggml_tensor *conv = nullptr, *conv_b = nullptr;      // L -> ratio * L, 1 tap (ConvTranspose)
        ggml_tensor *dwconv = nullptr, *dwconv_b = nullptr;  // [L, kConvNextKernel]
        ggml_tensor *norm = nullptr, *norm_b = nullptr;      // [L]
        ggml_tensor *pw1 = nullptr, *pw1_b = nullptr;        // L -> 4 L
        ggml_tensor *pw2 = nullptr, *pw2_b = nullptr;        // 4 L -> L
        ggml_tensor * gamma = nullptr;                        // [L]
    };
    std::vector<Upsample> upsample;
    ggml_tensor *voc_in = nullptr, *voc_in_b = nullptr;  // L -> V, kVocKernel taps
    struct Residual {
        Snake snake1, snake2;
        ggml_tensor *conv1 = nullptr, *conv1_b = nullptr;  // out -> out, kVocKernel taps
        ggml_tensor *conv2 = nullptr, *conv2_b = nullptr;  // out -> out, 1 tap
    };
    struct VocBlock {
        Snake snake;                                  // [in]
        ggml_tensor *up = nullptr, *up_b = nullptr;   // in -> 2 r out (ConvTranspose, kernel 2r)
        std::vector<Residual> res;                    // kResidualUnits
    };
    std::vector<VocBlock> voc;  // block b: in = V >> b, out = V >> (b + 1)
    Snake out_snake;
    ggml_tensor *out_conv = nullptr, *out_conv_b = nullptr;  // V >> n_blocks -> 1, kVocKernel taps
};

// The sizes it shares with the talker and the code predictor are checked before (runtime/metadata.h).
void load_vocoder(GgufFile & f, Vocoder & c);
// Every panel weight of the vocoder, for the portable path's copies (runtime/codec_ops.h).
void vocoder_convs(const Vocoder & c, std::vector<PanelConv> & out);
// The panel weights the fast precision computes in BF16 on CPUs with AMX tiles (docs/kernels.md,
// "BF16 convs"): the upsampling's convs (transposed conv, ConvNeXt pw1 and pw2) and the conv
// stack's (voc_in, each block's transposed conv and residual convs).
void vocoder_fast_convs(const Vocoder & c, std::vector<PanelConv> & out);

// The carried state of one chunk's decode ("segment"), zero at the segment's first frame.
class VocoderState {
public:
    VocoderState(const Vocoder & w, ggml_backend_t backend);
    void reset();

    // Never the same for two states: keys a graph built over this state's tensors (CodecRunner::replay).
    const uint64_t id;

    int64_t n_past = 0;  // frames already decoded in this segment
    int64_t n_ctx = 0;   // key/value capacity in frames
    ggml_tensor * pre_conv = nullptr;  // [codebook_dim, kPreConvKernel - 1]: the last RVQ frames
    std::vector<ggml_tensor *> k, v;   // per layer, as new_cache_k / new_cache_v
    std::vector<ggml_tensor *> up;     // [latent, kConvNextKernel - 1] per upsampling stage
    ggml_tensor * voc_in = nullptr;    // [latent, kVocKernel - 1]
    struct Block {
        ggml_tensor * up = nullptr;      // [in, 1]: the last Snake output before the ConvTranspose
        std::vector<ggml_tensor *> res;  // [out, (kVocKernel - 1) * dilation] per residual unit
    };
    std::vector<Block> blocks;
    ggml_tensor * out = nullptr;  // [last, kVocKernel - 1]

private:
    StateBuffer state_;
};

// A named intermediate of the decoder graph, [rows, width] row-major.
struct CodecStage {
    int64_t width = 0;
    std::vector<float> data;
};

// Where a stream of frames stands: the next frame's index and the live segments, chunk c in
// slot c % 2 (chunk c+1 starts warming kDecodeContext frames before chunk c ends).
struct CodecStream {
    int64_t n_frames = 0;
    int64_t silent_until = 0;  // frames before this one give no samples (an ICL reference)
    std::unique_ptr<VocoderState> slot[2];
    int64_t chunk[2] = {-1, -1};
};

// A session's codec streams by id: the data the streaming runners take. Stream 0 always
// exists (the single-stream API's); other ids are opened and closed by their users.
// A closed stream's states are kept for the next stream opened (a few at a time), so that a new
// request's pushes replay the graphs built for the request before it (CodecRunner::replay).
class VocoderStreams {
public:
    // Start stream `id` anew; its first silent_frames frames give no samples.
    void open(int id, int64_t silent_frames);
    // An Error for an id that was not opened.
    CodecStream & get(int id);
    // Forget stream `id` and its state (stream 0 is only reset).
    void close(int id);

private:
    std::map<int, CodecStream> by_id_;
    std::vector<std::unique_ptr<VocoderState>> spare_;
};

// Codes [n, n_quantizers] row-major, each in [0, codebook_size): an Error naming the culprit.
void vocoder_check_codes(const Vocoder & w, const std::vector<int32_t> & codes, int64_t n);

// The reference's chunked decode of n >= 1 frames.
std::vector<float> vocoder_decode(const Vocoder & w, const CodecRunner & r, const std::vector<int32_t> & codes,
                                  int64_t n);

// The next n frames of one stream ([n, n_quantizers] row-major), and their samples.
struct VocoderPush {
    CodecStream * stream = nullptr;
    const int32_t * codes = nullptr;
    int64_t n = 0;
    std::vector<float> out;
};
// Push every stream's frames, the streams stepping together: one graph decodes a segment's
// frames of each stream (as many streams and frames as a graph holds), each from its own state.
// A stream's samples are bit-identical to its pushes one by one, however its frames are split
// (docs/serving.md, "Batched vocoder"). The streams must be distinct.
void vocoder_push(const Vocoder & w, const CodecRunner & r, std::vector<VocoderPush> & pushes);

// Named intermediates ("cd.rvq", "cd.tfm", ...) of one graph over n <= kDecodeChunk frames.
std::vector<CodecStage> vocoder_stages(const Vocoder & w, const CodecRunner & r, const std::vector<int32_t> & codes,
                                       int64_t n, const std::vector<std::string> & stages);

}  // namespace qtts
