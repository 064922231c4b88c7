// The typed generation parameters: SamplingParams, GenerateParams, GenerationDefaults, with
// their C++ defaults (the member initializers: neutral values) as the keyword arguments'
// defaults. The qwen-tts reference defaults are declared with the settings in
// python/qtts/runtime/settings/config.py, which fills every field (engine.native_params).
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "runtime/error.h"
#include "runtime/generate.h"

namespace py = pybind11;

namespace qtts {

namespace {

std::string repr(const SamplingParams & p) {
    return format("SamplingParams(do_sample=%s, temperature=%g, top_k=%d, top_p=%g)", p.do_sample ? "True" : "False",
                  p.temperature, p.top_k, p.top_p);
}

}  // namespace

void bind_params(py::module_ & m) {
    const SamplingParams sp;
    py::class_<SamplingParams>(m, "SamplingParams", "Token selection for one network (talker or subtalker).")
        .def(py::init([](bool do_sample, float temperature, int top_k, float top_p) {
                 return SamplingParams{do_sample, temperature, top_k, top_p};
             }),
             py::kw_only(), py::arg("do_sample") = sp.do_sample, py::arg("temperature") = sp.temperature,
             py::arg("top_k") = sp.top_k, py::arg("top_p") = sp.top_p)
        .def_readwrite("do_sample", &SamplingParams::do_sample)
        .def_readwrite("temperature", &SamplingParams::temperature)
        .def_readwrite("top_k", &SamplingParams::top_k, "0: off")
        .def_readwrite("top_p", &SamplingParams::top_p, "1: off")
        .def("__repr__", &repr);

    const GenerateParams gp;
    py::class_<GenerateParams>(m, "GenerateParams", "The settings of one generation (Session.generate).")
        .def(py::init([](const SamplingParams & talker, const SamplingParams & subtalker, float repetition_penalty,
                         int max_new_tokens, int min_new_tokens, int frame_budget, uint64_t seed) {
                 return GenerateParams{talker,       subtalker, repetition_penalty, max_new_tokens, min_new_tokens,
                                       frame_budget, seed};
             }),
             py::kw_only(), py::arg("talker") = gp.talker, py::arg("subtalker") = gp.subtalker,
             py::arg("repetition_penalty") = gp.repetition_penalty, py::arg("max_new_tokens") = gp.max_new_tokens,
             py::arg("min_new_tokens") = gp.min_new_tokens, py::arg("frame_budget") = gp.frame_budget,
             py::arg("seed") = gp.seed)
        .def_readwrite("talker", &GenerateParams::talker, "samples cb0")
        .def_readwrite("subtalker", &GenerateParams::subtalker, "samples cb1.. (the code predictor)")
        .def_readwrite("repetition_penalty", &GenerateParams::repetition_penalty)
        .def_readwrite("max_new_tokens", &GenerateParams::max_new_tokens, "cb0 tokens, EOS included")
        .def_readwrite("min_new_tokens", &GenerateParams::min_new_tokens, "EOS is masked before this many")
        .def_readwrite("frame_budget", &GenerateParams::frame_budget, "the runaway guard's frame limit; 0: none")
        .def_readwrite("seed", &GenerateParams::seed)
        .def("__repr__", [](const GenerateParams & p) {
            return format("GenerateParams(talker=%s, subtalker=%s, repetition_penalty=%g, max_new_tokens=%d, "
                          "min_new_tokens=%d, frame_budget=%d, seed=%llu)",
                          repr(p.talker).c_str(), repr(p.subtalker).c_str(), p.repetition_penalty, p.max_new_tokens,
                          p.min_new_tokens, p.frame_budget, static_cast<unsigned long long>(p.seed));
        });

    const GenerationDefaults gd;
    py::class_<GenerationDefaults>(m, "GenerationDefaults", "A model's generation_config.json (its defaults).")
        .def(py::init([](const SamplingParams & talker, const SamplingParams & subtalker, float repetition_penalty,
                         int max_new_tokens) {
                 return GenerationDefaults{talker, subtalker, repetition_penalty, max_new_tokens};
             }),
             py::kw_only(), py::arg("talker") = gd.talker, py::arg("subtalker") = gd.subtalker,
             py::arg("repetition_penalty") = gd.repetition_penalty, py::arg("max_new_tokens") = gd.max_new_tokens)
        .def_readwrite("talker", &GenerationDefaults::talker)
        .def_readwrite("subtalker", &GenerationDefaults::subtalker)
        .def_readwrite("repetition_penalty", &GenerationDefaults::repetition_penalty)
        .def_readwrite("max_new_tokens", &GenerationDefaults::max_new_tokens)
        .def("__repr__", [](const GenerationDefaults & d) {
            return format("GenerationDefaults(talker=%s, subtalker=%s, repetition_penalty=%g, max_new_tokens=%d)",
                          repr(d.talker).c_str(), repr(d.subtalker).c_str(), d.repetition_penalty, d.max_new_tokens);
        });
}

}  // namespace qtts
