// qtts._core.Session's vocoder calls: the runners of nets/vocoder.h over the session's graphs
// and its codec streams (docs/serving.md, "Batched vocoder").
#include <utility>

#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "nets/vocoder.h"
#include "runtime/error.h"
#include "runtime/session.h"

namespace py = pybind11;

namespace qtts {

namespace {

std::vector<int32_t> checked_codes(const Session & s, const py::array & codes, int64_t * n) {
    std::vector<int32_t> c = code_rows(codes, s.model().vocoder.n_quantizers, n);
    vocoder_check_codes(s.model().vocoder, c, *n);
    return c;
}

// Each (stream id, codes) item's samples, the streams stepping together (vocoder_push).
py::list push_many(Session & s, const py::list & items) {
    std::vector<std::vector<int32_t>> codes;
    std::vector<int> ids;
    for (size_t i = 0; i < items.size(); ++i) {
        py::handle h = items[i];
        if ((!py::isinstance<py::tuple>(h) && !py::isinstance<py::list>(h)) || py::len(h) != 2) {
            throw Error(format("decode_streams_push: item %zu is not a (stream, codes) pair", i));
        }
        py::sequence item = py::reinterpret_borrow<py::sequence>(h);
        if (!py::isinstance<py::int_>(item[0]))
            throw Error(format("decode_streams_push: item %zu's stream is not an int", i));
        if (!py::isinstance<py::array>(item[1]))
            throw Error(format("decode_streams_push: item %zu's codes are not an array", i));
        int64_t n = 0;
        ids.push_back(item[0].cast<int>());
        codes.push_back(checked_codes(s, item[1].cast<py::array>(), &n));
    }
    std::vector<VocoderPush> pushes(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
            if (ids[j] == ids[i]) throw Error(format("decode_streams_push: stream %d is pushed twice", ids[i]));
        }
        pushes[i].stream = &s.vocoder_streams().get(ids[i]);
        pushes[i].codes = codes[i].data();
        pushes[i].n = static_cast<int64_t>(codes[i].size()) / s.model().vocoder.n_quantizers;
    }
    {
        py::gil_scoped_release release;
        vocoder_push(s.model().vocoder, s.codec_runner("vocoder"), pushes);
    }
    py::list out;
    for (const VocoderPush & p : pushes) out.append(samples(p.out));
    return out;
}

}  // namespace

void bind_vocoder(py::module_ & m) {
    auto cls = py::reinterpret_borrow<py::class_<Session>>(m.attr("Session"));
    cls.def(
           "decode",
           [](Session & s, const py::array & codes) {
               int64_t n = 0;
               std::vector<int32_t> c = code_rows(codes, s.model().vocoder.n_quantizers, &n);
               std::vector<float> out;
               {
                   py::gil_scoped_release release;
                   out = vocoder_decode(s.model().vocoder, s.codec_runner("vocoder"), c, n);
               }
               return samples(out);
           },
           py::arg("codes"), "Waveform [n * hop] of codes [n, n_quantizers], as the reference's chunked decode.")
        .def(
            "decode_stream_reset",
            [](Session & s, int64_t silent_frames, int stream) { s.vocoder_streams().open(stream, silent_frames); },
            py::arg("silent_frames") = 0, py::arg("stream") = 0,
            "Start a new codec stream (under its id); the first silent_frames frames give no samples.")
        .def(
            "decode_stream_push",
            [](Session & s, const py::array & codes, int stream) {
                py::list items;
                items.append(py::make_tuple(stream, codes));
                return push_many(s, items)[0].cast<py::array_t<float>>();
            },
            py::arg("codes"), py::arg("stream") = 0, "The samples of the next frames of the stream, [n * hop].")
        .def("decode_streams_push", &push_many, py::arg("items"),
             "The next frames of several streams, [(stream, codes [n, n_quantizers])], decoded together: "
             "each stream's samples, as decode_stream_push would give them one by one.")
        .def(
            "decode_stream_close", [](Session & s, int stream) { s.vocoder_streams().close(stream); },
            py::arg("stream"), "Forget a codec stream and its state.")
        .def(
            "decode_stages",
            [](Session & s, const py::array & codes, const std::vector<std::string> & names) {
                int64_t n = 0;
                std::vector<int32_t> c = code_rows(codes, s.model().vocoder.n_quantizers, &n);
                std::vector<CodecStage> got;
                {
                    py::gil_scoped_release release;
                    got = vocoder_stages(s.model().vocoder, s.codec_runner("vocoder"), c, n, names);
                }
                py::dict d;
                for (size_t i = 0; i < names.size(); ++i) d[py::str(names[i])] = matrix(got[i].data, got[i].width);
                return d;
            },
            py::arg("codes"), py::arg("names"), "Named decoder intermediates, each [time, channels].")
        .def_property_readonly("codec_replay_builds", &Session::codec_replay_builds,
                               "Audio-network graphs built to be replayed so far (a replay is not counted).");
}

}  // namespace qtts
