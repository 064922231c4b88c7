// What the per-network loaders (nets/*.cpp) share: bounds on hyper-parameters and the reading
// of conv-GEMM panel weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/layout.h"
#include "runtime/gguf_file.h"

namespace qtts {

// Bounds on hyper-parameters: well above every released checkpoint, low enough that no value
// can size a giant allocation or overflow the int arithmetic of the graphs.
inline constexpr int kMaxWidth = 1 << 16, kMaxVocab = 1 << 22, kMaxLayers = 1024, kMaxHeads = 1024;
inline constexpr int kMaxKernel = 64, kMaxGroups = 64, kMaxRate = 192000, kMinRate = 8000;

// Conv-GEMM weights of k taps of `in` channels into n outputs, stored as panels [P, in, k, n/P].
ggml_tensor * load_panels(GgufFile & f, const std::string & name, int64_t k, int64_t in, int64_t n);

// The product of positive factors, or -1 once it exceeds INT32_MAX (corrupt metadata).
int64_t product(const std::vector<int> & v);

}  // namespace qtts
