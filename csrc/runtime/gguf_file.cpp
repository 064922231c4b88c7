#include "runtime/gguf_file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/mapped_file.h"
#include "runtime/names.h"

namespace qtts {

std::string shape_str(const int64_t * ne, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as Python decodes it:
// every string of the file reaches Python, where an invalid one would end in UnicodeDecodeError.
static bool valid_utf8(const char * s) {
    const auto * p = reinterpret_cast<const unsigned char *>(s);
    while (*p) {
        const unsigned c = *p;
        int n = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            ++p;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return false;
        }
        ++p;
        for (int i = 0; i < n; ++i, ++p) {
            if (*p < lo || *p > hi) return false;
            lo = 0x80;
            hi = 0xBF;
        }
    }
    return true;
}

// A name for a message: bytes outside printable ASCII as \xNN.
static std::string escaped(const char * s) {
    std::string out;
    for (const auto * p = reinterpret_cast<const unsigned char *>(s); *p; ++p) {
        out += *p >= 0x20 && *p < 0x7F ? std::string(1, static_cast<char>(*p)) : format("\\x%02x", *p);
    }
    return out;
}

static int n_dims_of(const int64_t * ne) {
    int n = GGML_MAX_DIMS;
    while (n > 1 && ne[n - 1] == 1) --n;
    return n;
}

GgufFile::GgufFile(const std::string & path, const std::string & architecture) : path_(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        fail("%s: is a directory, not a GGUF file (convert a Hugging Face checkpoint with "
             "`qtts-cli convert %s -o model.gguf`)",
             path.c_str(), path.c_str());
    }
    FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) fail("%s: cannot open: %s", path.c_str(), std::strerror(errno));
    char magic[4] = {0, 0, 0, 0};
    size_t got = std::fread(magic, 1, 4, f);
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    std::fclose(f);
    file_size_ = size > 0 ? static_cast<uint64_t>(size) : 0;
    if (got != 4) {
        fail("%s: not a GGUF file (%s)", path.c_str(),
             file_size_ == 0 ? "the file is empty" : format("only %llu bytes", (unsigned long long)file_size_).c_str());
    }
    if (std::memcmp(magic, "GGUF", 4) != 0) fail("%s: not a GGUF file (bad magic)", path.c_str());
    install_ggml_log();
    GgmlErrorCapture errors;
    gguf_ = gguf_init_from_file(path.c_str(), {/*no_alloc=*/true, /*ctx=*/&meta_});
    if (!gguf_) {
        std::string why = errors.text();
        fail("%s: corrupt or truncated GGUF header%s%s", path.c_str(), why.empty() ? "" : ": ", why.c_str());
    }
    check_strings();
    int64_t arch = gguf_find_key(gguf_, "general.architecture");
    if (arch < 0) fail("%s: no general.architecture key: not a qtts model", path.c_str());
    if (gguf_get_kv_type(gguf_, arch) != GGUF_TYPE_STRING) {
        fail("%s: metadata key 'general.architecture' has type %s, expected str: not a qtts model", path.c_str(),
             gguf_type_name(gguf_get_kv_type(gguf_, arch)));
    }
    std::string name = gguf_get_val_str(gguf_, arch);
    if (name != architecture) {
        // the two architectures qtts writes, each with its own loader
        const char * hint = name == kv::ALIGNER_ARCH_NAME ? ": a forced aligner, for qtts.load_aligner"
                            : name == kv::ARCH_NAME       ? ": a text-to-speech model, for qtts.load"
                                                          : "";
        fail("%s: architecture is '%s', expected '%s'%s", path.c_str(), name.c_str(), architecture.c_str(), hint);
    }
}

