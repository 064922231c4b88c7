// Python bindings (qtts._core). The GIL is released while ggml computes.
#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/names.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "runtime/model.h"
#include "runtime/sampling.h"
#include "runtime/session.h"

namespace py = pybind11;
using namespace qtts;

void bind_ops(py::module_ & mod);  // bindings/ops.cpp

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
    py::dict talker = transformer_dict(m.talker.hp);
    talker["text_vocab_size"] = m.talker.text_vocab;
    talker["text_embedding_length"] = m.talker.text_embd;
    talker["codec_vocab_size"] = m.talker.codec_vocab;
    talker["num_code_groups"] = m.talker.n_code_groups;
    d["talker"] = talker;
    py::dict cp = transformer_dict(m.code_pred.hp);
    cp["vocab_size"] = m.code_pred.vocab;
    cp["has_projection"] = m.code_pred.mtp_proj != nullptr;
    d["code_predictor"] = cp;
    if (m.speaker_encoder) {
        py::dict s;
        s["embedding_length"] = m.speaker_encoder->embd;
        s["mel_dim"] = m.speaker_encoder->mel_dim;
        s["channels"] = m.speaker_encoder->channels;
        s["sample_rate"] = m.speaker_encoder->sample_rate;
        d["speaker_encoder"] = s;
    }
    py::dict dec = transformer_dict(m.codec_decoder.hp);
    dec["num_quantizers"] = m.codec_decoder.n_quantizers;
    dec["codebook_size"] = m.codec_decoder.codebook_size;
    dec["sample_rate"] = m.codec_decoder.sample_rate;
    dec["hop_length"] = m.codec_decoder.hop_length;
    d["codec_decoder"] = dec;
    py::dict enc = transformer_dict(m.codec_encoder.hp);
    enc["num_quantizers"] = m.codec_encoder.n_quantizers;
    enc["sample_rate"] = m.codec_encoder.sample_rate;
    enc["hop_length"] = m.codec_encoder.hop_length;
    d["codec_encoder"] = enc;
    return d;
}

using FloatRows = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A [n, width] float matrix from Python, checked and copied (the copy is then used without the GIL).
std::vector<float> rows(const FloatRows & a, int width, const char * what, int * n) {
    if (a.ndim() != 2 || a.shape(1) != width) {
        throw Error(format("%s must have shape [n, %d]", what, width));
    }
    *n = static_cast<int>(a.shape(0));
    return std::vector<float>(a.data(), a.data() + a.size());
}

// Codec codes [n, groups] from any integer array; the core checks their range.
std::vector<int32_t> code_rows(const py::array & a, int groups, int64_t * n) {
    if (a.ndim() != 2 || a.shape(1) != groups) throw Error(format("codes must have shape [n, %d]", groups));
    if (a.dtype().kind() != 'i' && a.dtype().kind() != 'u') throw Error("codes must be an integer array");
    auto v = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    *n = a.shape(0);
    std::vector<int32_t> out(static_cast<size_t>(v.size()));
    for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<int32_t>(std::clamp<int64_t>(v.data()[i], -1, INT32_MAX));
    }
    return out;
}

py::array_t<float> samples(const std::vector<float> & v) { return py::array_t<float>(v.size(), v.data()); }

py::array_t<float> matrix(const std::vector<float> & v, py::ssize_t width) {
    py::array_t<float> arr({static_cast<py::ssize_t>(v.size()) / width, width});
    std::memcpy(arr.mutable_data(), v.data(), v.size() * sizeof(float));
    return arr;
}

SamplingParams sampling(bool do_sample, float temperature, int top_k, float top_p) {
    SamplingParams p;
    p.do_sample = do_sample;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    return p;
}

py::tuple talker_output(const TalkerOutput & out) {
    return py::make_tuple(py::array_t<float>(out.logits.size(), out.logits.data()),
                          py::array_t<float>(out.hidden.size(), out.hidden.data()));
}

