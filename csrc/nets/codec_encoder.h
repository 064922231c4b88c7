// The codec (Mimi) encoder's carried state: it runs its causal conv stack chunk by chunk
// (codec_encoder.cpp), each conv reading the last input rows of the chunk before.
#pragma once

#include <vector>

#include "ggml-backend.h"
#include "runtime/model.h"

namespace qtts {

class EncoderState {
public:
    EncoderState(const CodecEncoderWeights & w, ggml_backend_t backend);
    ~EncoderState();
    EncoderState(const EncoderState &) = delete;
    EncoderState & operator=(const EncoderState &) = delete;

    std::vector<ggml_tensor *> conv_left;  // per conv: [in, kernel - stride] (null when none)
    std::vector<ggml_tensor *> res_left;   // per residual block: [channels, kernel - 1]

private:
    ggml_context * ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
};

}  // namespace qtts
