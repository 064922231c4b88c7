#include "runtime/model.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "ops/conv_gemm.h"
#include "ops/qmatmul.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/graph.h"
#include "runtime/metadata.h"
#include "runtime/names.h"

namespace qtts {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
    return s;
}

}  // namespace

std::vector<std::string> device_names() {
    std::vector<std::string> out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i)
        out.emplace_back(ggml_backend_dev_name(ggml_backend_dev_get(i)));
    return out;
}

std::vector<const ggml_tensor *> Model::tensors(const std::string & prefix) const {
    std::vector<const ggml_tensor *> out;
    for (ggml_tensor * t = ggml_get_first_tensor(file_->meta()); t; t = ggml_get_next_tensor(file_->meta(), t)) {
        if (t->buffer && std::string(t->name).rfind(prefix, 0) == 0) out.push_back(t);
    }
    return out;
}

ggml_backend_dev_t select_device(const std::string & device) {
    const std::string want = lower(device);
    ggml_backend_dev_t cpu = nullptr;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        enum ggml_backend_dev_type t = ggml_backend_dev_type(d);
        if (t == GGML_BACKEND_DEVICE_TYPE_CPU && !cpu) cpu = d;
        if (want == "auto" && (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU)) return d;
        if (want != "auto" && want != "cpu" && lower(ggml_backend_dev_name(d)) == want) return d;
    }
    if ((want == "auto" || want == "cpu") && cpu) return cpu;
    std::string names;
    for (const std::string & n : device_names()) names += (names.empty() ? "" : ", ") + n;
    fail("unknown device '%s'; available: auto, cpu, %s", device.c_str(), names.c_str());
}

namespace {

// The matrices a generated frame reads whole: every layer's projections, the talker's codec head,
// the code predictor's heads and input projection.
std::set<std::string> streamed_weights(const Talker & t, const CodePredictor & c) {
    std::set<std::string> out;
    auto add = [&](const ggml_tensor * w) {
        if (w) out.insert(w->name);
    };
    for (const Transformer * tfm : {&t.tfm, &c.tfm}) {
        for (const TransformerLayer & l : tfm->layers) {
            for (const ggml_tensor * w : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) add(w);
        }
    }
    add(t.codec_head);
    add(c.mtp_proj);
    for (const ggml_tensor * w : c.lm_head) add(w);
    return out;
}

// Whether the talker's matrices are all F32: a file kept at full precision, whose user chose
// exactness over speed (PrecisionChoice::automatic).
bool all_f32(const Talker & t) {
    if (t.codec_head->type != GGML_TYPE_F32) return false;
    for (const TransformerLayer & l : t.tfm.layers) {
        for (const ggml_tensor * w : layer_matrices(l)) {
            if (w && w->type != GGML_TYPE_F32) return false;
        }
    }
    return true;
}

}  // namespace

