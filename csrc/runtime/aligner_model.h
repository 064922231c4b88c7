// A loaded Qwen3-ForcedAligner file (docs/aligner.md): its ids, languages, the audio encoder and
// the decoder (nets/aligner.h), placed on one device. Immutable once loaded, as Model is; an
// AlignerSession (runtime/aligner_session.h) holds what running it changes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "nets/aligner.h"
#include "ops/stock.h"
#include "runtime/codec_ops.h"
#include "runtime/model.h"

namespace qtts {

class GgufFile;

class AlignerModel {
public:
    // device and precision as Model's. ops: native (the CPU's default) attends the decoder's
    // cache with the fused CPU op (ops/attend.h); portable builds every graph from stock ggml
    // ops (the default on any other device).
    AlignerModel(const std::string & path, const std::string & device, OpsChoice ops = OpsChoice::automatic,
                 PrecisionChoice precision = PrecisionChoice::automatic);
    ~AlignerModel();
    AlignerModel(const AlignerModel &) = delete;
    AlignerModel & operator=(const AlignerModel &) = delete;

    std::string path, name;
    uint64_t file_size = 0;
    std::vector<std::string> languages;  // the checkpoint's support_languages, as written there
    int audio_start_id = 0, audio_end_id = 0, audio_pad_id = 0, timestamp_id = 0;
    float segment_ms = 0.0f;  // the time one timestamp class stands for

    AudioEncoder encoder;
    AlignerDecoder decoder;

    ggml_backend_dev_t device = nullptr;
    OpsPath ops = OpsPath::native;
    Precision precision = Precision::exact;
    size_t weight_bytes = 0;

    // The loaded weights whose names start with `prefix`, in file order.
    std::vector<const ggml_tensor *> tensors(const std::string & prefix) const;

private:
    std::unique_ptr<GgufFile> file_;
    std::vector<ggml_backend_buffer_t> buffers_;
};

}  // namespace qtts
