// Exceptions raised by the core; the bindings turn them into Python exceptions.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace qtts {

// A problem with user input (file, tensor, field, argument): surfaces as ValueError.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The engine failed on valid input (a buffer that cannot be allocated, a graph the scheduler
// cannot place or that fails to compute): surfaces as qtts.errors.QttsError with ggml's error
// lines logged meanwhile (docs/architecture.md, "Errors").
struct EngineError : std::runtime_error {
    EngineError(const std::string & message, std::vector<std::string> log)
        : std::runtime_error(message), ggml_log(std::move(log)) {}
    std::vector<std::string> ggml_log;
};

// printf-style message formatting.
std::string format(const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

[[noreturn]] void fail(const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

class GgmlErrorCapture;

// Throws EngineError with the lines `log` collected so far.
[[noreturn]] void engine_fail(const GgmlErrorCapture & log, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// Route ggml's log through the core: its info, warning and error lines are queued for Python's
// logging (take_ggml_log), its error lines also kept for the exception of the operation that
// logged them (docs/architecture.md, "Errors").
void install_ggml_log();

// Queue ggml's debug lines too (GGML_SCHED_DEBUG's split assignments, a backend's choices), up
// to kMaxQueuedDebugLines: on while the "qtts" logger is enabled for DEBUG (_native.py).
void set_ggml_debug(bool on);

// The queued log lines, oldest first, as (ggml_log_level, text without the trailing newline),
// and the queue emptied. At most kMaxQueuedLogLines wait (kMaxQueuedDebugLines with the debug
// lines on: a scheduler's debug dump has a line per node); beyond that lines are counted, and
// reported in one last line, instead of kept.
constexpr size_t kMaxQueuedLogLines = 1000;
constexpr size_t kMaxQueuedDebugLines = 200000;
std::vector<std::pair<int, std::string>> take_ggml_log();

// ggml reports why an operation failed only through its log, often as several lines ending in
// a generic "failed to ..."; collect this thread's error lines for the lifetime of the capture.
class GgmlErrorCapture {
public:
    GgmlErrorCapture();
    ~GgmlErrorCapture();
    GgmlErrorCapture(const GgmlErrorCapture &) = delete;
    GgmlErrorCapture & operator=(const GgmlErrorCapture &) = delete;
    // The collected lines, without ggml's "function: " prefixes, joined with "; ".
    std::string text() const;
    const std::vector<std::string> & lines() const { return lines_; }

private:
    std::vector<std::string> lines_;
    std::vector<std::string> * outer_;
};

}  // namespace qtts
