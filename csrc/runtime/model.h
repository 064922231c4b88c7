// The immutable model: the file, its ids, speakers, languages and generation defaults, and every
// network (nets/*.h, each loading its own weights). Sessions (session.h) hold everything
// mutable, so one loaded Model serves several sessions.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "nets/code_predictor.h"
#include "nets/codec_encoder.h"
#include "nets/speaker_encoder.h"
#include "nets/talker.h"
#include "nets/vocoder.h"
#include "ops/stock.h"
#include "runtime/codec_ops.h"
#include "runtime/generate.h"
#include "runtime/metadata.h"

namespace qtts {

class GgufFile;

// The load option that picks the audio networks' path (runtime/codec_ops.h); automatic = native
// on a CPU device, portable on any other.
enum class OpsChoice { automatic, native, portable };

// The load option that picks the arithmetic (docs/kernels.md, "Precision"). On a GPU the matrix
// products' (ops/stock.h, Precision); automatic = fast. On the CPU's native path fast computes
// the vocoder's convs in BF16 where the CPU has AMX tiles (ops/conv_gemm.h), automatic
// being fast unless the talker's matrices are F32 (a file kept at full precision); everything
// else, and every choice elsewhere, computes in F32 and reads back as exact.
enum class PrecisionChoice { automatic, exact, fast };

// The file-level metadata (ids, generation defaults, languages, speakers) is the ModelMetadata
// base (runtime/metadata.h), read before the networks.
class Model : public ModelMetadata {
public:
    // device: "auto" (a GPU when libggml offers one, else the CPU), "cpu", or a device name.
    // huge_pages: on the CPU, read the weights every frame streams (the talker's and the code
    // predictor's matrices) into transparent huge pages where the OS has them, instead of mapping
    // them from the file (runtime/host_memory.h).
    Model(const std::string & path, const std::string & device, OpsChoice ops = OpsChoice::automatic,
          bool huge_pages = true, PrecisionChoice precision = PrecisionChoice::automatic);
    ~Model();
    Model(const Model &) = delete;
    Model & operator=(const Model &) = delete;

    std::string path, name, variant, size;
    uint64_t file_size = 0;

    Talker talker;
    CodePredictor code_predictor;
    std::unique_ptr<SpeakerEncoder> speaker_encoder;  // Base models only
    Vocoder vocoder;
    CodecEncoder codec_encoder;

    ggml_backend_dev_t device = nullptr;
    // The path of the vocoder, codec encoder and speaker encoder, and the portable path's conv
    // weights (empty on the native path).
    OpsPath ops = OpsPath::native;
    Precision precision = Precision::exact;
    ConvWeights conv_weights;
    // The fast precision's BF16 copies of the vocoder's convs on the CPU (vocoder_fast_convs;
    // empty otherwise).
    ConvWeights bf16_convs;
    // The native path on the CPU device: the talker's and code predictor's KV caches are
    // attended by the fused op (ops/attend.h), elsewhere by stock ggml ops.
    bool fused_attention = false;
    // component -> "<device name>/<path>", so a silently misplaced network shows up; the talker
    // and code predictor are "native" where their attention is fused.
    std::map<std::string, std::string> component_devices;
    size_t weight_bytes = 0;     // all weight buffers, conv_weights and bf16_convs included
    size_t huge_page_bytes = 0;  // of which read into huge pages
    size_t packed_bytes = 0;     // of which packed for the quantized matmul (ops/qmatmul.h)

    // The loaded weights whose names start with `prefix`, in file order.
    std::vector<const ggml_tensor *> tensors(const std::string & prefix) const;

private:
    // The sizes of the networks read so far, for the checks between them (runtime/metadata.h).
    NetSizes net_sizes() const;

    std::unique_ptr<GgufFile> file_;
    std::vector<ggml_backend_buffer_t> buffers_;
};

ggml_backend_dev_t select_device(const std::string & device);
std::vector<std::string> device_names();

}  // namespace qtts