void GgufFile::check_strings() const {
    for (int64_t i = 0; i < gguf_get_n_kv(gguf_); ++i) {
        const char * key = gguf_get_key(gguf_, i);
        if (!valid_utf8(key)) {
            fail("%s: metadata key '%s' has a name that is not valid UTF-8", path_.c_str(), escaped(key).c_str());
        }
        const enum gguf_type t = gguf_get_kv_type(gguf_, i);
        if (t == GGUF_TYPE_STRING && !valid_utf8(gguf_get_val_str(gguf_, i))) {
            fail("%s: metadata key '%s' holds a string that is not valid UTF-8", path_.c_str(), key);
        }
        if (t == GGUF_TYPE_ARRAY && gguf_get_arr_type(gguf_, i) == GGUF_TYPE_STRING) {
            for (size_t j = 0, n = gguf_get_arr_n(gguf_, i); j < n; ++j) {
                if (!valid_utf8(gguf_get_arr_str(gguf_, i, j))) {
                    fail("%s: metadata key '%s' element %zu is not valid UTF-8", path_.c_str(), key, j);
                }
            }
        }
    }
    for (int64_t i = 0; i < gguf_get_n_tensors(gguf_); ++i) {
        if (!valid_utf8(gguf_get_tensor_name(gguf_, i))) {
            fail("%s: tensor '%s' has a name that is not valid UTF-8", path_.c_str(),
                 escaped(gguf_get_tensor_name(gguf_, i)).c_str());
        }
    }
}

GgufFile::~GgufFile() {
    if (joined_ctx_) ggml_free(joined_ctx_);
    if (meta_) ggml_free(meta_);
    if (gguf_) gguf_free(gguf_);
}

int64_t GgufFile::key_id(const char * key, enum gguf_type want) const {
    int64_t id = gguf_find_key(gguf_, key);
    if (id < 0) fail("%s: metadata key '%s' is missing", path_.c_str(), key);
    enum gguf_type t = gguf_get_kv_type(gguf_, id);
    if (t != want) {
        fail("%s: metadata key '%s' has type %s, expected %s", path_.c_str(), key, gguf_type_name(t),
             gguf_type_name(want));
    }
    return id;
}

bool GgufFile::has(const char * key) const { return gguf_find_key(gguf_, key) >= 0; }

uint32_t GgufFile::u32(const char * key) const {
    int64_t id = gguf_find_key(gguf_, key);
    if (id >= 0 && gguf_get_kv_type(gguf_, id) == GGUF_TYPE_INT32) {
        int32_t v = gguf_get_val_i32(gguf_, id);
        if (v < 0) fail("%s: metadata key '%s' is negative (%d)", path_.c_str(), key, v);
        return static_cast<uint32_t>(v);
    }
    return gguf_get_val_u32(gguf_, key_id(key, GGUF_TYPE_UINT32));
}

float GgufFile::f32(const char * key) const { return gguf_get_val_f32(gguf_, key_id(key, GGUF_TYPE_FLOAT32)); }

bool GgufFile::boolean(const char * key) const { return gguf_get_val_bool(gguf_, key_id(key, GGUF_TYPE_BOOL)); }

std::string GgufFile::str(const char * key) const { return gguf_get_val_str(gguf_, key_id(key, GGUF_TYPE_STRING)); }

std::vector<int32_t> GgufFile::i32_array(const char * key) const {
    int64_t id = key_id(key, GGUF_TYPE_ARRAY);
    enum gguf_type t = gguf_get_arr_type(gguf_, id);
    size_t n = gguf_get_arr_n(gguf_, id);
    std::vector<int32_t> out(n);
    if (t == GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT32) {
        if (n) std::memcpy(out.data(), gguf_get_arr_data(gguf_, id), n * sizeof(int32_t));
        return out;
    }
    fail("%s: metadata key '%s' is an array of %s, expected integers", path_.c_str(), key, gguf_type_name(t));
}

