// Opening a qtts GGUF file: header parsing, typed metadata access, tensor validation and
// placement of the weights in backend buffers (memory-mapped where the device allows).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "runtime/names.h"

namespace qtts {

// Which element types a weight may have; checked against what the device can compute.
enum class WeightKind {
    F32,     // norms, biases, convolution kernels, codebooks: exact F32 only
    MATMUL,  // talker / predictor linears: F32, BF16 or a quantized type (never F16)
    TABLE,   // embedding tables read with get_rows: as MATMUL
};

class MappedFile;
class HugePageBuffer;

class GgufFile {
public:
    // architecture: the value general.architecture must have (a text-to-speech model's, or
    // kv::ALIGNER_ARCH_NAME)
    explicit GgufFile(const std::string & path, const std::string & architecture = kv::ARCH_NAME);
    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile & operator=(const GgufFile &) = delete;

    const std::string & path() const { return path_; }
    uint64_t file_size() const { return file_size_; }

    bool has(const char * key) const;
    uint32_t u32(const char * key) const;
    float f32(const char * key) const;
    bool boolean(const char * key) const;
    std::string str(const char * key) const;
    std::vector<int32_t> i32_array(const char * key) const;
    std::vector<std::string> str_array(const char * key) const;

    // Range-checked reads for hyper-parameters: a value outside the bounds is refused naming the
    // file and key, before a graph can size an allocation or reach a ggml assert with it.
    int count(const char * key, int lo, int hi) const;
    // a finite float in (lo, hi) (or [lo, hi] where closed is true)
    float real(const char * key, float lo, float hi, bool closed = false) const;
    // an integer array of n_lo..n_hi elements, each in [lo, hi]
    std::vector<int> counts(const char * key, size_t n_lo, size_t n_hi, int lo, int hi) const;
    [[noreturn]] void key_error(const char * key, const std::string & problem) const;

    // Look up a weight and check its shape (ggml order: ne0 = contiguous) and type.
    ggml_tensor * tensor(const std::string & name, std::initializer_list<int64_t> ne, WeightKind kind,
                         bool required = true);
    // After every weight was requested: reject tensors nobody asked for, check data bounds.
    void check_complete() const;

    // A weight made of the rows of `parts` (requested weights) in order; null where they differ in
    // type or row length. copy = false (distinct parts): place() lays the parts end to end in
    // memory and the new tensor spans them, the parts staying valid tensors inside it; nothing is
    // copied where they already lie end to end in the mapped file, otherwise they are read into
    // huge pages or a buffer of their own instead of being mapped (never two resident copies).
    // copy = true (a part may repeat): a tensor of its own, filled from the placed parts.
    ggml_tensor * join(const std::string & name, const std::vector<ggml_tensor *> & parts, bool copy);
    // Weights that stay mapped and shared (a CPU device without huge pages): a join whose parts are
    // not end to end in the file is refused (null), since its buffer would be a private copy in
    // each process instead of pages shared through the page cache (docs/bulk.md).
    void keep_mapped_shared(bool on) { mapped_shared_ = on; }

    // Allocate all requested weights on `dev` (mmap on host devices) and fill them; on another
    // device, tensors for which `keep_on_host(name)` holds stay in host memory. On the CPU device
    // the tensors named in `huge_pages` are read into one buffer of transparent huge pages instead
    // of being mapped, where the OS has them and can give the memory (runtime/host_memory.h).
    // Returns the buffers, which own the weights' memory.
    std::vector<ggml_backend_buffer_t> place(ggml_backend_dev_t dev,
                                             const std::function<bool(const char *)> & keep_on_host,
                                             const std::set<std::string> & huge_pages = {});
    // Bytes of weights place() read into huge pages.
    size_t huge_page_bytes() const;
    // Bytes of weights the CPU device's file mapping spans but place() read into memory of their
    // own (huge pages, joined weights): the mapping's pages of those are never touched.
    size_t read_not_mapped() const { return read_not_mapped_; }
    // Whether place() read `t` into huge pages: memory of this process's own, which may be
    // rewritten (a mapped tensor is the file's read-only pages).
    bool in_huge_pages(const ggml_tensor * t) const;
    // For a tensor mapped from the file that nothing reads any more (a weight replaced by a copy
    // of another layout): its pages leave this process's resident memory, staying in the page
    // cache; reading it again faults them back in. Other tensors are left alone.
    void drop_pages(const ggml_tensor * t) const;

    ggml_context * meta() const { return meta_; }

private:
    int64_t key_id(const char * key, enum gguf_type want) const;
    // The named tensors placed in one huge-page buffer and read from the file; null (nothing
    // placed) when the memory cannot be had.
    ggml_backend_buffer_t read_into_huge_pages(ggml_backend_dev_t cpu, const std::set<std::string> & names);
    void check_strings() const;
    struct Joined {
        ggml_tensor * whole;
        std::vector<ggml_tensor *> parts;
        bool copy;
        bool end_to_end;  // in the file
    };
    // The joins not placed yet that `which` selects, copies or not, in one buffer of `buft`: a copy
    // filled from its parts, otherwise the parts placed inside it end to end.
    void place_joined(ggml_backend_buffer_type_t buft, bool copy, const std::function<bool(const Joined &)> & which,
                      std::vector<ggml_backend_buffer_t> & bufs);

    std::string path_;
    uint64_t file_size_ = 0;
    gguf_context * gguf_ = nullptr;
    ggml_context * meta_ = nullptr;
    std::set<std::string> requested_;
    size_t read_not_mapped_ = 0;
    bool mapped_shared_ = false;
    ggml_context * joined_ctx_ = nullptr;
    std::vector<Joined> joined_;
    std::unique_ptr<MappedFile> map_;
    std::unique_ptr<HugePageBuffer> huge_;
};

std::string shape_str(const int64_t * ne, int n);

}  // namespace qtts
