#include "runtime/host_memory.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "runtime/error.h"

namespace qtts {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;

}  // namespace

bool huge_pages_available() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    static const bool available = [] {
        std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
        std::string mode;
        std::getline(f, mode);  // e.g. "always [madvise] never": the bracketed one is in effect
        return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
    }();
    return available;
#else
    return false;
#endif
}

HugePageBuffer::HugePageBuffer(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    size_ = bytes;
    map_size_ = (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
    map_ = ::mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        const GgmlErrorCapture none;
        engine_fail(none, "could not reserve %zu MiB of host memory for the weights: %s", bytes >> 20,
                    std::strerror(errno));
    }
    const auto base = reinterpret_cast<uintptr_t>(map_);
    data_ = reinterpret_cast<uint8_t *>((base + kHugePage - 1) / kHugePage * kHugePage);
    // advice, not a demand: without free huge pages the kernel falls back to small ones
    ::madvise(data_, map_size_ - (reinterpret_cast<uintptr_t>(data_) - base), MADV_HUGEPAGE);
#else
    (void)bytes;
    const GgmlErrorCapture none;
    engine_fail(none, "huge pages are not available on this platform");
#endif
}

HugePageBuffer::~HugePageBuffer() {
#if defined(__linux__)
    if (map_) ::munmap(map_, map_size_);
#endif
}

}  // namespace qtts