std::vector<std::string> GgufFile::str_array(const char * key) const {
    int64_t id = key_id(key, GGUF_TYPE_ARRAY);
    if (gguf_get_arr_type(gguf_, id) != GGUF_TYPE_STRING) {
        fail("%s: metadata key '%s' is not an array of strings", path_.c_str(), key);
    }
    size_t n = gguf_get_arr_n(gguf_, id);
    std::vector<std::string> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.emplace_back(gguf_get_arr_str(gguf_, id, i));
    return out;
}

void GgufFile::key_error(const char * key, const std::string & problem) const {
    fail("%s: metadata key '%s' %s", path_.c_str(), key, problem.c_str());
}

int GgufFile::count(const char * key, int lo, int hi) const {
    const uint32_t v = u32(key);
    if (v < static_cast<uint32_t>(lo) || v > static_cast<uint32_t>(hi)) {
        key_error(key, format("= %u is outside [%d, %d]", v, lo, hi));
    }
    return static_cast<int>(v);
}

float GgufFile::real(const char * key, float lo, float hi, bool closed) const {
    const float v = f32(key);
    if (!std::isfinite(v)) key_error(key, format("= %g is not a finite number", v));
    const bool ok = closed ? v >= lo && v <= hi : v > lo && v < hi;
    if (!ok) key_error(key, format("= %g is outside %c%g, %g%c", v, closed ? '[' : '(', lo, hi, closed ? ']' : ')'));
    return v;
}

std::vector<int> GgufFile::counts(const char * key, size_t n_lo, size_t n_hi, int lo, int hi) const {
    const std::vector<int32_t> v = i32_array(key);
    if (v.size() < n_lo || v.size() > n_hi) {
        key_error(key, format("has %zu elements, expected %zu to %zu", v.size(), n_lo, n_hi));
    }
    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < lo || v[i] > hi) key_error(key, format("element %zu = %d is outside [%d, %d]", i, v[i], lo, hi));
    }
    return std::vector<int>(v.begin(), v.end());
}

static bool type_allowed(ggml_type t, WeightKind kind) {
    switch (kind) {
        case WeightKind::F32: return t == GGML_TYPE_F32;
        case WeightKind::MATMUL:
        case WeightKind::TABLE:
            if (t == GGML_TYPE_F32 || t == GGML_TYPE_BF16) return true;
            if (!ggml_is_quantized(t)) return false;
            // a type without a CPU dot product crashes ggml instead of failing
            return ggml_get_type_traits_cpu(t)->vec_dot != nullptr;
    }
    return false;
}

ggml_tensor * GgufFile::tensor(const std::string & name, std::initializer_list<int64_t> ne, WeightKind kind,
                               bool required) {
    ggml_tensor * t = ggml_get_tensor(meta_, name.c_str());
    if (!t) {
        if (required) fail("%s: tensor '%s' is missing", path_.c_str(), name.c_str());
        return nullptr;
    }
    int64_t want[GGML_MAX_DIMS] = {1, 1, 1, 1};
    int i = 0;
    for (int64_t v : ne) want[i++] = v;
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (t->ne[d] != want[d]) {
            fail("%s: tensor '%s' has shape %s, expected %s (ggml order)", path_.c_str(), name.c_str(),
                 shape_str(t->ne, n_dims_of(t->ne)).c_str(), shape_str(want, static_cast<int>(ne.size())).c_str());
        }
    }
    if (!type_allowed(t->type, kind)) {
        const char * hint = "";
        if (t->type == GGML_TYPE_F16 && kind == WeightKind::MATMUL) {
            hint = " (F16 overflows this network's activations; convert with --type bf16 or q8_0)";
        } else if (kind == WeightKind::F32) {
            hint = " (this tensor must be F32)";
        }
        fail("%s: tensor '%s' has unsupported type %s%s", path_.c_str(), name.c_str(), ggml_type_name(t->type), hint);
    }
    requested_.insert(name);
    return t;
}

