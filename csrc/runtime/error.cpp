#include "runtime/error.h"

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

void engine_fail(const GgmlErrorCapture & log, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    throw EngineError(s, log.lines());
}

static thread_local std::vector<std::string> * t_capture = nullptr;

static void log_callback(enum ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
    if (level != GGML_LOG_LEVEL_ERROR || !t_capture) return;
    std::string line = text;
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    size_t colon = line.find(": ");
    if (colon != std::string::npos && line.find(' ') > colon) line.erase(0, colon + 2);
    if (!line.empty()) t_capture->push_back(line);
}

void install_ggml_log() { ggml_log_set(log_callback, nullptr); }

GgmlErrorCapture::GgmlErrorCapture() : outer_(t_capture) { t_capture = &lines_; }

GgmlErrorCapture::~GgmlErrorCapture() { t_capture = outer_; }

std::string GgmlErrorCapture::text() const {
    std::string out;
    for (const std::string & l : lines_) out += (out.empty() ? "" : "; ") + l;
    return out;
}

}  // namespace qtts