GenerateParams generate_params(const py::dict & kw) {
    GenerateParams gp;
    gp.talker = sampling(kw["do_sample"].cast<bool>(), kw["temperature"].cast<float>(), kw["top_k"].cast<int>(),
                         kw["top_p"].cast<float>());
    gp.predictor = sampling(kw["subtalker_dosample"].cast<bool>(), kw["subtalker_temperature"].cast<float>(),
                            kw["subtalker_top_k"].cast<int>(), kw["subtalker_top_p"].cast<float>());
    gp.repetition_penalty = kw["repetition_penalty"].cast<float>();
    gp.max_new_tokens = kw["max_new_tokens"].cast<int>();
    gp.seed = kw["seed"].cast<uint64_t>();
    gp.max_frames = kw["max_frames"].cast<int>();
    gp.min_new_tokens = kw["min_new_tokens"].cast<int>();
    return gp;
}

// Runs `body` without the GIL while the loop polls Python's signal handlers once per frame:
// a KeyboardInterrupt raised by Ctrl-C stops the generation and propagates once the GIL is back.
GenerateResult interruptible(const std::function<GenerateResult(const std::function<bool()> &)> & body) {
    bool interrupted = false;
    auto should_stop = [&interrupted]() {
        py::gil_scoped_acquire gil;
        interrupted = PyErr_CheckSignals() != 0;
        return interrupted;
    };
    GenerateResult r;
    {
        py::gil_scoped_release release;
        r = body(should_stop);
    }
    if (interrupted) throw py::error_already_set();
    return r;
}

py::tuple generate_result(const Session & s, const GenerateResult & r) {
    const py::ssize_t groups = s.model().talker.n_code_groups;
    py::array_t<int32_t> codes({static_cast<py::ssize_t>(r.frames), groups});
    if (!r.codes.empty()) std::memcpy(codes.mutable_data(), r.codes.data(), r.codes.size() * sizeof(int32_t));
    py::dict timings;
    timings["prefill_ms"] = r.prefill_ms;
    timings["talker_ms"] = r.talker_ms;
    timings["predictor_ms"] = r.predictor_ms;
    py::object reason = r.stop_reason.empty() ? py::object(py::none()) : py::object(py::str(r.stop_reason));
    return py::make_tuple(codes, reason, timings);
}

py::tuple generate(Session & s, const FloatRows & prompt, const FloatRows & trailing, const py::dict & kw) {
    const int d = s.model().talker.hp.n_embd;
    int n_prompt = 0, n_trailing = 0;
    std::vector<float> p = rows(prompt, d, "prompt", &n_prompt), t = rows(trailing, d, "trailing", &n_trailing);
    GenerateParams gp = generate_params(kw);
    GenerateResult r = interruptible([&](const std::function<bool()> & stop) {
        gp.should_stop = stop;
        return s.generate(p, n_prompt, t, n_trailing, gp);
    });
    py::tuple out = generate_result(s, r);
    out[2].cast<py::dict>()["frames"] = r.frames;
    return out;
}

void generate_begin(Session & s, const FloatRows & prompt, const FloatRows & trailing, const py::dict & kw) {
    const int d = s.model().talker.hp.n_embd;
    int n_prompt = 0, n_trailing = 0;
    std::vector<float> p = rows(prompt, d, "prompt", &n_prompt), t = rows(trailing, d, "trailing", &n_trailing);
    GenerateParams gp = generate_params(kw);
    py::gil_scoped_release release;
    s.generate_begin(p, n_prompt, t, n_trailing, gp);
}

py::tuple generate_next(Session & s, int max_frames) {
    if (max_frames < 1) throw Error(format("generate_next: max_frames must be at least 1, got %d", max_frames));
    GenerateResult r = interruptible([&](const std::function<bool()> & stop) { return s.generate_next(max_frames, stop); });
    return generate_result(s, r);
}

// Codes [n, n_quantizers] in, samples out, through one of the session's codec entry points.
py::array_t<float> run_codec(Session & s, const py::array & codes,
                             std::vector<float> (Session::*fn)(const std::vector<int32_t> &, int64_t)) {
    int64_t n = 0;
    std::vector<int32_t> c = code_rows(codes, s.model().codec_decoder.n_quantizers, &n);
    std::vector<float> out;
    {
        py::gil_scoped_release release;
        out = (s.*fn)(c, n);
    }
    return samples(out);
}

