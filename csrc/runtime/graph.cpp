#include "runtime/graph.h"

#include <cstdarg>
#include <cstdio>

namespace qtts {

ggml_tensor * named(ggml_tensor * t, const char * fmt, ...) {
    char buf[GGML_MAX_NAME];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return ggml_set_name(t, buf);
}

ggml_tensor * linear(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, ggml_tensor * b) {
    ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    return b ? ggml_add(ctx, y, b) : y;
}

}  // namespace qtts
