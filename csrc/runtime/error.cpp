#include "runtime/error.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <utility>
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

// ggml logs from whichever thread runs the operation, with or without the GIL: lines are queued
// here and handed to Python by the engine after each operation (take_ggml_log).
static std::mutex g_queue_mutex;
static std::vector<std::pair<int, std::string>> g_queue;
static size_t g_dropped = 0;
static std::atomic<bool> g_debug{false};

static void queue_line(int level, std::string text) {
    std::lock_guard<std::mutex> lock(g_queue_mutex);
    if (level == GGML_LOG_LEVEL_CONT) {  // the rest of the previous line
        if (!g_queue.empty() && g_dropped == 0) g_queue.back().second += text;
        return;
    }
    if (g_queue.size() >= (g_debug ? kMaxQueuedDebugLines : kMaxQueuedLogLines)) {
        ++g_dropped;
        return;
    }
    g_queue.emplace_back(level, std::move(text));
}

// ggml prints some debug lines in pieces (the scheduler's split dump: "\n## SPLIT ...", ": ",
// "[input] ", "\n"): they are joined here and queued line by line.
static std::string g_debug_text;

static void queue_debug(const char * text) {
    std::vector<std::string> lines;
    {
        std::lock_guard<std::mutex> lock(g_queue_mutex);
        g_debug_text += text;
        for (size_t nl; (nl = g_debug_text.find('\n')) != std::string::npos;) {
            std::string line = g_debug_text.substr(0, nl);
            g_debug_text.erase(0, nl + 1);
            while (!line.empty() && line.back() == ' ') line.pop_back();
            if (!line.empty()) lines.push_back(std::move(line));
        }
    }
    for (std::string & l : lines) queue_line(GGML_LOG_LEVEL_DEBUG, std::move(l));
}

static void log_callback(enum ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_NONE) return;
    if (level == GGML_LOG_LEVEL_DEBUG) {
        if (g_debug) queue_debug(text);
        return;
    }
    std::string line = text;
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    if (line.empty()) return;
    queue_line(level, line);
    if (level != GGML_LOG_LEVEL_ERROR || !t_capture) return;
    size_t colon = line.find(": ");
    if (colon != std::string::npos && line.find(' ') > colon) line.erase(0, colon + 2);
    if (!line.empty()) t_capture->push_back(line);
}

std::vector<std::pair<int, std::string>> take_ggml_log() {
    std::lock_guard<std::mutex> lock(g_queue_mutex);
    std::vector<std::pair<int, std::string>> out;
    out.swap(g_queue);
    if (g_dropped) {
        out.emplace_back(GGML_LOG_LEVEL_WARN, format("%zu more ggml log lines dropped", g_dropped));
        g_dropped = 0;
    }
    return out;
}

void install_ggml_log() { ggml_log_set(log_callback, nullptr); }

void set_ggml_debug(bool on) { g_debug = on; }

GgmlErrorCapture::GgmlErrorCapture() : outer_(t_capture) { t_capture = &lines_; }

GgmlErrorCapture::~GgmlErrorCapture() { t_capture = outer_; }

std::string GgmlErrorCapture::text() const {
    std::string out;
    for (const std::string & l : lines_) out += (out.empty() ? "" : "; ") + l;
    return out;
}

}  // namespace qtts