ggml_tensor * GgufFile::join(const std::string & name, const std::vector<ggml_tensor *> & parts, bool copy) {
    int64_t rows = 0;
    bool end_to_end = !copy;
    for (size_t i = 0; i < parts.size(); ++i) {
        const ggml_tensor * p = parts[i];
        if (!requested_.count(p->name) || p->ne[2] != 1 || p->ne[3] != 1) {
            fail("%s: cannot join '%s' into '%s'", path_.c_str(), p->name, name.c_str());
        }
        if (p->type != parts[0]->type || p->ne[0] != parts[0]->ne[0]) return nullptr;
        rows += p->ne[1];
        if (i == 0) continue;
        const ggml_tensor * prev = parts[i - 1];
        const uint64_t end = gguf_get_tensor_offset(gguf_, gguf_find_tensor(gguf_, prev->name)) + ggml_nbytes(prev);
        end_to_end = end_to_end && end == gguf_get_tensor_offset(gguf_, gguf_find_tensor(gguf_, p->name));
    }
    if (parts.empty() || name.size() >= GGML_MAX_NAME) fail("%s: cannot join '%s'", path_.c_str(), name.c_str());
    if (!copy && !end_to_end && mapped_shared_) return nullptr;
    if (!joined_ctx_) {
        // every join takes two parts or more: at most as many joins as tensors
        const size_t n = static_cast<size_t>(gguf_get_n_tensors(gguf_)) + 1;
        joined_ctx_ = ggml_init({n * ggml_tensor_overhead(), nullptr, /*no_alloc=*/true});
    }
    ggml_tensor * t = ggml_new_tensor_2d(joined_ctx_, parts[0]->type, parts[0]->ne[0], rows);
    ggml_set_name(t, name.c_str());
    joined_.push_back({t, parts, copy, end_to_end});
    return t;
}

void GgufFile::place_joined(ggml_backend_buffer_type_t buft, bool copy,
                            const std::function<bool(const Joined &)> & which,
                            std::vector<ggml_backend_buffer_t> & bufs) {
    GgmlErrorCapture log;
    const size_t align = ggml_backend_buft_get_alignment(buft);
    size_t size = 0;
    std::vector<Joined *> todo;
    for (Joined & j : joined_) {
        if (j.copy != copy || j.whole->data || !which(j)) continue;
        todo.push_back(&j);
        size += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, j.whole), align);
    }
    if (todo.empty()) return;
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(buft, size);
    if (!b) engine_fail(log, "%s: out of memory for the joined weights", path_.c_str());
    ggml_backend_buffer_set_usage(b, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    bufs.push_back(b);
    ggml_tallocr ta = ggml_tallocr_new(b);
    std::vector<uint8_t> tmp;
    for (Joined * j : todo) {
        if (ggml_tallocr_alloc(&ta, j->whole) != GGML_STATUS_SUCCESS) {
            engine_fail(log, "%s: cannot place tensor '%s'", path_.c_str(), j->whole->name);
        }
        size_t at = 0;
        for (ggml_tensor * p : j->parts) {
            if (copy) {  // the parts are placed and filled: copy their rows
                tmp.resize(ggml_nbytes(p));
                ggml_backend_tensor_get(p, tmp.data(), 0, tmp.size());
                ggml_backend_tensor_set(j->whole, tmp.data(), at, tmp.size());
            } else if (ggml_backend_tensor_alloc(b, p, static_cast<uint8_t *>(j->whole->data) + at) !=
                       GGML_STATUS_SUCCESS) {
                engine_fail(log, "%s: cannot place tensor '%s'", path_.c_str(), p->name);
            }
            at += ggml_nbytes(p);
        }
    }
}