Model::Model(const std::string & path_, const std::string & device_name, OpsChoice choice, bool huge_pages,
             PrecisionChoice precision_choice)
    : path(path_) {
    file_ = std::make_unique<GgufFile>(path);
    GgufFile & f = *file_;
    file_size = f.file_size();
    const uint32_t version = f.u32(kv::FORMAT_VERSION);
    if (version != kv::FORMAT) {
        fail("%s: format version %u is not supported by this qtts (expected %u); re-convert the checkpoint",
             path.c_str(), version, kv::FORMAT);
    }
    name = f.has(kv::MODEL_NAME) ? f.str(kv::MODEL_NAME) : "";
    variant = f.str(kv::VARIANT);
    size = f.str(kv::SIZE);
    if (variant != "base" && variant != "custom_voice" && variant != "voice_design") {
        fail("%s: unknown variant '%s'", path.c_str(), variant.c_str());
    }
    read_metadata(f, *this);

    device = select_device(device_name);
    const bool on_cpu = ggml_backend_dev_type(device) == GGML_BACKEND_DEVICE_TYPE_CPU;
    f.keep_mapped_shared(on_cpu && !huge_pages);
    load_talker(f, talker);
    load_code_predictor(f, talker, code_predictor);
    if (variant == "base") {
        speaker_encoder = std::make_unique<SpeakerEncoder>();
        load_speaker_encoder(f, talker.n_embd(), *speaker_encoder);
    }
    check_vocoder_keys(f, net_sizes());
    load_vocoder(f, vocoder);
    check_encoder_keys(f, net_sizes());
    load_codec_encoder(f, codec_encoder);
    check_metadata(f, *this, net_sizes());
    f.check_complete();

    ops =
        choice == OpsChoice::native || (choice == OpsChoice::automatic && on_cpu) ? OpsPath::native : OpsPath::portable;
    if (!on_cpu) {
        precision = precision_choice == PrecisionChoice::exact ? Precision::exact : Precision::fast;
        claim_device_precision(precision, ggml_backend_dev_name(device));
    }
    const bool bf16_vocoder = on_cpu && ops == OpsPath::native && conv_gemm_has_bf16_tiles() &&
                              (precision_choice == PrecisionChoice::fast ||
                               (precision_choice == PrecisionChoice::automatic && !all_f32(talker)));
    std::vector<PanelConv> convs;
    vocoder_convs(vocoder, convs);
    codec_encoder_convs(codec_encoder, convs);
    if (speaker_encoder) speaker_encoder_convs(*speaker_encoder, convs);
    std::set<std::string> panels;
    for (const PanelConv & c : convs) panels.insert(c.panel->name);
    // Native: the audio networks run custom CPU ops (csrc/ops), so on another device their
    // weights stay in host memory and their graphs on the CPU backend. Portable: everything goes
    // to the device but the panels, which are only read here, to make their portable copies.
    const std::vector<std::string> audio = {"codec_dec.", "codec_enc.", "spk_enc."};
    const std::set<std::string> streamed =
        huge_pages && on_cpu ? streamed_weights(talker, code_predictor) : std::set<std::string>{};
    buffers_ = f.place(
        device,
        [&](const char * name) {
            if (ops == OpsPath::portable) return panels.count(name) > 0;
            for (const std::string & p : audio) {
                if (std::string(name).rfind(p, 0) == 0) return true;
            }
            return false;
        },
        streamed);
    huge_page_bytes = f.huge_page_bytes();
    // Matrices in memory of our own are packed for the quantized matmul (ops/qmatmul.h) when
    // graphs are built with it; a mapped file's pages stay as they are. A joined weight is packed
    // whole, its parts with it (TransformerLayer::wqkv). Q8_0 on VNNI CPUs, Q4_K and Q6_K on AMX.
    if (ops == OpsPath::native && matmul_path() == MatmulPath::native) {
        std::vector<ggml_tensor *> matrices = {talker.codec_head, code_predictor.mtp_proj};
        matrices.insert(matrices.end(), code_predictor.lm_head.begin(), code_predictor.lm_head.end());
        for (const Transformer * tfm : {&talker.tfm, &code_predictor.tfm}) {
            for (const TransformerLayer & l : tfm->layers) {
                for (ggml_tensor * w : layer_matrices(l)) matrices.push_back(w);
            }
        }
        for (ggml_tensor * w : matrices) {
            if (!w || !f.in_huge_pages(w) || !qmatmul_packs(w)) continue;
            qmatmul_pack(w);
            packed_bytes += ggml_nbytes(w);
        }
    }
    if (ops == OpsPath::portable) conv_weights.build(convs, device);
    if (bf16_vocoder) {
        std::vector<PanelConv> stack;
        vocoder_fast_convs(vocoder, stack);
        // the F32 panels the copies replace are not read again: their mapped pages leave the
        // process as each copy is made
        bf16_convs.build_bf16(stack, [&f](const ggml_tensor * panel) { f.drop_pages(panel); });
        // fast only where some conv has a BF16 copy (widths that are multiples of 32)
        if (bf16_convs.bytes() > 0) precision = Precision::fast;
    }
    for (ggml_backend_buffer_t b : buffers_) weight_bytes += ggml_backend_buffer_get_size(b);
    weight_bytes -= f.read_not_mapped();  // the file mapping spans them too, unread
    weight_bytes += conv_weights.bytes() + bf16_convs.bytes();
    const std::string dev = ggml_backend_dev_name(device);
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    const bool on_host = ops == OpsPath::native && cpu && ggml_backend_buffer_is_host(vocoder.pre_conv->buffer);
    const std::string audio_dev =
        (on_host ? ggml_backend_dev_name(cpu) : dev) + (ops == OpsPath::native ? "/native" : "/portable");
    fused_attention = ops == OpsPath::native && device == cpu;
    component_devices["talker"] = component_devices["code_predictor"] =
        dev + (fused_attention ? "/native" : "/portable");
    component_devices["codec_decoder"] = component_devices["codec_encoder"] = audio_dev;
    if (speaker_encoder) component_devices["speaker_encoder"] = audio_dev;
}

NetSizes Model::net_sizes() const {
    NetSizes n;
    n.text_vocab = talker.text_vocab;
    n.codec_vocab = talker.codec_vocab;
    n.n_code_groups = talker.n_code_groups;
    n.predictor_vocab = code_predictor.vocab;
    n.dec_quantizers = vocoder.n_quantizers;
    n.dec_codebook_size = vocoder.codebook_size;
    n.dec_sample_rate = vocoder.sample_rate;
    n.dec_hop_length = vocoder.hop_length;
    n.enc_quantizers = codec_encoder.n_quantizers;
    n.enc_codebook_size = codec_encoder.codebook_size;
    n.enc_sample_rate = codec_encoder.sample_rate;
    n.enc_hop_length = codec_encoder.hop_length;
    n.spk_sample_rate = speaker_encoder ? speaker_encoder->sample_rate : 0;
    return n;
}

Model::~Model() {
    for (ggml_backend_buffer_t b : buffers_) ggml_backend_buffer_free(b);
}

}  // namespace qtts
