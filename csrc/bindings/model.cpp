// qtts._core.Model: a loaded GGUF file, its tables, defaults and weights.
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "ggml-backend.h"
#include "runtime/model.h"

namespace py = pybind11;

namespace qtts {

namespace {

py::dict transformer_dict(const TransformerHParams & hp) {
    py::dict d;
    d["embedding_length"] = hp.n_embd;
    d["feed_forward_length"] = hp.n_ff;
    d["block_count"] = hp.n_layer;
    d["head_count"] = hp.n_head;
    d["head_count_kv"] = hp.n_head_kv;
    d["head_dim"] = hp.head_dim;
    d["norm_eps"] = hp.eps;
    d["rope_freq_base"] = hp.rope_base;
    if (hp.n_ctx) d["context_length"] = hp.n_ctx;
    return d;
}

py::dict hparams(const Model & m) {
    py::dict d;
    py::dict talker = transformer_dict(m.talker.tfm.hp);
    talker["text_vocab_size"] = m.talker.text_vocab;
    talker["text_embedding_length"] = m.talker.text_embd;
    talker["codec_vocab_size"] = m.talker.codec_vocab;
    talker["num_code_groups"] = m.talker.n_code_groups;
    d["talker"] = talker;
    py::dict cp = transformer_dict(m.code_predictor.tfm.hp);
    cp["vocab_size"] = m.code_predictor.vocab;
    cp["has_projection"] = m.code_predictor.mtp_proj != nullptr;
    d["code_predictor"] = cp;
    if (m.speaker_encoder) {
        py::dict s;
        s["embedding_length"] = m.speaker_encoder->embd;
        s["mel_dim"] = m.speaker_encoder->mel_dim;
        s["channels"] = m.speaker_encoder->channels;
        s["sample_rate"] = m.speaker_encoder->sample_rate;
        d["speaker_encoder"] = s;
    }
    py::dict dec = transformer_dict(m.vocoder.tfm.hp);
    dec["num_quantizers"] = m.vocoder.n_quantizers;
    dec["codebook_size"] = m.vocoder.codebook_size;
    dec["sample_rate"] = m.vocoder.sample_rate;
    dec["hop_length"] = m.vocoder.hop_length;
    d["codec_decoder"] = dec;
    py::dict enc = transformer_dict(m.codec_encoder.tfm.hp);
    enc["num_quantizers"] = m.codec_encoder.n_quantizers;
    enc["sample_rate"] = m.codec_encoder.sample_rate;
    enc["hop_length"] = m.codec_encoder.hop_length;
    d["codec_encoder"] = enc;
    return d;
}

}  // namespace

void bind_model(py::module_ & m) {
    py::enum_<OpsChoice>(m, "Ops", "The audio networks' path: native custom CPU ops or portable stock ggml ops.")
        .value("auto", OpsChoice::automatic)
        .value("native", OpsChoice::native)
        .value("portable", OpsChoice::portable);
    py::enum_<PrecisionChoice>(m, "Precision", "The matrix products' arithmetic on a GPU: exact F32 or fast.")
        .value("auto", PrecisionChoice::automatic)
        .value("exact", PrecisionChoice::exact)
        .value("fast", PrecisionChoice::fast);
    py::class_<Model, std::shared_ptr<Model>>(m, "Model")
        .def(py::init([](const std::string & path, const std::string & device, OpsChoice ops, bool huge_pages,
                         PrecisionChoice precision) {
                 py::gil_scoped_release release;
                 return std::make_shared<Model>(path, device, ops, huge_pages, precision);
             }),
             py::arg("path"), py::arg("device") = "auto", py::arg("ops") = OpsChoice::automatic,
             py::arg("huge_pages") = true, py::arg("precision") = PrecisionChoice::automatic)
        .def_property_readonly(
            "precision", [](const Model & model) { return model.precision == Precision::exact ? "exact" : "fast"; },
            "The matrix products' arithmetic: exact (F32) or fast (the device's TF32/BF16 kernels).")
        .def_readonly("huge_page_bytes", &Model::huge_page_bytes,
                      "Bytes of weights read into transparent huge pages (0: all mapped from the file).")
        .def_readonly("packed_bytes", &Model::packed_bytes,
                      "Bytes of Q8_0 weights packed for the quantized matmul's VNNI kernel at load.")
        .def_property_readonly(
            "ops",
            [](const Model & model) { return std::string(model.ops == OpsPath::portable ? "portable" : "native"); })
        .def_property_readonly("portable_weight_bytes", [](const Model & model) { return model.conv_weights.bytes(); })
        .def_readonly("path", &Model::path)
        .def_readonly("name", &Model::name)
        .def_readonly("variant", &Model::variant)
        .def_readonly("size", &Model::size)
        .def_readonly("file_size", &Model::file_size)
        .def_readonly("weight_bytes", &Model::weight_bytes)
        .def_readonly("languages", &Model::languages)
        .def_readonly("component_devices", &Model::component_devices)
        .def_property_readonly("device",
                               [](const Model & model) { return std::string(ggml_backend_dev_name(model.device)); })
        .def_property_readonly("speakers",
                               [](const Model & model) {
                                   std::vector<py::tuple> out;
                                   for (const Speaker & s : model.speakers)
                                       out.push_back(py::make_tuple(s.name, s.id, s.dialect));
                                   return out;
                               })
        .def_property_readonly("text_ids",
                               [](const Model & model) {
                                   py::dict d;
                                   d["im_start"] = model.text_ids.im_start;
                                   d["im_end"] = model.text_ids.im_end;
                                   d["tts_pad"] = model.text_ids.pad;
                                   d["tts_bos"] = model.text_ids.bos;
                                   d["tts_eos"] = model.text_ids.eos;
                                   return d;
                               })
        .def_property_readonly("codec_ids",
                               [](const Model & model) {
                                   py::dict d;
                                   d["pad"] = model.codec_ids.pad;
                                   d["bos"] = model.codec_ids.bos;
                                   d["eos"] = model.codec_ids.eos;
                                   d["think"] = model.codec_ids.think;
                                   d["nothink"] = model.codec_ids.nothink;
                                   d["think_bos"] = model.codec_ids.think_bos;
                                   d["think_eos"] = model.codec_ids.think_eos;
                                   return d;
                               })
        .def_readonly("generation_defaults", &Model::gen)
        .def_property_readonly("hparams", &hparams)
        .def(
            "tensor_info",
            [](const Model & model) {
                py::list out;
                for (const ggml_tensor * t : model.tensors("")) {
                    out.append(
                        py::make_tuple(std::string(t->name), std::string(ggml_type_name(t->type)), ggml_nelements(t)));
                }
                return out;
            },
            "(name, type, element count) of every weight, in file order.")
        .def(
            "tensor_data",
            [](const Model & model, const std::string & prefix) {
                py::list out;
                for (const ggml_tensor * t : model.tensors(prefix)) {
                    std::string data(ggml_nbytes(t), '\0');
                    ggml_backend_tensor_get(t, data.data(), 0, data.size());
                    out.append(
                        py::make_tuple(std::string(t->name), std::string(ggml_type_name(t->type)), py::bytes(data)));
                }
                return out;
            },
            py::arg("prefix"), "(name, type, raw bytes) of every weight whose name starts with prefix.");
}

}  // namespace qtts
