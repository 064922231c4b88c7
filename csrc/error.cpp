#include "error.h"

#include <cstdarg>
#include <cstdio>
#include <vector>

#include "ggml.h"

namespace qtts {

static std::string vformat(const char * fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = std::vsnprintf(nullptr, 0, fmt, ap2);
    va_end(ap2);
    std::vector<char> buf(n > 0 ? n + 1 : 1);
    std::vsnprintf(buf.data(), buf.size(), fmt, ap);
    return std::string(buf.data(), n > 0 ? n : 0);
}

std::string format(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

void fail(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    throw Error(s);
}

static thread_local std::string g_last_error;

static void log_callback(enum ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) {
        g_last_error = text;
        while (!g_last_error.empty() && (g_last_error.back() == '\n' || g_last_error.back() == ' ')) {
            g_last_error.pop_back();
        }
    }
    // Parse failures become Python exceptions carrying the message; keep stderr for warnings.
    if (level == GGML_LOG_LEVEL_WARN) {
        std::fputs(text, stderr);
    }
}

std::string last_ggml_error() {
    std::string s = g_last_error;
    g_last_error.clear();
    return s;
}

void install_ggml_log() { ggml_log_set(log_callback, nullptr); }

}  // namespace qtts
