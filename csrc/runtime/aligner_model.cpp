#include "runtime/aligner_model.h"

#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/names.h"

namespace qtts {

AlignerModel::AlignerModel(const std::string & path_, const std::string & device_name, OpsChoice choice,
                           PrecisionChoice precision_choice)
    : path(path_) {
    file_ = std::make_unique<GgufFile>(path, kv::ALIGNER_ARCH_NAME);
    GgufFile & f = *file_;
    file_size = f.file_size();
    const uint32_t version = f.u32(kv::ALIGNER_FORMAT_VERSION);
    if (version != kv::ALIGNER_FORMAT) {
        fail("%s: aligner format version %u is not supported by this qtts (expected %u); re-convert the checkpoint",
             path.c_str(), version, kv::ALIGNER_FORMAT);
    }
    name = f.has(kv::MODEL_NAME) ? f.str(kv::MODEL_NAME) : "";
    if (f.has(kv::ALIGNER_LANGUAGES)) languages = f.str_array(kv::ALIGNER_LANGUAGES);
    load_audio_encoder(f, encoder);
    load_aligner_decoder(f, encoder.out_dim, decoder);
    const int vocab = decoder.vocab;
    audio_start_id = f.count(kv::ALIGNER_AUDIO_START_ID, 0, vocab - 1);
    audio_end_id = f.count(kv::ALIGNER_AUDIO_END_ID, 0, vocab - 1);
    audio_pad_id = f.count(kv::ALIGNER_AUDIO_PAD_ID, 0, vocab - 1);
    timestamp_id = f.count(kv::ALIGNER_TIMESTAMP_ID, 0, vocab - 1);
    segment_ms = f.real(kv::ALIGNER_TIMESTAMP_MS, 0.0f, 1e6f);
    f.check_complete();

    device = select_device(device_name);
    const bool on_cpu = ggml_backend_dev_type(device) == GGML_BACKEND_DEVICE_TYPE_CPU;
    // the fused attention is a CPU op over a cache in host memory
    if (choice == OpsChoice::native && !on_cpu) {
        fail("ops 'native' runs the aligner on the CPU only; use ops 'portable' (or 'auto') on %s",
             ggml_backend_dev_name(device));
    }
    ops = choice == OpsChoice::portable || (choice == OpsChoice::automatic && !on_cpu) ? OpsPath::portable
                                                                                       : OpsPath::native;
    if (!on_cpu) {
        precision = precision_choice == PrecisionChoice::exact ? Precision::exact : Precision::fast;
        claim_device_precision(precision, ggml_backend_dev_name(device));
    }
    buffers_ = f.place(device, [](const char *) { return false; });
    for (ggml_backend_buffer_t b : buffers_) weight_bytes += ggml_backend_buffer_get_size(b);
    weight_bytes -= f.read_not_mapped();
}

AlignerModel::~AlignerModel() {
    for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_free(b);
}

std::vector<const ggml_tensor *> AlignerModel::tensors(const std::string & prefix) const {
    std::vector<const ggml_tensor *> out;
    for (ggml_tensor * t = ggml_get_first_tensor(file_->meta()); t; t = ggml_get_next_tensor(file_->meta(), t)) {
        if (t->buffer && std::string(t->name).rfind(prefix, 0) == 0) out.push_back(t);
    }
    return out;
}

}  // namespace qtts
