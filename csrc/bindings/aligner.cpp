// qtts._core.AlignerModel and AlignerSession: a loaded Qwen3-ForcedAligner file and the graphs
// over it (docs/aligner.md). The aligner's text and audio front ends are Python's
// (qtts/runtime/aligner/aligner.py); these take token ids, log-mel frames and encoder rows.
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "ggml-backend.h"
#include "gguf.h"
#include "runtime/aligner_session.h"
#include "runtime/error.h"

namespace py = pybind11;

namespace qtts {

namespace {

py::dict aligner_hparams(const AlignerModel & m) {
    const AudioEncoder & e = m.encoder;
    py::dict enc;
    enc["sample_rate"] = e.sample_rate;
    enc["n_fft"] = e.n_fft;
    enc["hop_length"] = e.hop;
    enc["mel_bins"] = e.n_mels;
    enc["conv_channels"] = e.channels;
    enc["embedding_length"] = e.n_embd;
    enc["feed_forward_length"] = e.n_ff;
    enc["block_count"] = e.n_layer;
    enc["head_count"] = e.n_head;
    enc["output_length"] = e.out_dim;
    enc["chunk_frames"] = e.chunk_frames;
    enc["window_frames"] = e.window_frames;
    const TransformerHParams & hp = m.decoder.tfm.hp;
    py::dict dec;
    dec["embedding_length"] = hp.n_embd;
    dec["feed_forward_length"] = hp.n_ff;
    dec["block_count"] = hp.n_layer;
    dec["head_count"] = hp.n_head;
    dec["head_count_kv"] = hp.n_head_kv;
    dec["head_dim"] = hp.head_dim;
    dec["context_length"] = hp.n_ctx;
    dec["rope_freq_base"] = hp.rope_base;
    dec["vocab_size"] = m.decoder.vocab;
    dec["timestamp_classes"] = m.decoder.n_classes;
    py::dict d;
    d["audio_encoder"] = enc;
    d["decoder"] = dec;
    return d;
}

}  // namespace

void bind_aligner(py::module_ & m) {
    m.def(
        "file_architecture",
        [](const std::string & path) {
            // the header alone; the loaders check everything else
            gguf_context * g = gguf_init_from_file(path.c_str(), {/*no_alloc=*/true, /*ctx=*/nullptr});
            std::string arch;
            if (!g) return arch;
            const int64_t key = gguf_find_key(g, "general.architecture");
            if (key >= 0 && gguf_get_kv_type(g, key) == GGUF_TYPE_STRING) arch = gguf_get_val_str(g, key);
            gguf_free(g);
            return arch;
        },
        py::arg("path"), "general.architecture of a GGUF file, or \"\" where it has none or cannot be read.");
    py::class_<AlignerModel, std::shared_ptr<AlignerModel>>(m, "AlignerModel")
        .def(py::init(
                 [](const std::string & path, const std::string & device, OpsChoice ops, PrecisionChoice precision) {
                     py::gil_scoped_release release;
                     return std::make_shared<AlignerModel>(path, device, ops, precision);
                 }),
             py::arg("path"), py::arg("device") = "auto", py::arg("ops") = OpsChoice::automatic,
             py::arg("precision") = PrecisionChoice::automatic)
        .def_readonly("path", &AlignerModel::path)
        .def_readonly("name", &AlignerModel::name)
        .def_readonly("file_size", &AlignerModel::file_size)
        .def_readonly("languages", &AlignerModel::languages)
        .def_readonly("segment_ms", &AlignerModel::segment_ms)
        .def_readonly("weight_bytes", &AlignerModel::weight_bytes)
        .def_property_readonly("ids",
                               [](const AlignerModel & a) {
                                   py::dict d;
                                   d["audio_start"] = a.audio_start_id;
                                   d["audio_end"] = a.audio_end_id;
                                   d["audio_pad"] = a.audio_pad_id;
                                   d["timestamp"] = a.timestamp_id;
                                   return d;
                               })
        .def_property_readonly("device",
                               [](const AlignerModel & a) { return std::string(ggml_backend_dev_name(a.device)); })
        .def_property_readonly(
            "ops",
            [](const AlignerModel & a) { return std::string(a.ops == OpsPath::portable ? "portable" : "native"); })
        .def_property_readonly("hparams", &aligner_hparams)
        .def(
            "tokens", [](const AlignerModel & a, int64_t n_frames) { return a.encoder.tokens(n_frames); },
            py::arg("n_frames"), "The audio positions of the prompt for n_frames mel frames.")
        .def(
            "tensor_info",
            [](const AlignerModel & a) {
                py::list out;
                for (const ggml_tensor * t : a.tensors("")) {
                    out.append(
                        py::make_tuple(std::string(t->name), std::string(ggml_type_name(t->type)), ggml_nelements(t)));
                }
                return out;
            },
            "(name, type, element count) of every weight, in file order.");

    py::class_<AlignerSession>(m, "AlignerSession")
        .def(py::init([](std::shared_ptr<AlignerModel> model, int n_threads) {
                 py::gil_scoped_release release;
                 return std::make_unique<AlignerSession>(std::move(model), n_threads);
             }),
             py::arg("model"), py::arg("n_threads") = 1)
        .def(
            "encode",
            [](AlignerSession & s, const FloatRows & mel) {
                const int n_mels = s.model().encoder.n_mels;
                if (mel.ndim() != 2 || mel.shape(0) != n_mels) {
                    throw Error(format("mel must have shape [%d, frames]", n_mels));
                }
                const int64_t frames = mel.shape(1);
                std::vector<float> x(mel.data(), mel.data() + mel.size()), out;
                {
                    py::gil_scoped_release release;
                    out = s.encode(x, frames);
                }
                return matrix(out, s.model().encoder.out_dim);
            },
            py::arg("mel"), "The audio encoder's output [tokens, width] of a log-mel [mel_bins, frames].")
        .def(
            "encode_stages",
            [](AlignerSession & s, const FloatRows & mel, const std::vector<std::string> & names) {
                const int n_mels = s.model().encoder.n_mels;
                if (mel.ndim() != 2 || mel.shape(0) != n_mels) {
                    throw Error(format("mel must have shape [%d, frames]", n_mels));
                }
                std::vector<float> x(mel.data(), mel.data() + mel.size());
                std::vector<std::vector<float>> got;
                {
                    py::gil_scoped_release release;
                    s.encode(x, mel.shape(1), names, &got);
                }
                py::dict d;
                for (size_t i = 0; i < names.size(); ++i) d[py::str(names[i])] = samples(got[i]);
                return d;
            },
            py::arg("mel"), py::arg("names"),
            "Named encoder intermediates (flat, ggml order), each window's after the previous one's (tests).")
        .def(
            "timestamp_logits",
            [](AlignerSession & s, const std::vector<int32_t> & ids, const FloatRows & audio) {
                int n = 0;
                std::vector<float> rows_in = rows(audio, s.model().decoder.tfm.hp.n_embd, "audio", &n), out;
                {
                    py::gil_scoped_release release;
                    out = s.timestamp_logits(ids, rows_in, n);
                }
                return matrix(out, s.model().decoder.n_classes);
            },
            py::arg("ids"), py::arg("audio"),
            "The timestamp logits [slots, classes] of a prompt of token ids whose audio_pad run takes the rows of "
            "audio [n, width].")
        .def("set_profiling", &AlignerSession::set_profiling, py::arg("on"),
             "Per-op time accounting (graphs then run node by node): profile() gives ms by \"phase/op\".")
        .def("profile", &AlignerSession::profile)
        .def("set_op_census", &AlignerSession::set_op_census, py::arg("on"),
             "Count each computed node by its op, types and source views (graphs then run node by node).")
        .def("op_census", &AlignerSession::op_census, "Computed nodes per signature since the census was turned on.")
        .def("memory", &AlignerSession::memory)
        .def("release_buffers", &AlignerSession::release_buffers);
}

}  // namespace qtts
