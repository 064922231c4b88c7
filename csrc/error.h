// Exceptions raised by the core; the bindings turn them into Python exceptions.
#pragma once

#include <stdexcept>
#include <string>

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

// The last error ggml logged on this thread (ggml reports most failures only through its log).
std::string last_ggml_error();
void install_ggml_log();

}  // namespace qtts