void GgufFile::check_complete() const {
    const size_t data_offset = gguf_get_data_offset(gguf_);
    for (int64_t i = 0; i < gguf_get_n_tensors(gguf_); ++i) {
        const char * name = gguf_get_tensor_name(gguf_, i);
        if (!requested_.count(name)) {
            fail("%s: unexpected tensor '%s' (not part of this model's layout)", path_.c_str(), name);
        }
        uint64_t end = data_offset + gguf_get_tensor_offset(gguf_, i) + gguf_get_tensor_size(gguf_, i);
        if (end > file_size_) {
            fail("%s: tensor '%s' data is not within the file bounds (file truncated?)", path_.c_str(), name);
        }
    }
}

std::vector<ggml_backend_buffer_t> GgufFile::place(ggml_backend_dev_t dev,
                                                   const std::function<bool(const char *)> & keep_on_host,
                                                   const std::set<std::string> & huge_pages) {
    GgmlErrorCapture log;  // a buffer the device refuses is an engine failure, with ggml's reasons
    const size_t data_offset = gguf_get_data_offset(gguf_);
    std::vector<ggml_backend_buffer_t> bufs;
    const int64_t n = gguf_get_n_tensors(gguf_);
    if (n == 0) return bufs;

    const bool host = ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU;
    auto on_host = [&](const char * name) { return host || keep_on_host(name); };
    // host tensors are mapped from the file where the CPU device allows it
    ggml_backend_dev_t cpu = host ? dev : ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_dev_props props{};
    if (cpu) ggml_backend_dev_get_props(cpu, &props);
    bool any_host = false;
    for (int64_t i = 0; i < n; ++i) any_host = any_host || on_host(gguf_get_tensor_name(gguf_, i));
    auto joined_on = [&](bool want_host) {
        return [&, want_host](const Joined & j) { return on_host(j.parts[0]->name) == want_host; };
    };
    // the copied joins last, from their placed and filled parts
    auto place_copies = [&] {
        if (cpu) place_joined(ggml_backend_dev_buffer_type(cpu), true, joined_on(true), bufs);
        if (!host) place_joined(ggml_backend_dev_buffer_type(dev), true, joined_on(false), bufs);
    };
    ggml_backend_buffer_t mapped = nullptr, huge = nullptr;
    // fill every tensor that is neither mapped nor in `done` from the file
    auto read_rest = [&](ggml_backend_buffer_t done) {
        FILE * f = std::fopen(path_.c_str(), "rb");
        if (!f) fail("%s: cannot open: %s", path_.c_str(), std::strerror(errno));
        std::vector<uint8_t> tmp;
        for (int64_t i = 0; i < n; ++i) {
            ggml_tensor * t = ggml_get_tensor(meta_, gguf_get_tensor_name(gguf_, i));
            if (t->buffer == mapped || (done && t->buffer == done)) continue;
            tmp.resize(ggml_nbytes(t));
            std::fseek(f, static_cast<long>(data_offset + gguf_get_tensor_offset(gguf_, i)), SEEK_SET);
            if (std::fread(tmp.data(), 1, tmp.size(), f) != tmp.size()) {
                std::fclose(f);
                fail("%s: short read of tensor '%s'", path_.c_str(), t->name);
            }
            ggml_backend_tensor_set(t, tmp.data(), 0, tmp.size());
        }
        std::fclose(f);
    };
    if (any_host && cpu && props.caps.buffer_from_host_ptr) {
        map_ = std::make_unique<MappedFile>(path_);
        size_t max_tensor = 0;
        for (int64_t i = 0; i < n; ++i) max_tensor = std::max(max_tensor, gguf_get_tensor_size(gguf_, i));
        uint8_t * base = map_->data() + data_offset;
        mapped = ggml_backend_dev_buffer_from_host_ptr(cpu, base, file_size_ - data_offset, max_tensor);
        if (!mapped) engine_fail(log, "%s: the device could not map the weights", path_.c_str());
        ggml_backend_buffer_set_usage(mapped, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        bufs.push_back(mapped);
        // on another device the streamed weights are the device's
        if (host && !huge_pages.empty() && huge_pages_available()) {
            huge = read_into_huge_pages(cpu, huge_pages);
            if (huge) bufs.push_back(huge);
        }
        // joins whose parts are neither in huge pages nor end to end in the file: a buffer of their
        // own, read from the file below (like the huge pages, the only resident copy)
        place_joined(
            ggml_backend_dev_buffer_type(cpu), false,
            [&](const Joined & j) { return on_host(j.parts[0]->name) && !j.parts[0]->data && !j.end_to_end; }, bufs);
        for (int64_t i = 0; i < n; ++i) {
            if (!on_host(gguf_get_tensor_name(gguf_, i))) continue;
            ggml_tensor * t = ggml_get_tensor(meta_, gguf_get_tensor_name(gguf_, i));
            if (t->data) continue;  // in huge pages or a join's buffer
            if (ggml_backend_tensor_alloc(mapped, t, base + gguf_get_tensor_offset(gguf_, i)) != GGML_STATUS_SUCCESS) {
                engine_fail(log, "%s: cannot place tensor '%s'", path_.c_str(), t->name);
            }
        }
        // the other joins span their parts where they lie end to end: in huge pages or in the file
        for (Joined & j : joined_) {
            ggml_tensor * first = j.parts[0];
            if (j.copy || j.whole->data || !on_host(first->name)) continue;
            if (ggml_backend_tensor_alloc(first->buffer, j.whole, first->data) != GGML_STATUS_SUCCESS) {
                engine_fail(log, "%s: cannot place tensor '%s'", path_.c_str(), j.whole->name);
            }
        }
        if (host) {
            read_rest(huge);
            for (ggml_tensor * t = ggml_get_first_tensor(meta_); t; t = ggml_get_next_tensor(meta_, t)) {
                if (t->buffer != mapped) read_not_mapped_ += ggml_nbytes(t);
            }
            place_copies();
            return bufs;
        }
    } else if (any_host && !host) {
        if (!cpu) engine_fail(log, "%s: no CPU device for the codec weights", path_.c_str());
        place_joined(ggml_backend_dev_buffer_type(cpu), false, joined_on(true), bufs);
        // no mapping: the host tensors get a CPU buffer of their own, filled below
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(cpu);
        const size_t align = ggml_backend_buft_get_alignment(buft);
        size_t size = align;
        for (ggml_tensor * t = ggml_get_first_tensor(meta_); t; t = ggml_get_next_tensor(meta_, t)) {
            if (on_host(t->name) && !t->data) size += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, t), align);
        }
        ggml_backend_buffer_t hb = ggml_backend_buft_alloc_buffer(buft, size);
        if (!hb) engine_fail(log, "%s: out of host memory for the codec weights", path_.c_str());
        ggml_backend_buffer_set_usage(hb, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        bufs.push_back(hb);
        ggml_tallocr ta = ggml_tallocr_new(hb);
        for (ggml_tensor * t = ggml_get_first_tensor(meta_); t; t = ggml_get_next_tensor(meta_, t)) {
            if (on_host(t->name) && !t->data && ggml_tallocr_alloc(&ta, t) != GGML_STATUS_SUCCESS) {
                engine_fail(log, "%s: cannot place tensor '%s'", path_.c_str(), t->name);
            }
        }
    }

    // everything not placed yet goes to the device, each join's parts end to end in a buffer of their own
    place_joined(ggml_backend_dev_buffer_type(dev), false, joined_on(false), bufs);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(meta_, ggml_backend_dev_buffer_type(dev));
    if (!buf)
        engine_fail(log, "%s: out of device memory for the weights on %s", path_.c_str(), ggml_backend_dev_name(dev));
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    bufs.push_back(buf);
    read_rest(nullptr);
    place_copies();
    return bufs;
}

