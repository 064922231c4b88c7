// Shared graph-building helpers. Every intermediate gets a name so stages can be dumped.
#pragma once

#include "ggml.h"

namespace qtts {

// Name a tensor printf-style and return it (ggml keeps at most GGML_MAX_NAME-1 characters).
ggml_tensor * named(ggml_tensor * t, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// y = W x (+ b); W in ggml order [in, out], x [in, n].
ggml_tensor * linear(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, ggml_tensor * b = nullptr);

}  // namespace qtts
