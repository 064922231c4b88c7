// A read-only mapping of a whole file (runtime/gguf_file.h maps the GGUF once; weights on host
// devices point straight into it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qtts {

class MappedFile {
public:
    explicit MappedFile(const std::string & path);  // an Error naming the path when it cannot
    ~MappedFile();
    MappedFile(const MappedFile &) = delete;
    MappedFile & operator=(const MappedFile &) = delete;

    uint8_t * data() const { return static_cast<uint8_t *>(addr_); }
    // Whether [p, p + n) lies inside the mapping.
    bool spans(const void * p, size_t n) const {
        const auto * b = static_cast<const uint8_t *>(p);
        return addr_ && b >= data() && b + n <= data() + size_;
    }
    // The whole pages inside [p, p + n) leave this process's memory; a later read faults them
    // back in from the file (they are clean, read-only file pages). Not on Windows.
    void drop(const void * p, size_t n) const;

private:
    void * addr_ = nullptr;
    size_t size_ = 0;
};

}  // namespace qtts
