// Exceptions raised by the core; the bindings turn them into Python exceptions.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace qtts {

// A problem with user input (file, tensor, field, argument): surfaces as ValueError.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
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

// Route ggml's log through the core: warnings to stderr, errors kept for exceptions.
void install_ggml_log();

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

private:
    std::vector<std::string> lines_;
    std::vector<std::string> * outer_;
};

}  // namespace qtts
