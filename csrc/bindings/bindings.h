// The pieces of the qtts._core module, one bind_* per subject, called by module.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace qtts {

void bind_params(pybind11::module_ & m);   // SamplingParams, GenerateParams, GenerationDefaults
void bind_model(pybind11::module_ & m);    // Model
void bind_session(pybind11::module_ & m);  // Session
void bind_tools(pybind11::module_ & m);    // read_tokenizer, sample_tokens, quantize, devices, ...
void bind_batch(pybind11::module_ & m);   // Batch (continuous batching)
void bind_ops(pybind11::module_ & m);      // the ops submodule: custom ops one at a time, SIMD path (tests)
void bind_vocoder(pybind11::module_ & m);  // Session's vocoder calls (after bind_session)
void bind_aligner(pybind11::module_ & m);  // AlignerModel, AlignerSession (after bind_model: Ops, Precision)

using FloatRows = pybind11::array_t<float, pybind11::array::c_style | pybind11::array::forcecast>;

// A [n, width] float matrix from Python, checked and copied (the copy is then used without the GIL).
std::vector<float> rows(const FloatRows & a, int width, const char * what, int * n);
// Codes [n, groups] of any integer dtype, checked (values are checked by the callee).
std::vector<int32_t> code_rows(const pybind11::array & a, int groups, int64_t * n);
// A float vector as a 1-D array, and as [size / width, width].
pybind11::array_t<float> samples(const std::vector<float> & v);
pybind11::array_t<float> matrix(const std::vector<float> & v, pybind11::ssize_t width);

}  // namespace qtts
