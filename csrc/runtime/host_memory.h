// Anonymous host memory in transparent huge pages, for the weights every generated frame reads
// whole (docs/architecture.md, "Weights in huge pages"): streamed from 4 KiB pages of the file
// mapping, the quantized matmul loses 10-25% of its rate to the page walks and to the hardware
// prefetchers stopping at each page.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qtts {

// Whether the OS backs anonymous memory with transparent huge pages on request: Linux with THP
// "always" or "madvise". Elsewhere (THP "never", macOS, Windows) the weights stay mapped.
bool huge_pages_available();

// `bytes` of zeroed anonymous memory starting on a 2 MiB boundary and advised for huge pages;
// an EngineError when it cannot be had.
class HugePageBuffer {
public:
    explicit HugePageBuffer(size_t bytes);
    ~HugePageBuffer();
    HugePageBuffer(const HugePageBuffer &) = delete;
    HugePageBuffer & operator=(const HugePageBuffer &) = delete;

    uint8_t * data() const { return data_; }
    size_t size() const { return size_; }

private:
    void * map_ = nullptr;
    size_t map_size_ = 0;
    uint8_t * data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace qtts
