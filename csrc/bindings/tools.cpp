// Module-level tools: the tokenizer tables, the sampler, ggml's quantizers, devices, CPU features and
// the memory bandwidth probe.
#include <algorithm>
#include <random>
#include <thread>

#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "runtime/error.h"
#include "runtime/gguf_file.h"
#include "runtime/membw.h"
#include "runtime/names.h"
#include "runtime/sampling.h"

namespace py = pybind11;

namespace qtts {

namespace {

ggml_type quant_type(const std::string & name) {
    static const std::pair<const char *, ggml_type> types[] = {
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_k", GGML_TYPE_Q4_K}, {"q5_k", GGML_TYPE_Q5_K}, {"q6_k", GGML_TYPE_Q6_K}};
    for (const auto & [n, t] : types) {
        if (name == n) return t;
    }
    throw Error(format("quantize: unknown type '%s' (expected q8_0, q4_k, q5_k or q6_k)", name.c_str()));
}

// ggml's reference quantizers on rows [nrows, n_per_row]; rows are split over threads, each
// writing its own byte range of the result (ggml_quantize_chunk is thread-safe and offsets both
// src and dst by its `start` element itself).
py::bytes quantize_rows(const FloatRows & a, const std::string & type_name, int n_threads) {
    const ggml_type type = quant_type(type_name);
    if (a.ndim() != 2) throw Error(format("quantize: expected a 2-D array of rows, got %d dimensions", (int)a.ndim()));
    const int64_t nrows = a.shape(0), n_per_row = a.shape(1), blck = ggml_blck_size(type);
    if (n_per_row <= 0 || n_per_row % blck != 0) {
        throw Error(format("quantize: rows of %lld values are not a whole number of %s blocks (%lld)",
                           (long long)n_per_row, ggml_type_name(type), (long long)blck));
    }
    if (ggml_quantize_requires_imatrix(type)) {
        throw Error(format("quantize: %s needs an importance matrix", ggml_type_name(type)));
    }
    if (n_threads < 1) throw Error("quantize: n_threads must be at least 1");
    const size_t row_size = ggml_row_size(type, n_per_row);
    // filled in place without the GIL: nothing else can see the object before it is returned
    PyObject * raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(row_size * nrows));
    if (!raw) throw py::error_already_set();
    py::bytes out = py::reinterpret_steal<py::bytes>(raw);
    char * dst = PyBytes_AS_STRING(raw);
    const float * src = a.data();
    {
        py::gil_scoped_release release;
        ggml_quantize_init(type);
        const int64_t n_workers = std::max<int64_t>(1, std::min<int64_t>(n_threads, nrows));
        const int64_t per = (nrows + n_workers - 1) / n_workers;
        auto work = [&](int64_t r0) {
            const int64_t r1 = std::min(nrows, r0 + per);
            if (r0 < r1) ggml_quantize_chunk(type, src, dst, r0 * n_per_row, r1 - r0, n_per_row, nullptr);
        };
        std::vector<std::thread> pool;
        for (int64_t w = 1; w < n_workers; ++w) pool.emplace_back(work, w * per);
        work(0);
        for (std::thread & t : pool) t.join();
    }
    return out;
}

}  // namespace

void bind_tools(py::module_ & m) {
    m.def(
        "read_tokenizer",
        [](const std::string & path, const std::string & architecture) {
            std::vector<std::string> tokens, merges;
            std::vector<int32_t> types;
            {
                py::gil_scoped_release release;
                GgufFile f(path, architecture);  // the native parser: gguf-py takes seconds over a 151k vocabulary
                for (const char * key : {kv::TOKENIZER_TOKENS, kv::TOKENIZER_TOKEN_TYPE, kv::TOKENIZER_MERGES}) {
                    if (!f.has(key))
                        fail("%s: metadata key '%s' is missing (no tokenizer in this file)", path.c_str(), key);
                }
                tokens = f.str_array(kv::TOKENIZER_TOKENS);
                types = f.i32_array(kv::TOKENIZER_TOKEN_TYPE);
                merges = f.str_array(kv::TOKENIZER_MERGES);
            }
            return py::make_tuple(tokens, types, merges);
        },
        py::arg("path"), py::arg("architecture") = std::string(kv::ARCH_NAME),
        "(tokens, token types, merges) of a qtts GGUF file (a model's, or an aligner's: architecture).");
    m.def(
        "sample_tokens",
        [](const FloatRows & logits, bool do_sample, float temperature, int top_k, float top_p, uint64_t seed) {
            if (logits.ndim() != 2 || logits.shape(1) < 1) throw Error("sample_tokens: logits must be [n, vocab]");
            const SamplingParams p{do_sample, temperature, top_k, top_p};
            std::mt19937_64 rng(seed);
            const py::ssize_t n = logits.shape(0), v = logits.shape(1);
            std::vector<int32_t> out(static_cast<size_t>(n));
            std::vector<float> row(static_cast<size_t>(v));
            py::gil_scoped_release release;
            for (py::ssize_t i = 0; i < n; ++i) {
                std::copy(logits.data() + i * v, logits.data() + (i + 1) * v, row.begin());
                out[static_cast<size_t>(i)] = select_token(row, p, rng);
            }
            return out;
        },
        py::arg("logits"), py::arg("do_sample"), py::arg("temperature"), py::arg("top_k"), py::arg("top_p"),
        py::arg("seed"), "One token per row with the generation loop's sampler (tests and micro-benchmarks).");
    m.def(
        "read_bandwidth",
        [](size_t bytes, int n_threads, int passes) {
            py::gil_scoped_release release;
            return read_bandwidth(bytes, n_threads, passes);
        },
        py::arg("bytes"), py::arg("n_threads"), py::arg("passes") = 5,
        "Stream read bandwidth in GB/s: n_threads threads summing a buffer of `bytes`, best of `passes`.");
    m.def("ggml_version", []() { return std::string(ggml_version()); });
    m.def("quantize", &quantize_rows, py::arg("rows"), py::arg("type"), py::arg("n_threads") = 1,
          "Quantize float32 rows [n, n_per_row] to q8_0, q4_k, q5_k or q6_k with ggml; the raw blocks.");
    m.def("devices", []() {
        std::vector<py::dict> out;
        for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
            ggml_backend_dev_t d = ggml_backend_dev_get(i);
            py::dict e;
            e["name"] = ggml_backend_dev_name(d);
            e["description"] = ggml_backend_dev_description(d);
            switch (ggml_backend_dev_type(d)) {
                case GGML_BACKEND_DEVICE_TYPE_CPU: e["type"] = "cpu"; break;
                case GGML_BACKEND_DEVICE_TYPE_GPU: e["type"] = "gpu"; break;
                case GGML_BACKEND_DEVICE_TYPE_IGPU: e["type"] = "igpu"; break;
                default: e["type"] = "accel"; break;
            }
            out.push_back(e);
        }
        return out;
    });
    m.def("cpu_features", []() {
        std::vector<std::string> out;
        ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
        auto get =
            reg ? (ggml_backend_get_features_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features")
                : nullptr;
        if (get) {
            for (ggml_backend_feature * f = get(reg); f && f->name; ++f) out.emplace_back(f->name);
        }
        return out;
    });
}

}  // namespace qtts