size_t GgufFile::huge_page_bytes() const { return huge_ ? huge_->size() : 0; }

void GgufFile::drop_pages(const ggml_tensor * t) const {
    if (map_ && t->data && map_->spans(t->data, ggml_nbytes(t))) map_->drop(t->data, ggml_nbytes(t));
}

bool GgufFile::in_huge_pages(const ggml_tensor * t) const {
    const auto * p = static_cast<const uint8_t *>(t->data);
    return huge_ && p && p >= huge_->data() && p + ggml_nbytes(t) <= huge_->data() + huge_->size();
}

ggml_backend_buffer_t GgufFile::read_into_huge_pages(ggml_backend_dev_t cpu, const std::set<std::string> & names) {
    GgmlErrorCapture log;
    constexpr size_t kAlign = 64;
    size_t bytes = 0, max_tensor = 0;
    // Runs of tensors placed end to end (a join's parts, all of them or none; otherwise one
    // tensor), by the file offset of their first: close to one forward pass over the file.
    std::vector<std::pair<size_t, std::vector<ggml_tensor *>>> runs;
    std::set<std::string> joined;
    auto offset = [&](const ggml_tensor * t) {
        return gguf_get_tensor_offset(gguf_, gguf_find_tensor(gguf_, t->name));
    };
    auto add = [&](std::vector<ggml_tensor *> run) {
        size_t n = 0;
        for (ggml_tensor * t : run) n += ggml_nbytes(t);
        bytes += GGML_PAD(n, kAlign);
        max_tensor = std::max(max_tensor, n);
        runs.emplace_back(offset(run[0]), std::move(run));
    };
    for (const Joined & j : joined_) {
        if (j.copy) continue;
        bool all = true;
        for (const ggml_tensor * p : j.parts) all = all && names.count(p->name) > 0;
        for (const ggml_tensor * p : j.parts) joined.insert(p->name);
        if (all) add(j.parts);
    }
    for (const std::string & name : names) {
        ggml_tensor * t = ggml_get_tensor(meta_, name.c_str());
        if (!t || gguf_find_tensor(gguf_, name.c_str()) < 0) {
            fail("%s: no tensor '%s' to read into huge pages", path_.c_str(), name.c_str());
        }
        if (!joined.count(name)) add({t});
    }
    std::sort(runs.begin(), runs.end(), [](const auto & a, const auto & b) { return a.first < b.first; });
    try {
        huge_ = std::make_unique<HugePageBuffer>(bytes);
    } catch (const EngineError &) {
        return nullptr;  // no memory for the copy: an optimization, so the weights stay mapped
    }
    ggml_backend_buffer_t buf = ggml_backend_dev_buffer_from_host_ptr(cpu, huge_->data(), bytes, max_tensor);
    if (!buf) engine_fail(log, "%s: the CPU device could not take the huge-page weight buffer", path_.c_str());
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    // read from the file, not copied through the mapping: the copy is the only resident one
    std::ifstream in(path_, std::ios::binary);
    if (!in) fail("%s: cannot open: %s", path_.c_str(), std::strerror(errno));
    const size_t data_offset = gguf_get_data_offset(gguf_);
    uint8_t * at = huge_->data();
    for (const auto & [first, run] : runs) {
        for (ggml_tensor * t : run) {
            if (ggml_backend_tensor_alloc(buf, t, at) != GGML_STATUS_SUCCESS) {
                ggml_backend_buffer_free(buf);
                engine_fail(log, "%s: cannot place tensor '%s'", path_.c_str(), t->name);
            }
            in.seekg(static_cast<std::streamoff>(data_offset + offset(t)));
            if (!in.read(reinterpret_cast<char *>(at), static_cast<std::streamsize>(ggml_nbytes(t)))) {
                ggml_backend_buffer_free(buf);
                fail("%s: short read of tensor '%s'", path_.c_str(), t->name);
            }
            at += ggml_nbytes(t);
        }
        at = huge_->data() + GGML_PAD(static_cast<size_t>(at - huge_->data()), kAlign);
    }
    return buf;
}

}  // namespace qtts
