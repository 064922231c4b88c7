// Layouts shared by the custom CPU ops and the code that feeds them (docs/kernels.md,
// "Custom CPU ops"; docs/model.md, "Weights in GGUF").
#pragma once

#include <cstdint>

#include "ggml.h"

namespace qtts {

// Output channels per conv-GEMM weight panel: a layer whose output count is a multiple of it is
// stored as panels of this width (two AVX2 vectors, one AVX-512 vector per panel row); any other
// layer is one panel as wide as its output count. The converter writes the same layout.
constexpr int64_t kPanelWidth = 16;

// Activations are channel-fastest, ne = [C, T]: each time step is one contiguous F32 row, while
// rows may be further apart than C floats (views of overlapping windows, for strided convs).
inline bool rows_contiguous(const ggml_tensor * t) { return t->type == GGML_TYPE_F32 && t->nb[0] == sizeof(float); }

}  // namespace qtts
