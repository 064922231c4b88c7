// The 12 Hz codec decoder (codes -> 24 kHz waveform) as a causal stream. The network is causal
// end to end, so a graph over any run of frames computes their samples exactly, given the
// state carried from the frames before: the left context of every convolution and the keys
// and values of the sliding-window transformer. Session::decode and the streaming calls
// (nets/vocoder.cpp) run the reference's chunked decode this way.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ggml-backend.h"
#include "runtime/model.h"

namespace qtts {

// The reference decodes in chunks of 300 frames, each with up to 25 frames of left context
// and positions restarting at 0 (`chunked_decode`, spec §6.1); these are its defaults.
constexpr int64_t kCodecChunk = 300;
constexpr int64_t kCodecContext = 25;

// The carried state of one chunk's decode ("segment"), zero at the segment's first frame.
class CodecState {
public:
    CodecState(const CodecDecoderWeights & w, ggml_backend_t backend);
    ~CodecState();
    CodecState(const CodecState &) = delete;
    CodecState & operator=(const CodecState &) = delete;

    void reset();

    int64_t n_past = 0;  // frames already decoded in this segment
    int64_t n_ctx = 0;   // key/value capacity in frames
    ggml_tensor * pre_conv = nullptr;  // [codebook_dim, 2]: the last RVQ frames
    std::vector<ggml_tensor *> k, v;   // [head_dim, n_head_kv, n_ctx] per layer
    std::vector<ggml_tensor *> up;     // [latent, 6] per upsampling stage: ConvNeXt dwconv input
    ggml_tensor * voc_in = nullptr;    // [latent, 6]
    struct Block {
        ggml_tensor * up = nullptr;     // [in, 1]: the last Snake output before the ConvTranspose
        std::vector<ggml_tensor *> res;  // [out, 6*dilation] per residual unit
    };
    std::vector<Block> blocks;
    ggml_tensor * out = nullptr;  // [last, 6]

private:
    ggml_context * ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
};

// A named intermediate of the decoder graph, [rows, width] row-major.
struct CodecStage {
    int64_t width = 0;
    std::vector<float> data;
};

// Where a stream of frames stands: the next frame's index and the live segments, chunk c in
// slot c % 2 (chunk c+1 starts warming 25 frames before chunk c ends).
struct CodecStream {
    int64_t n_frames = 0;
    int64_t silent_until = 0;  // frames before this one give no samples (an ICL reference)
    std::unique_ptr<CodecState> slot[2];
    int64_t chunk[2] = {-1, -1};
};

}  // namespace qtts
