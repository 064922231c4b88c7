// qtts._core.Session: graphs over a Model (embeddings, generation, the codecs, debug entry points).
#include <algorithm>
#include <cstring>
#include <functional>

#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "nets/codec_encoder.h"
#include "nets/speaker_encoder.h"
#include "runtime/error.h"
#include "runtime/session.h"

namespace py = pybind11;

namespace qtts {

std::vector<float> rows(const FloatRows & a, int width, const char * what, int * n) {
    if (a.ndim() != 2 || a.shape(1) != width) {
        throw Error(format("%s must have shape [n, %d]", what, width));
    }
    *n = static_cast<int>(a.shape(0));
    return std::vector<float>(a.data(), a.data() + a.size());
}

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

namespace {

py::tuple talker_output(const TalkerOutput & out) {
    return py::make_tuple(py::array_t<float>(out.logits.size(), out.logits.data()),
                          py::array_t<float>(out.hidden.size(), out.hidden.data()));
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

py::tuple generate(Session & s, const FloatRows & prompt, const FloatRows & trailing, const GenerateParams & gp) {
    const int d = s.model().talker.n_embd();
    int n_prompt = 0, n_trailing = 0;
    std::vector<float> p = rows(prompt, d, "prompt", &n_prompt), t = rows(trailing, d, "trailing", &n_trailing);
    GenerateResult r = interruptible(
        [&](const std::function<bool()> & stop) { return s.generate(p, n_prompt, t, n_trailing, gp, stop); });
    py::tuple out = generate_result(s, r);
    out[2].cast<py::dict>()["frames"] = r.frames;
    return out;
}

void generate_begin(Session & s, const FloatRows & prompt, const FloatRows & trailing, const GenerateParams & gp,
                    bool text_open) {
    const int d = s.model().talker.n_embd();
    int n_prompt = 0, n_trailing = 0;
    std::vector<float> p = rows(prompt, d, "prompt", &n_prompt), t = rows(trailing, d, "trailing", &n_trailing);
    py::gil_scoped_release release;
    s.generate_begin(p, n_prompt, t, n_trailing, gp, text_open);
}

py::tuple generate_next(Session & s, int n_frames) {
    GenerateResult r =
        interruptible([&](const std::function<bool()> & stop) { return s.generate_next(n_frames, stop); });
    py::tuple out = generate_result(s, r);
    out[2].cast<py::dict>()["needs_text"] = r.needs_text;
    return out;
}

void generate_append(Session & s, const FloatRows & rows_in, bool text_final, int frame_budget) {
    int n = 0;
    std::vector<float> r = rows(rows_in, s.model().talker.n_embd(), "text rows", &n);
    s.generate_append(r, n, text_final, frame_budget);
}

}  // namespace

void bind_session(py::module_ & m) {
    py::class_<Session>(m, "Session")
        .def(py::init([](std::shared_ptr<Model> model, int n_threads) {
                 return std::make_unique<Session>(std::move(model), n_threads);
             }),
             py::arg("model"), py::arg("n_threads"), py::keep_alive<1, 2>())
        .def_property_readonly("n_threads", &Session::n_threads)
        .def_property_readonly("device", &Session::device)
        .def_property("threads", &Session::threads, &Session::set_threads,
                      "Threads the next graphs run on (1 .. n_threads; results do not depend on it).")
        .def("text_embed",
             [](Session & s, const std::vector<int32_t> & ids) {
                 std::vector<float> out;
                 {
                     py::gil_scoped_release release;
                     out = s.text_embed(ids);
                 }
                 return matrix(out, s.model().talker.n_embd());
             })
        .def("codec_embed",
             [](Session & s, const std::vector<int32_t> & ids) {
                 std::vector<float> out;
                 {
                     py::gil_scoped_release release;
                     out = s.codec_embed(ids);
                 }
                 return matrix(out, s.model().talker.n_embd());
             })
        .def(
            "frame_embed",
            [](Session & s, const py::array & codes) {
                int64_t n = 0;
                std::vector<int32_t> c = code_rows(codes, s.model().talker.n_code_groups, &n);
                std::vector<float> out;
                {
                    py::gil_scoped_release release;
                    out = s.frame_embed(c, n);
                }
                return matrix(out, s.model().talker.n_embd());
            },
            py::arg("codes"), "The talker's input embedding of each frame of codes [n, groups].")
        .def(
            "speaker_embed",
            [](Session & s, const FloatRows & mel) {
                if (!s.model().speaker_encoder)
                    throw Error("this model has no speaker encoder (voice cloning needs a Base model)");
                const SpeakerEncoder & w = *s.model().speaker_encoder;
                int n = 0;
                std::vector<float> m = rows(mel, w.mel_dim, "mel", &n), out;
                {
                    py::gil_scoped_release release;
                    out = speaker_embed(w, s.codec_runner("other"), m, n);
                }
                return samples(out);
            },
            py::arg("mel"), "The x-vector of a log-mel spectrogram [frames, mel_dim].")
        .def(
            "encode",
            [](Session & s, const py::array_t<float, py::array::c_style | py::array::forcecast> & wav) {
                if (wav.ndim() != 1) throw Error("encode takes 1-D float32 samples");
                std::vector<float> x(wav.data(), wav.data() + wav.size());
                std::vector<int32_t> c;
                {
                    py::gil_scoped_release release;
                    c = encode(s.model().codec_encoder, s.codec_runner("other"), x);
                }
                const py::ssize_t g = s.model().codec_encoder.n_quantizers;
                py::array_t<int32_t> out({static_cast<py::ssize_t>(c.size()) / g, g});
                std::copy(c.begin(), c.end(), out.mutable_data());
                return out;
            },
            py::arg("samples"), "Codes [ceil(n / hop), n_quantizers] of 24 kHz samples (the codec encoder).")
        .def(
            "talker_prefill",
            [](Session & s, const FloatRows & embd, int n_ctx) {
                int n = 0;
                std::vector<float> e = rows(embd, s.model().talker.n_embd(), "embeddings", &n);
                TalkerOutput out;
                {
                    py::gil_scoped_release release;
                    out = s.talker_prefill(e, n, n_ctx);
                }
                return talker_output(out);
            },
            py::arg("embeddings"), py::arg("n_ctx") = 0,
            "Debug: the talker over a prompt; (logits of the last position, its normed hidden state).")
        .def(
            "talker_step",
            [](Session & s, const std::vector<int32_t> & codes, const FloatRows & text, int n_past) {
                int n = 0;
                std::vector<float> x = rows(text, s.model().talker.n_embd(), "text vector", &n);
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
        .def_property("device_sampling", &Session::device_sampling, &Session::set_device_sampling,
                      "Whether the code predictor samples inside its frame graph with stock ops (the default "
                      "off the CPU) instead of with the host sampler (top_p < 1 always on the host).")
        .def_property("prefill_chunk", &Session::prefill_chunk, &Session::set_prefill_chunk,
                      "Prompt positions per talker prefill graph.")
        .def("set_profiling", &Session::set_profiling, py::arg("on"), py::arg("ops") = true,
             "Per-op timing (graphs then run node by node); ops=False: only the graph counts and the build, "
             "allocation and compute times, graphs computed whole; read it with profile().")
        .def("profile", &Session::profile, "Milliseconds per op name since profiling was enabled.")
        .def("set_op_census", &Session::set_op_census, py::arg("on"),
             "Count each computed node by its op, types and source views (graphs then run node by node).")
        .def("op_census", &Session::op_census, "Computed nodes per signature since the census was turned on.")
        .def("cancel", &Session::cancel, "Stop a generation in progress after the current frame (any thread).")
        .def("generate", &generate, py::arg("prompt"), py::arg("trailing"), py::arg("params"))
        .def("generate_begin", &generate_begin, py::arg("prompt"), py::arg("trailing"), py::arg("params"),
             py::arg("text_open") = false,
             "Start a stepwise generation: validate, size the cache, prefill; text_open: the trailing text "
             "is streamed in with generate_append.")
        .def("generate_append", &generate_append, py::arg("rows"), py::arg("text_final"), py::arg("frame_budget"),
             "Streamed text: more trailing rows [n, D], whether the text is complete (its EOS row included) "
             "and the frame budget of the text so far (0: none).")
        .def("generate_next", &generate_next, py::arg("n_frames"),
             "Up to n_frames more frames: (codes [n, groups], stop reason or None while running, timing totals).");
}

}  // namespace qtts
