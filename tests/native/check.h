// qtts_native_check: the custom ops and a tiny-model decode run natively, without Python, on
// inputs a host script wrote (scripts/check_arm.py cross-compiles it for aarch64 and runs it
// under emulation; docs/kernels.md, "ARM").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qtts::check {

// A .npy array: little-endian float32 ('<f4'), int32 ('<i4') or bytes ('|u1'), C order.
struct Array {
    std::string descr;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;

    int64_t count() const;
    const float * f32() const { return reinterpret_cast<const float *>(data.data()); }
    const int32_t * i32() const { return reinterpret_cast<const int32_t *>(data.data()); }
};

Array read_npy(const std::string & path);
void write_npy(const std::string & path, const std::vector<int64_t> & shape, const float * values);

// One manifest line, split on whitespace: its op name, its case id, then the op's arguments.
using Line = std::vector<std::string>;

// Runs an op case and returns its output, shape in `shape` (numpy order); throws on a bad line.
std::vector<float> run_op(const Line & line, const std::string & dir, std::vector<int64_t> & shape);

// The vocoder's samples for codes [n, n_quantizers] of a GGUF model (args: threads, model, codes).
std::vector<float> run_decode(const Line & line, const std::string & dir);

// Greedy codes [frames, groups] from prompt and trailing embeddings (args: threads, model,
// prompt, trailing, frames).
std::vector<float> run_generate(const Line & line, const std::string & dir, std::vector<int64_t> & shape);

}  // namespace qtts::check
