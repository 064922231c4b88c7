// The immutable model: hyper-parameters, tables and weights of every network in one GGUF file.
// Sessions (session.h) hold everything mutable, so one loaded Model serves several sessions.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"

namespace qtts {

struct TransformerHParams {
    int n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0;
    float eps = 0.0f, rope_base = 0.0f;
};

struct LayerWeights {
    ggml_tensor *attn_norm = nullptr, *attn_norm_b = nullptr;
    ggml_tensor *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
    ggml_tensor *q_norm = nullptr, *k_norm = nullptr, *attn_scale = nullptr;
    ggml_tensor *ffn_norm = nullptr, *ffn_norm_b = nullptr;
    ggml_tensor *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr, *ffn_scale = nullptr;
};

struct TalkerWeights {
    TransformerHParams hp;
    int text_vocab = 0, text_embd = 0, codec_vocab = 0, n_code_groups = 0;
    std::vector<int> mrope_section;
    ggml_tensor *text_tok = nullptr, *fc1 = nullptr, *fc1_b = nullptr, *fc2 = nullptr, *fc2_b = nullptr;
    ggml_tensor *codec_embd = nullptr, *output_norm = nullptr, *codec_head = nullptr;
    std::vector<LayerWeights> layers;
};

struct CodePredictorWeights {
    TransformerHParams hp;
    int vocab = 0;
    std::vector<LayerWeights> layers;
    ggml_tensor *output_norm = nullptr, *mtp_proj = nullptr, *mtp_proj_b = nullptr;
    std::vector<ggml_tensor *> codec_embd, lm_head;
};

struct SpeakerEncoderWeights {
    int embd = 0, mel_dim = 0, attn_channels = 0, res2net_scale = 0, se_channels = 0, sample_rate = 0;
    std::vector<int> channels, kernel_sizes, dilations;
    ggml_tensor *conv0 = nullptr, *conv0_b = nullptr;
    struct Block {
        ggml_tensor *tdnn1 = nullptr, *tdnn1_b = nullptr, *tdnn2 = nullptr, *tdnn2_b = nullptr;
        ggml_tensor *se1 = nullptr, *se1_b = nullptr, *se2 = nullptr, *se2_b = nullptr;
        std::vector<ggml_tensor *> res2net, res2net_b;
    };
    std::vector<Block> blocks;
    // the attention TDNN reads [x; mean; std]: x through panels, the time-constant stats as a matrix
    ggml_tensor *mfa = nullptr, *mfa_b = nullptr, *asp_tdnn = nullptr, *asp_tdnn_stats = nullptr, *asp_tdnn_b = nullptr;
    ggml_tensor *asp_conv = nullptr, *asp_conv_b = nullptr, *fc = nullptr, *fc_b = nullptr;
};

struct Snake {
    ggml_tensor *exp_alpha = nullptr, *inv_beta = nullptr;
};

// Conv and ConvTranspose weights are in the conv-GEMM panel layout [P, in, k, out/P]
// (python/qtts/convert.py, ops/vocoder_ops.h); depthwise kernels are [C, k].
struct CodecDecoderWeights {
    TransformerHParams hp;
    int codebook_size = 0, codebook_dim = 0, latent_dim = 0, decoder_dim = 0, n_quantizers = 0;
    int sliding_window = 0, sample_rate = 0, hop_length = 0;
    std::vector<int> upsample_rates, upsampling_ratios;
    std::vector<ggml_tensor *> codebooks;
    ggml_tensor *rvq_first_out = nullptr, *rvq_rest_out = nullptr, *pre_conv = nullptr, *pre_conv_b = nullptr;
    ggml_tensor *tfm_in = nullptr, *tfm_in_b = nullptr, *tfm_norm = nullptr, *tfm_out = nullptr, *tfm_out_b = nullptr;
    std::vector<LayerWeights> layers;
    struct Upsample {
        ggml_tensor *conv = nullptr, *conv_b = nullptr, *dwconv = nullptr, *dwconv_b = nullptr;
        ggml_tensor *norm = nullptr, *norm_b = nullptr, *pw1 = nullptr, *pw1_b = nullptr;
        ggml_tensor *pw2 = nullptr, *pw2_b = nullptr, *gamma = nullptr;
    };
    std::vector<Upsample> upsample;
    ggml_tensor *voc_in = nullptr, *voc_in_b = nullptr;
    struct Residual {
        Snake snake1, snake2;
        ggml_tensor *conv1 = nullptr, *conv1_b = nullptr, *conv2 = nullptr, *conv2_b = nullptr;
    };
    struct VocBlock {
        Snake snake;
        ggml_tensor *up = nullptr, *up_b = nullptr;
        std::vector<Residual> res;
    };
    std::vector<VocBlock> voc;
    Snake out_snake;
    ggml_tensor *out_conv = nullptr, *out_conv_b = nullptr;
};

struct CodecEncoderWeights {
    TransformerHParams hp;
    int n_filters = 0, kernel_size = 0, last_kernel_size = 0, residual_kernel_size = 0;
    int dilation_growth_rate = 0, compress = 0, codebook_size = 0, codebook_dim = 0, n_quantizers = 0;
    int sample_rate = 0, hop_length = 0, down_stride = 0;
    std::vector<int> ratios;  // SEANet downsampling order (reversed upsampling_ratios)
    struct Conv {
        int layer = 0, in = 0, out = 0, kernel = 0, stride = 1;
        ggml_tensor *w = nullptr, *b = nullptr;
    };
    struct Residual {
        int layer = 0;
        ggml_tensor *conv1 = nullptr, *conv1_b = nullptr, *conv2 = nullptr, *conv2_b = nullptr;
    };
    std::vector<Conv> convs;
    std::vector<Residual> res;
    std::vector<LayerWeights> layers;
    ggml_tensor *downsample = nullptr, *sem_in = nullptr, *acu_in = nullptr;
    std::vector<ggml_tensor *> sem_codebooks, acu_codebooks;
};

struct TextIds {
    int im_start = 0, im_end = 0, pad = 0, bos = 0, eos = 0;
};

struct CodecIds {
    int pad = 0, bos = 0, eos = 0, think = 0, nothink = 0, think_bos = 0, think_eos = 0;
};

struct GenerationDefaults {
    bool do_sample = true, sub_do_sample = true;
    float temperature = 0.9f, top_p = 1.0f, repetition_penalty = 1.05f, sub_temperature = 0.9f, sub_top_p = 1.0f;
    int top_k = 50, sub_top_k = 50, max_new_tokens = 2048;
};

struct Speaker {
    std::string name, dialect;
    int id = 0;
};

class GgufFile;

class Model {
public:
    // device: "auto" (a GPU when libggml offers one, else the CPU), "cpu", or a device name.
    Model(const std::string & path, const std::string & device);
    ~Model();
    Model(const Model &) = delete;
    Model & operator=(const Model &) = delete;

    std::string path, name, variant, size;
    uint64_t file_size = 0;
    TextIds text_ids;
    CodecIds codec_ids;
    GenerationDefaults gen;
    std::map<std::string, int> languages;
    std::vector<Speaker> speakers;

    TalkerWeights talker;
    CodePredictorWeights code_pred;
    std::unique_ptr<SpeakerEncoderWeights> speaker_encoder;  // Base models only
    CodecDecoderWeights codec_decoder;
    CodecEncoderWeights codec_encoder;

    ggml_backend_dev_t device = nullptr;
    // component -> device name, so a silently misplaced network shows up (peers.md §7.7)
    std::map<std::string, std::string> component_devices;
    size_t weight_bytes = 0;

    // The loaded weights whose names start with `prefix`, in file order.
    std::vector<const ggml_tensor *> tensors(const std::string & prefix) const;

private:
    std::unique_ptr<GgufFile> file_;
    std::vector<ggml_backend_buffer_t> buffers_;
};

ggml_backend_dev_t select_device(const std::string & device);
std::vector<std::string> device_names();

}  // namespace qtts