ggml_type quant_type(const std::string & name) {
    static const std::pair<const char *, ggml_type> types[] = {
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_k", GGML_TYPE_Q4_K}, {"q5_k", GGML_TYPE_Q5_K}, {"q6_k", GGML_TYPE_Q6_K}};
    for (const auto & [n, t] : types) {
        if (name == n) return t;
    }
    throw Error(format("quantize: unknown type '%s' (expected q8_0, q4_k, q5_k or q6_k)", name.c_str()));
}

// ggml's reference quantizers on rows [nrows, n_per_row]; rows are split over threads, each
// writing its own byte range of the result (ggml_quantize_chunk is thread-safe and offsets both
// src and dst by its `start` element itself).
py::bytes quantize_rows(const FloatRows & a, const std::string & type_name, int n_threads) {
    const ggml_type type = quant_type(type_name);
    if (a.ndim() != 2) throw Error(format("quantize: expected a 2-D array of rows, got %d dimensions", (int) a.ndim()));
    const int64_t nrows = a.shape(0), n_per_row = a.shape(1), blck = ggml_blck_size(type);
    if (n_per_row <= 0 || n_per_row % blck != 0) {
        throw Error(format("quantize: rows of %lld values are not a whole number of %s blocks (%lld)",
                           (long long) n_per_row, ggml_type_name(type), (long long) blck));
    }
    if (ggml_quantize_requires_imatrix(type)) {
        throw Error(format("quantize: %s needs an importance matrix", ggml_type_name(type)));
    }
    if (n_threads < 1) throw Error("quantize: n_threads must be at least 1");
    const size_t row_size = ggml_row_size(type, n_per_row);
    // filled in place without the GIL: nothing else can see the object before it is returned
    PyObject * raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(row_size * nrows));
    if (!raw) throw py::error_already_set();
    py::bytes out = py::reinterpret_steal<py::bytes>(raw);
    char * dst = PyBytes_AS_STRING(raw);
    const float * src = a.data();
    {
        py::gil_scoped_release release;
        ggml_quantize_init(type);
        const int64_t n_workers = std::max<int64_t>(1, std::min<int64_t>(n_threads, nrows));
        const int64_t per = (nrows + n_workers - 1) / n_workers;
        auto work = [&](int64_t r0) {
            const int64_t r1 = std::min(nrows, r0 + per);
            if (r0 < r1) ggml_quantize_chunk(type, src, dst, r0 * n_per_row, r1 - r0, n_per_row, nullptr);
        };
        std::vector<std::thread> pool;
        for (int64_t w = 1; w < n_workers; ++w) pool.emplace_back(work, w * per);
        work(0);
        for (std::thread & t : pool) t.join();
    }
    return out;
}

}  // namespace

PYBIND11_MODULE(_core, mod) {
    mod.doc() = "qtts native core: Qwen3-TTS on ggml";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const Error & e) {
            // messages quote names from the file, which a corrupt file can make invalid UTF-8
            PyObject * msg = PyUnicode_DecodeUTF8(e.what(), static_cast<Py_ssize_t>(std::strlen(e.what())), "replace");
            PyErr_SetObject(PyExc_ValueError, msg);
            Py_XDECREF(msg);
        }
    });

    mod.def(
        "read_tokenizer",
        [](const std::string & path) {
            std::vector<std::string> tokens, merges;
            std::vector<int32_t> types;
            {
                py::gil_scoped_release release;
                GgufFile f(path);  // the native parser: gguf-py takes seconds over a 151k vocabulary
                for (const char * key : {kv::TOKENIZER_TOKENS, kv::TOKENIZER_TOKEN_TYPE, kv::TOKENIZER_MERGES}) {
                    if (!f.has(key)) fail("%s: metadata key '%s' is missing (no tokenizer in this file)", path.c_str(), key);
                }
                tokens = f.str_array(kv::TOKENIZER_TOKENS);
                types = f.i32_array(kv::TOKENIZER_TOKEN_TYPE);
                merges = f.str_array(kv::TOKENIZER_MERGES);
            }
            return py::make_tuple(tokens, types, merges);
        },
        py::arg("path"), "(tokens, token types, merges) of a qtts GGUF file.");
    mod.def(
        "sample_tokens",
        [](const FloatRows & logits, bool do_sample, float temperature, int top_k, float top_p, uint64_t seed) {
            if (logits.ndim() != 2 || logits.shape(1) < 1) throw Error("sample_tokens: logits must be [n, vocab]");
            SamplingParams p{do_sample, temperature, top_k, top_p};
            std::mt19937_64 rng(seed);
            const py::ssize_t n = logits.shape(0), v = logits.shape(1);
            std::vector<int32_t> out(static_cast<size_t>(n));
            std::vector<float> row(static_cast<size_t>(v));
            py::gil_scoped_release release;
            for (py::ssize_t i = 0; i < n; ++i) {
                std::copy(logits.data() + i * v, logits.data() + (i + 1) * v, row.begin());
                out[static_cast<size_t>(i)] = select_token(row, p, rng);
            }
            return out;
        },
        py::arg("logits"), py::arg("do_sample"), py::arg("temperature"), py::arg("top_k"), py::arg("top_p"),
        py::arg("seed"), "One token per row with the generation loop's sampler (tests and micro-benchmarks).");
    mod.def("ggml_version", []() { return std::string(ggml_version()); });
    mod.def("quantize", &quantize_rows, py::arg("rows"), py::arg("type"), py::arg("n_threads") = 1,
            "Quantize float32 rows [n, n_per_row] to q8_0, q4_k, q5_k or q6_k with ggml; the raw blocks.");
    mod.def("devices", []() {
        std::vector<py::dict> out;
        for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
            ggml_backend_dev_t d = ggml_backend_dev_get(i);
            py::dict e;
            e["name"] = ggml_backend_dev_name(d);
            e["description"] = ggml_backend_dev_description(d);
            switch (ggml_backend_dev_type(d)) {
                case GGML_BACKEND_DEVICE_TYPE_CPU: e["type"] = "cpu"; break;
                case GGML_BACKEND_DEVICE_TYPE_GPU: e["type"] = "gpu"; break;
                case GGML_BACKEND_DEVICE_TYPE_IGPU: e["type"] = "igpu"; break;
                default: e["type"] = "accel"; break;
            }
            out.push_back(e);
        }
        return out;
    });
    mod.def("cpu_features", []() {
        std::vector<std::string> out;
        ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
        auto get = reg ? (ggml_backend_get_features_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features")
                       : nullptr;
        if (get) {
            for (ggml_backend_feature * f = get(reg); f && f->name; ++f) out.emplace_back(f->name);
        }
        return out;
    });

    py::class_<Model, std::shared_ptr<Model>>(mod, "Model")
        .def(py::init([](const std::string & path, const std::string & device) {
                 py::gil_scoped_release release;
                 return std::make_shared<Model>(path, device);
             }),
             py::arg("path"), py::arg("device") = "auto")
        .def_readonly("path", &Model::path)
        .def_readonly("name", &Model::name)
        .def_readonly("variant", &Model::variant)
        .def_readonly("size", &Model::size)
        .def_readonly("file_size", &Model::file_size)
        .def_readonly("weight_bytes", &Model::weight_bytes)
        .def_readonly("languages", &Model::languages)
        .def_readonly("component_devices", &Model::component_devices)
        .def_property_readonly("device", [](const Model & m) { return std::string(ggml_backend_dev_name(m.device)); })
        .def_property_readonly("speakers",
                               [](const Model & m) {
                                   std::vector<py::tuple> out;
                                   for (const Speaker & s : m.speakers) out.push_back(py::make_tuple(s.name, s.id, s.dialect));
                                   return out;
                               })
        .def_property_readonly("text_ids",
                               [](const Model & m) {
                                   py::dict d;
                                   d["im_start"] = m.text_ids.im_start;
                                   d["im_end"] = m.text_ids.im_end;
                                   d["tts_pad"] = m.text_ids.pad;
                                   d["tts_bos"] = m.text_ids.bos;
                                   d["tts_eos"] = m.text_ids.eos;
                                   return d;
                               })
        .def_property_readonly("codec_ids",
                               [](const Model & m) {
                                   py::dict d;
                                   d["pad"] = m.codec_ids.pad;
                                   d["bos"] = m.codec_ids.bos;
                                   d["eos"] = m.codec_ids.eos;
                                   d["think"] = m.codec_ids.think;
                                   d["nothink"] = m.codec_ids.nothink;
                                   d["think_bos"] = m.codec_ids.think_bos;
                                   d["think_eos"] = m.codec_ids.think_eos;
                                   return d;
                               })
        .def_property_readonly("generation_defaults",
                               [](const Model & m) {
                                   py::dict d;
                                   d["do_sample"] = m.gen.do_sample;
                                   d["temperature"] = m.gen.temperature;
                                   d["top_k"] = m.gen.top_k;
                                   d["top_p"] = m.gen.top_p;
                                   d["repetition_penalty"] = m.gen.repetition_penalty;
                                   d["subtalker_dosample"] = m.gen.sub_do_sample;
                                   d["subtalker_temperature"] = m.gen.sub_temperature;
                                   d["subtalker_top_k"] = m.gen.sub_top_k;
                                   d["subtalker_top_p"] = m.gen.sub_top_p;
                                   d["max_new_tokens"] = m.gen.max_new_tokens;
                                   return d;
                               })
        .def_property_readonly("hparams", &hparams)
        .def(
            "tensor_info",
            [](const Model & m) {
                py::list out;
                for (const ggml_tensor * t : m.tensors("")) {
                    out.append(py::make_tuple(std::string(t->name), std::string(ggml_type_name(t->type)), ggml_nelements(t)));
                }
                return out;
            },
            "(name, type, element count) of every weight, in file order.")
        .def(
            "tensor_data",
            [](const Model & m, const std::string & prefix) {
                py::list out;
                for (const ggml_tensor * t : m.tensors(prefix)) {
                    std::string data(ggml_nbytes(t), '\0');
                    ggml_backend_tensor_get(t, data.data(), 0, data.size());
                    out.append(py::make_tuple(std::string(t->name), std::string(ggml_type_name(t->type)),
                                              py::bytes(data)));
                }
                return out;
            },
            py::arg("prefix"), "(name, type, raw bytes) of every weight whose name starts with prefix.");

    py::class_<Session>(mod, "Session")
        .def(py::init([](std::shared_ptr<Model> model, int n_threads) {
                 return std::make_unique<Session>(std::move(model), n_threads);
             }),
             py::arg("model"), py::arg("n_threads"), py::keep_alive<1, 2>())
        .def_property_readonly("n_threads", &Session::n_threads)
        .def_property_readonly("device", &Session::device)
        .def("text_embed",
             [](Session & s, const std::vector<int32_t> & ids) {
                 std::vector<float> out;
                 {
                     py::gil_scoped_release release;
                     out = s.text_embed(ids);
                 }
                 return matrix(out, s.model().talker.hp.n_embd);
             })
        .def("codec_embed",
             [](Session & s, const std::vector<int32_t> & ids) {
                 std::vector<float> out;
                 {
                     py::gil_scoped_release release;
                     out = s.codec_embed(ids);
                 }
                 return matrix(out, s.model().talker.hp.n_embd);
             })
        .def("frame_embed",
             [](Session & s, const py::array & codes) {
                 int64_t n = 0;
                 std::vector<int32_t> c = code_rows(codes, s.model().talker.n_code_groups, &n);
                 std::vector<float> out;
                 {
                     py::gil_scoped_release release;
                     out = s.frame_embed(c, n);
                 }
                 return matrix(out, s.model().talker.hp.n_embd);
             },
             py::arg("codes"), "The talker's input embedding of each frame of codes [n, groups].")
        .def("decode", [](Session & s, const py::array & codes) { return run_codec(s, codes, &Session::decode); },
             py::arg("codes"), "Waveform [n * hop] of codes [n, n_quantizers], as the reference's chunked decode.")
        .def("speaker_embed",
             [](Session & s, const FloatRows & mel) {
                 if (!s.model().speaker_encoder) throw Error("this model has no speaker encoder (voice cloning needs a Base model)");
                 int n = 0;
                 std::vector<float> m = rows(mel, s.model().speaker_encoder->mel_dim, "mel", &n), out;
                 {
                     py::gil_scoped_release release;
                     out = s.speaker_embed(m, n);
                 }
                 return samples(out);
             },
             py::arg("mel"), "The x-vector of a log-mel spectrogram [frames, mel_dim].")
        .def("encode",
             [](Session & s, const py::array_t<float, py::array::c_style | py::array::forcecast> & wav) {
                 if (wav.ndim() != 1) throw Error("encode takes 1-D float32 samples");
                 std::vector<float> x(wav.data(), wav.data() + wav.size());
                 std::vector<int32_t> c;
                 {
                     py::gil_scoped_release release;
                     c = s.encode(x);
                 }
                 const py::ssize_t g = s.model().codec_encoder.n_quantizers;
                 py::array_t<int32_t> out({static_cast<py::ssize_t>(c.size()) / g, g});
                 std::copy(c.begin(), c.end(), out.mutable_data());
                 return out;
             },
             py::arg("samples"), "Codes [ceil(n / hop), n_quantizers] of 24 kHz samples (the codec encoder).")
        .def("decode_stream_reset", &Session::decode_stream_reset, py::arg("silent_frames") = 0,
             "Start a new codec stream; the first silent_frames frames give no samples.")
        .def("decode_stream_push",
             [](Session & s, const py::array & codes) { return run_codec(s, codes, &Session::decode_stream_push); },
             py::arg("codes"), "The samples of the next frames of the stream, [n * hop].")
        .def("decode_stages",
             [](Session & s, const py::array & codes, const std::vector<std::string> & names) {
                 int64_t n = 0;
                 std::vector<int32_t> c = code_rows(codes, s.model().codec_decoder.n_quantizers, &n);
                 std::vector<CodecStage> got;
                 {
                     py::gil_scoped_release release;
                     got = s.decode_stages(c, n, names);
                 }
                 py::dict d;
                 for (size_t i = 0; i < names.size(); ++i) d[py::str(names[i])] = matrix(got[i].data, got[i].width);
                 return d;
             },
             py::arg("codes"), py::arg("names"), "Named decoder intermediates, each [time, channels].")
        .def("talker_prefill",
             [](Session & s, const FloatRows & embd, int n_ctx) {
                 int n = 0;
                 std::vector<float> e = rows(embd, s.model().talker.hp.n_embd, "embeddings", &n);
                 TalkerOutput out;
                 {
                     py::gil_scoped_release release;
                     out = s.talker_prefill(e, n, n_ctx);
                 }
                 return talker_output(out);
             },
             py::arg("embeddings"), py::arg("n_ctx") = 0,
             "Debug: the talker over a prompt; (logits of the last position, its normed hidden state).")
        .def("talker_step",
             [](Session & s, const std::vector<int32_t> & codes, const FloatRows & text, int n_past) {
                 int n = 0;
                 std::vector<float> x = rows(text, s.model().talker.hp.n_embd, "text vector", &n);
                 if (n != 1) throw Error("talker_step: expected one text vector");
                 TalkerOutput out;
                 {
                     py::gil_scoped_release release;
                     out = s.talker_step(codes, x.data(), n_past);
                 }
                 return talker_output(out);
             },
             py::arg("codes"), py::arg("text"), py::arg("n_past"),
             "Debug: one decode step after talker_prefill; (logits, normed hidden state).")
        .def("memory", &Session::memory, "Bytes held now: kv_cache, compute_buffers.")
        .def_property("prefill_chunk", &Session::prefill_chunk, &Session::set_prefill_chunk,
                      "Prompt positions per talker prefill graph.")
        .def("set_profiling", &Session::set_profiling, py::arg("on"),
             "Per-op timing (graphs then run node by node); read it with profile().")
        .def("profile", &Session::profile, "Milliseconds per op name since profiling was enabled.")
        .def("cancel", &Session::cancel, "Stop a generation in progress after the current frame (any thread).")
        .def("generate", &generate, py::arg("prompt"), py::arg("trailing"), py::arg("params"))
        .def("generate_begin", &generate_begin, py::arg("prompt"), py::arg("trailing"), py::arg("params"),
             "Start a stepwise generation: validate, size the cache, prefill.")
        .def("generate_next", &generate_next, py::arg("max_frames"),
             "Up to max_frames more frames: (codes [n, 16], stop reason or None while running, timing totals).");
    bind_ops(mod);
}
