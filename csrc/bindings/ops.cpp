// qtts._core.ops: the custom CPU ops one at a time, for op-level tests. Each runner builds a
// one-op graph on the CPU backend from numpy arrays and returns the result; arrays are
// time-major ([T, C] in numpy is ne = [C, T] in ggml), conv weights in the panel layout
// [N/P, K, Cin, P]. Shapes are checked here, naming the argument, before ggml sees them.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "ops/attend.h"
#include "ops/conv_gemm.h"
#include "ops/elu_left.h"
#include "ops/layout.h"
#include "ops/qmatmul.h"
#include "ops/simd.h"
#include "ops/snake_beta.h"
#include "ops/stock.h"
#include "ops/time_stats.h"
#include "runtime/error.h"
#include "runtime/graph.h"
#include "runtime/host_memory.h"

namespace py = pybind11;
using namespace qtts;

namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;

constexpr SimdPath kPaths[] = {SimdPath::scalar, SimdPath::avx2, SimdPath::avx512, SimdPath::amx, SimdPath::neon};

// The shape of `a`, checked against `ndim` and, where `want` is not -1, each dimension.
std::vector<int64_t> shape(const Floats & a, const char * name, std::vector<int64_t> want) {
    if (a.ndim() != static_cast<py::ssize_t>(want.size())) {
        throw Error(format("%s must be a %zu-D array, got %d-D", name, want.size(), static_cast<int>(a.ndim())));
    }
    std::vector<int64_t> s(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        s[i] = a.shape(static_cast<py::ssize_t>(i));
        if (s[i] < 1) throw Error(format("%s has an empty dimension %zu", name, i));
        if (want[i] != -1 && s[i] != want[i]) {
            throw Error(format("%s: dimension %zu is %lld, expected %lld", name, i, static_cast<long long>(s[i]),
                               static_cast<long long>(want[i])));
        }
    }
    return s;
}

void check_threads(int n_threads) {
    if (n_threads < 1) throw Error(format("n_threads must be at least 1, got %d", n_threads));
}

// A one-op graph: inputs are declared (numpy order), then the op, then run() computes it.
class OneOp {
public:
    explicit OneOp(size_t n_inputs = 8) {
        ggml_init_params ip = {ggml_tensor_overhead() * (2 * n_inputs + 8) + ggml_graph_overhead(), nullptr,
                               /*no_alloc=*/true};
        ctx_ = ggml_init(ip);
        cpu_ = ggml_backend_cpu_init();
        if (!ctx_ || !cpu_) engine_fail(log_, "could not initialise the CPU backend");
    }
    ~OneOp() {
        for (ggml_backend_buffer_t b : bufs_) ggml_backend_buffer_free(b);
        if (cpu_) ggml_backend_free(cpu_);
        if (ctx_) ggml_free(ctx_);
    }
    OneOp(const OneOp &) = delete;
    OneOp & operator=(const OneOp &) = delete;

    ggml_context * ctx() { return ctx_; }

    // A tensor with the numpy shape `np_shape` reversed, filled from `a` at run().
    ggml_tensor * input(const Floats & a, const std::vector<int64_t> & np_shape) {
        int64_t ne[4] = {1, 1, 1, 1};
        for (size_t i = 0; i < np_shape.size(); ++i) ne[i] = np_shape[np_shape.size() - 1 - i];
        ggml_tensor * t = ggml_new_tensor_4d(ctx_, GGML_TYPE_F32, ne[0], ne[1], ne[2], ne[3]);
        inputs_.push_back({t, a});
        return t;
    }

    // A [ne0, ne1] tensor of `type` filled with the raw bytes of `a` at run().
    ggml_tensor * input_raw(ggml_type type, int64_t ne0, int64_t ne1, const py::array & a) {
        ggml_tensor * t = ggml_new_tensor_2d(ctx_, type, ne0, ne1);
        inputs_.push_back({t, a});
        return t;
    }

    // Fills an allocated input now, not at run(): for what rewrites it in place (a packed weight).
    void fill_now(ggml_tensor * t) {
        for (auto it = inputs_.begin(); it != inputs_.end(); ++it) {
            if (it->first != t) continue;
            ggml_backend_tensor_set(t, it->second.data(), 0, ggml_nbytes(t));
            inputs_.erase(it);
            return;
        }
    }

    // An unfilled tensor of n floats: allocated in order, it shifts the tensors after it.
    void spacer(int64_t n) { ggml_new_tensor_1d(ctx_, GGML_TYPE_F32, n); }

    py::array_t<float> run(ggml_tensor * out, int n_threads) {
        ggml_cgraph * gf = prepare(out, n_threads);
        compute(gf);
        py::array_t<float> y({static_cast<py::ssize_t>(out->ne[1]), static_cast<py::ssize_t>(out->ne[0])});
        ggml_backend_tensor_get(out, y.mutable_data(), 0, ggml_nbytes(out));
        return y;
    }

    // Allocate the tensors declared so far (matmul() looks at where its weights live); with
    // huge_pages, in transparent huge pages where the OS has them, as a model's streamed weights.
    void allocate(bool huge_pages = false) {
        if (huge_pages && huge_pages_available()) {
            constexpr size_t kAlign = 64;
            size_t bytes = 0;
            for (ggml_tensor * t = ggml_get_first_tensor(ctx_); t; t = ggml_get_next_tensor(ctx_, t)) {
                if (!t->data) bytes += GGML_PAD(ggml_nbytes(t), kAlign);
            }
            huge_.push_back(std::make_unique<HugePageBuffer>(bytes));
            ggml_backend_buffer_t b = ggml_backend_cpu_buffer_from_ptr(huge_.back()->data(), bytes);
            if (!b) engine_fail(log_, "could not allocate the op's tensors");
            bufs_.push_back(b);
            ggml_tallocr ta = ggml_tallocr_new(b);
            for (ggml_tensor * t = ggml_get_first_tensor(ctx_); t; t = ggml_get_next_tensor(ctx_, t)) {
                if (!t->data && ggml_tallocr_alloc(&ta, t) != GGML_STATUS_SUCCESS) {
                    engine_fail(log_, "could not place tensor '%s'", t->name);
                }
            }
            return;
        }
        ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors(ctx_, cpu_);
        if (!b) engine_fail(log_, "could not allocate the op's tensors");
        bufs_.push_back(b);
    }

    // The contents of `t` (after run) as a numpy array of `np_shape`.
    py::array_t<float> fetch(const ggml_tensor * t, const std::vector<py::ssize_t> & np_shape) {
        py::array_t<float> y(np_shape);
        ggml_backend_tensor_get(t, y.mutable_data(), 0, ggml_nbytes(t));
        return y;
    }

    // Seconds per computation of `outs`, `repeats` times after one warm-up run.
    std::vector<double> time(const std::vector<ggml_tensor *> & outs, int n_threads, int repeats) {
        ggml_cgraph * gf = prepare(outs.front(), n_threads);
        for (ggml_tensor * o : outs) ggml_build_forward_expand(gf, o);
        compute(gf);
        std::vector<double> s;
        for (int i = 0; i < repeats; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            compute(gf);
            s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return s;
    }

private:
    ggml_cgraph * prepare(ggml_tensor * out, int n_threads) {
        ggml_cgraph * gf = ggml_new_graph(ctx_);
        ggml_build_forward_expand(gf, out);
        allocate();
        for (const auto & in : inputs_) ggml_backend_tensor_set(in.first, in.second.data(), 0, ggml_nbytes(in.first));
        ggml_backend_cpu_set_n_threads(cpu_, n_threads);
        return gf;
    }

    void compute(ggml_cgraph * gf) {
        ggml_status status;
        {
            py::gil_scoped_release release;
            status = ggml_backend_graph_compute(cpu_, gf);
        }
        if (status != GGML_STATUS_SUCCESS) engine_fail(log_, "the op's graph failed to compute");
    }

    GgmlErrorCapture log_;  // first member: it collects ggml's error lines from the start
    ggml_context * ctx_ = nullptr;
    ggml_backend_t cpu_ = nullptr;
    std::vector<ggml_backend_buffer_t> bufs_;
    std::vector<std::unique_ptr<HugePageBuffer>> huge_;  // memory under some of bufs_ (freed after them)
    std::vector<std::pair<ggml_tensor *, py::array>> inputs_;
};

// conv_gemm's one-op graph over these operands (checked first).
ggml_tensor * conv_gemm_graph(OneOp & op, const Floats & xp, const Floats & w, int64_t n,
                              const std::optional<Floats> & bias, const std::optional<Floats> & residual,
                              int64_t stride, const std::optional<std::vector<int32_t>> & segments, bool bf16) {
    const std::vector<int64_t> ws = shape(w, "w", {-1, -1, -1, -1});
    const int64_t panels = ws[0], K = ws[1], cin = ws[2], P = ws[3], N = panels * P;
    const int64_t T = shape(xp, "xp", {-1, cin})[0];
    if (n < 1) throw Error(format("n must be at least 1, got %lld", static_cast<long long>(n)));
    if (stride < 1) throw Error(format("stride must be at least 1, got %lld", static_cast<long long>(stride)));
    const int64_t S = segments ? static_cast<int64_t>(segments->size()) : 1;
    if (segments) {
        int64_t sum = 0;
        for (int32_t m : *segments) {
            if (m < 1) throw Error(format("segments: every row count must be at least 1, got %d", m));
            sum += m;
        }
        if (S < 1 || sum != n || stride != 1) {
            throw Error(format("segments must be 1 or more row counts summing to n = %lld (stride 1), got %lld summing "
                               "to %lld",
                               static_cast<long long>(n), static_cast<long long>(S), static_cast<long long>(sum)));
        }
    }
    if (stride == 1 && (T < n || (T - n) % S != 0 || (K == 1 ? T != n : (T - n) / S % (K - 1) != 0))) {
        throw Error(format("xp has %lld rows: n + segments*(K-1)*d expected for n = %lld outputs of a kernel-%lld conv "
                           "over %lld segments",
                           static_cast<long long>(T), static_cast<long long>(n), static_cast<long long>(K),
                           static_cast<long long>(S)));
    }
    if (stride > 1 && T < (n - 1) * stride + K) {
        throw Error(format("xp has %lld rows: at least (n-1)*stride + K = %lld expected", static_cast<long long>(T),
                           static_cast<long long>((n - 1) * stride + K)));
    }
    if (bias) shape(*bias, "bias", {N});
    if (residual) shape(*residual, "residual", {n, N});

    if (bf16 && (P != kPanelWidth || cin % 32 != 0 || stride != 1)) {
        throw Error(format("bf16 needs panels of %lld lanes over a multiple of 32 input channels, stride 1",
                           static_cast<long long>(kPanelWidth)));
    }
    // the avx512 path copies weights that start off a cache line to an aligned buffer: put them
    // 32 bytes off one (ggml's CPU buffers are line-aligned) so that the tests exercise the copy
    op.spacer(8);
    ggml_tensor * wt = op.input(w, ws);
    if (bf16) {
        py::array_t<uint16_t> packed(static_cast<py::ssize_t>(panels * K * cin * P));
        conv_pack_bf16(w.data(), cin, K, panels, packed.mutable_data());
        wt = op.input_raw(GGML_TYPE_BF16, kBf16Block, cin / 32 * K * panels, packed);
        wt = ggml_reshape_4d(op.ctx(), wt, kBf16Block, cin / 32, K, panels);
    }
    ggml_tensor * x = op.input(xp, {T, cin});
    ggml_tensor * b = bias ? op.input(*bias, {N}) : nullptr;
    ggml_tensor * r = residual ? op.input(*residual, {n, N}) : nullptr;
    ggml_context * ctx = op.ctx();
    if (stride > 1) {
        // as the codec encoder's strided convs: windows of K rows every `stride` rows, read as one
        // K = 1 conv over K*Cin channels
        x = overlapping_rows(ctx, x, cin * K, n, stride * x->nb[1]);
        wt = ggml_reshape_4d(ctx, wt, P, cin * K, 1, panels);
    }
    ggml_tensor * seg = nullptr;
    if (segments) {
        py::array_t<int32_t> rows(static_cast<py::ssize_t>(S), segments->data());
        seg = op.input_raw(GGML_TYPE_I32, S, 1, rows);
    }
    return conv_gemm(ctx, x, wt, n, b, r, seg);
}

py::array_t<float> run_conv_gemm(const Floats & xp, const Floats & w, int64_t n, const std::optional<Floats> & bias,
                                 const std::optional<Floats> & residual, int64_t stride,
                                 const std::optional<std::vector<int32_t>> & segments, bool bf16, int n_threads) {
    check_threads(n_threads);
    OneOp op;
    return op.run(conv_gemm_graph(op, xp, w, n, bias, residual, stride, segments, bf16), n_threads);
}

std::vector<double> time_conv_gemm(const Floats & xp, const Floats & w, int64_t n, bool bf16, int n_threads,
                                   int repeats) {
    check_threads(n_threads);
    if (repeats < 1) throw Error(format("repeats must be at least 1, got %d", repeats));
    OneOp op;
    return op.time({conv_gemm_graph(op, xp, w, n, std::nullopt, std::nullopt, 1, std::nullopt, bf16)}, n_threads,
                   repeats);
}

py::array_t<float> run_snake_beta(const Floats & x, const Floats & exp_alpha, const Floats & inv_beta,
                                  const std::optional<Floats> & left, int n_threads) {
    check_threads(n_threads);
    const std::vector<int64_t> xs = shape(x, "x", {-1, -1});
    const int64_t C = xs[1];
    shape(exp_alpha, "exp_alpha", {C});
    shape(inv_beta, "inv_beta", {C});
    OneOp op;
    ggml_tensor * xt = op.input(x, xs);
    ggml_tensor * ea = op.input(exp_alpha, {C});
    ggml_tensor * ib = op.input(inv_beta, {C});
    ggml_tensor * lt = left ? op.input(*left, shape(*left, "left", {-1, C})) : nullptr;
    return op.run(snake_beta(op.ctx(), xt, ea, ib, lt), n_threads);
}

py::array_t<float> run_elu_left(const Floats & x, const std::optional<Floats> & left, int64_t pad, int n_threads) {
    check_threads(n_threads);
    const std::vector<int64_t> xs = shape(x, "x", {-1, -1});
    if (pad < 0) throw Error(format("pad must be at least 0, got %lld", static_cast<long long>(pad)));
    OneOp op;
    ggml_tensor * xt = op.input(x, xs);
    ggml_tensor * lt = left ? op.input(*left, shape(*left, "left", {-1, xs[1]})) : nullptr;
    return op.run(elu_left(op.ctx(), xt, lt, pad), n_threads);
}

// a [H, M, K] times b [H, N, K] per h through the exact product's padded form: [H, N, M].
py::array_t<float> run_mul_mat_exact(const Floats & a, const Floats & b, bool every_width) {
    const std::vector<int64_t> as = shape(a, "a", {-1, -1, -1});
    const std::vector<int64_t> bs = shape(b, "b", {as[0], -1, as[2]});
    OneOp op;
    ggml_tensor * y = mul_mat_exact(op.ctx(), op.input(a, as), op.input(b, bs), every_width);
    // scaled by 1 as a network's next op would: ggml_scale asserts on an operand not dense-rowed
    y = ggml_scale(op.ctx(), y, 1.0f);
    py::array_t<float> out = op.run(ggml_reshape_2d(op.ctx(), y, y->ne[0], y->ne[1] * y->ne[2]), 1);
    return out.reshape({as[0], bs[1], as[1]});
}

py::array_t<float> run_time_stats(const Floats & x, const std::optional<Floats> & logits, int n_threads) {
    check_threads(n_threads);
    const std::vector<int64_t> xs = shape(x, "x", {-1, -1});
    OneOp op;
    ggml_tensor * xt = op.input(x, xs);
    ggml_tensor * lt = logits ? op.input(*logits, shape(*logits, "logits", xs)) : nullptr;
    return op.run(time_stats(op.ctx(), xt, lt), n_threads);
}

// attend_cached over caches in numpy order: q [n * lanes, n_head, hd], k and v [n * lanes,
// n_head_kv, hd], k_cache and v_cache [n_ctx, n_head_kv, hd] with lane l's window at positions
// l * lane_stride ...; returns the output and both caches after the op wrote into them.
py::tuple run_attend(const Floats & q, const Floats & k, const Floats & v, const Floats & k_cache,
                     const Floats & v_cache, int64_t n_past, int64_t lanes, int64_t lane_stride, int n_threads) {
    check_threads(n_threads);
    const std::vector<int64_t> qs = shape(q, "q", {-1, -1, -1});
    const int64_t n_all = qs[0], n_head = qs[1], hd = qs[2];
    const std::vector<int64_t> cs = shape(k_cache, "k_cache", {-1, -1, hd});
    const int64_t n_ctx = cs[0], nkv = cs[1];
    shape(v_cache, "v_cache", {n_ctx, nkv, hd});
    shape(k, "k", {n_all, nkv, hd});
    shape(v, "v", {n_all, nkv, hd});
    if (n_head % nkv != 0) {
        throw Error(format("q has %lld heads, not a multiple of the caches' %lld", static_cast<long long>(n_head),
                           static_cast<long long>(nkv)));
    }
    if (lanes < 1 || n_all % lanes != 0) {
        throw Error(format("lanes must be at least 1 and divide q's %lld positions, got %lld",
                           static_cast<long long>(n_all), static_cast<long long>(lanes)));
    }
    const int64_t n_kv = n_past + n_all / lanes;
    if (n_past < 0 || (lanes > 1 && lane_stride < n_kv) || (lanes - 1) * lane_stride + n_kv > n_ctx) {
        throw Error(format("n_past %lld, lanes %lld and lane_stride %lld do not fit caches of %lld positions",
                           static_cast<long long>(n_past), static_cast<long long>(lanes),
                           static_cast<long long>(lane_stride), static_cast<long long>(n_ctx)));
    }
    OneOp op;
    ggml_tensor * qt = op.input(q, qs);
    ggml_tensor * kt = op.input(k, {n_all, nkv, hd});
    ggml_tensor * vt = op.input(v, {n_all, nkv, hd});
    ggml_tensor * kc = op.input(k_cache, cs);
    ggml_tensor * vc = op.input(v_cache, cs);
    py::array_t<int32_t> positions(n_all);  // each lane's new positions, n_past on
    for (int64_t r = 0; r < n_all; ++r)
        positions.mutable_data()[r] = static_cast<int32_t>(n_past + r % (n_all / lanes));
    ggml_tensor * pt = op.input_raw(GGML_TYPE_I32, n_all, 1, positions);
    auto window = [&](ggml_tensor * c) {
        return ggml_view_4d(op.ctx(), c, hd, n_kv, nkv, lanes, c->nb[2], c->nb[1], lane_stride * c->nb[2], 0);
    };
    py::array_t<float> out = op.run(attend_cached(op.ctx(), qt, kt, vt, window(kc), window(vc), pt), n_threads);
    const std::vector<py::ssize_t> np_cs = {static_cast<py::ssize_t>(n_ctx), static_cast<py::ssize_t>(nkv),
                                            static_cast<py::ssize_t>(hd)};
    return py::make_tuple(out, op.fetch(kc, np_cs), op.fetch(vc, np_cs));
}

using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

ggml_type weight_type(const std::string & name) {
    if (name == "q8_0") return GGML_TYPE_Q8_0;
    if (name == "q4_k") return GGML_TYPE_Q4_K;
    if (name == "q6_k") return GGML_TYPE_Q6_K;
    throw Error(format("type: unknown weight type '%s' (q8_0, q4_k or q6_k)", name.c_str()));
}

// The one-op graph of matmul() (graph.h: the quantized matmul or ggml's mul_mat, as the matmul
// path says) for quantized rows w [N, row bytes] and x [M, K]; `copies` > 1 multiplies as many
// copies of w (so that a benchmark's weights come from memory, not from the cache). With `pack`,
// Q8_0 weights are packed as a model's are (ops/qmatmul.h): always for the direct quantized
// matmul (Error where they cannot be), where the native path would otherwise.
std::vector<ggml_tensor *> matmul_graph(OneOp & op, const Bytes & w, const std::string & type_name, const Floats & x,
                                        bool direct = false, int copies = 1, bool huge_pages = false,
                                        bool pack = false) {
    const ggml_type type = weight_type(type_name);
    const int64_t K = shape(x, "x", {-1, -1})[1], block = ggml_blck_size(type);
    if (K % block != 0) {
        throw Error(format("x: %lld values per row are not whole %s blocks of %lld", static_cast<long long>(K),
                           type_name.c_str(), static_cast<long long>(block)));
    }
    if (w.ndim() != 2 || w.shape(0) < 1 || w.shape(1) != static_cast<py::ssize_t>(ggml_row_size(type, K))) {
        throw Error(format("w must be [N, %zu] bytes (%s rows of K = %lld values)", ggml_row_size(type, K),
                           type_name.c_str(), static_cast<long long>(K)));
    }
    std::vector<ggml_tensor *> ws;
    for (int i = 0; i < copies; ++i) ws.push_back(op.input_raw(type, K, w.shape(0), w));
    ggml_tensor * xt = op.input(x, {x.shape(0), K});
    op.allocate(huge_pages);
    for (ggml_tensor * wt : ws) {
        if (!pack || (!direct && (matmul_path() != MatmulPath::native || !qmatmul_packs(wt)))) continue;
        if (!qmatmul_packs(wt)) {
            throw Error(format("packed: %s weights cannot be packed (Q8_0 on an x86 CPU with AVX-512 VNNI; Q4_K "
                               "and Q6_K in whole blocks of 16 rows on one with AMX)",
                               type_name.c_str()));
        }
        op.fill_now(wt);
        qmatmul_pack(wt);
    }
    std::vector<ggml_tensor *> outs;
    for (ggml_tensor * wt : ws) outs.push_back(direct ? qmatmul(op.ctx(), wt, xt) : matmul(op.ctx(), wt, xt));
    return outs;
}

py::array_t<float> run_matmul(const Bytes & w, const std::string & type, const Floats & x, int n_threads, bool direct,
                              bool packed) {
    check_threads(n_threads);
    OneOp op;
    return op.run(matmul_graph(op, w, type, x, direct, 1, false, packed).front(), n_threads);
}

std::vector<double> time_matmul(const Bytes & w, const std::string & type, const Floats & x, int n_threads, int repeats,
                                int copies, bool huge_pages, bool packed) {
    check_threads(n_threads);
    if (repeats < 1) throw Error(format("repeats must be at least 1, got %d", repeats));
    if (copies < 1 || copies > 1024) throw Error(format("copies must be between 1 and 1024, got %d", copies));
    OneOp op(copies + 2);
    return op.time(matmul_graph(op, w, type, x, false, copies, huge_pages, packed), n_threads, repeats);
}

}  // namespace

void qtts::bind_ops(py::module_ & mod) {
    py::module_ m = mod.def_submodule("ops", "The custom CPU ops one at a time (op-level tests).");
    m.def(
        "simd_paths",
        []() {
            std::vector<std::string> out;
            for (SimdPath p : kPaths) {
                if (simd_path_available(p)) out.push_back(simd_path_name(p));
            }
            return out;
        },
        "The SIMD paths this CPU supports, from scalar to the best.");
    m.def(
        "get_simd_path", []() { return std::string(simd_path_name(simd_path())); },
        "The SIMD path the custom ops take now.");
    m.def(
        "set_simd_path",
        [](const std::string & name) {
            for (SimdPath p : kPaths) {
                if (name == simd_path_name(p)) return set_simd_path(p);
            }
            throw Error(format("unknown SIMD path '%s' (scalar, avx2, avx512, amx or neon)", name.c_str()));
        },
        py::arg("name"), "Test-only: make every custom op (in every model of this process) take this path.");
    m.def("has_bf16_tiles", &conv_gemm_has_bf16_tiles,
          "Whether this CPU computes BF16 convs in AMX tiles (conv_gemm(..., bf16=True) on the amx path).");
    m.def("conv_gemm", &run_conv_gemm, py::arg("xp"), py::arg("w"), py::arg("n"), py::arg("bias") = py::none(),
          py::arg("residual") = py::none(), py::kw_only(), py::arg("stride") = 1, py::arg("segments") = py::none(),
          py::arg("bf16") = false, py::arg("n_threads") = 1,
          "y [n, N] = conv of xp [T, Cin] (left context first) with panels w [N/P, K, Cin, P]; dilation "
          "(T - n) / (K - 1). stride > 1 reads windows of K rows every `stride` rows. segments (row counts "
          "summing to n): xp holds each segment's left context then its rows, one segment after the other, "
          "dilation (T - n) / len(segments) / (K - 1); y the segments' rows. bf16: the weights' BF16 copy "
          "(conv_pack_bf16), xp rounded to BF16 too.");
    m.def(
        "matmul",
        [](const Bytes & w, const std::string & type, const Floats & x, int n_threads) {
            return run_matmul(w, type, x, n_threads, false, false);
        },
        py::arg("w"), py::arg("type"), py::arg("x"), py::kw_only(), py::arg("n_threads") = 1,
        "y [M, N] = x [M, K] times the rows of w [N, row bytes] (type q8_0, q4_k or q6_k), through matmul() "
        "as the models build it (see set_matmul_path).");
    m.def(
        "qmatmul",
        [](const Bytes & w, const std::string & type, const Floats & x, int n_threads, bool packed) {
            return run_matmul(w, type, x, n_threads, true, packed);
        },
        py::arg("w"), py::arg("type"), py::arg("x"), py::kw_only(), py::arg("n_threads") = 1, py::arg("packed") = false,
        "As matmul, always through the quantized matmul's kernel for the SIMD path in effect; packed: with the "
        "Q8_0 weights packed first, as a model's are on a CPU with AVX-512 VNNI (ValueError where they cannot be).");
    m.def(
        "qmatmul_vectorized", [](const std::string & type) { return qmatmul_vectorized(weight_type(type)); },
        py::arg("type"),
        "Whether matmul() takes the quantized matmul for host weights of this type on the SIMD path in effect "
        "(a vectorized kernel exists: Q8_0 on AVX2, AVX-512 VNNI or NEON, the K-quants on AVX-512 VNNI); "
        "otherwise it takes ggml's mul_mat.");
    m.def("q8_0_packs", &qmatmul_packs_q8_0,
          "Whether this CPU packs Q8_0 weights for the quantized matmul (x86 with AVX-512 VNNI).");
    m.def("time_conv_gemm", &time_conv_gemm, py::arg("xp"), py::arg("w"), py::arg("n"), py::kw_only(),
          py::arg("bf16") = false, py::arg("n_threads") = 1, py::arg("repeats") = 10,
          "Seconds per computation of conv_gemm(xp, w, n, bf16=...), `repeats` times after a warm-up run "
          "(benchmarks).");
    m.def("time_matmul", &time_matmul, py::arg("w"), py::arg("type"), py::arg("x"), py::kw_only(),
          py::arg("n_threads") = 1, py::arg("repeats") = 10, py::arg("copies") = 1, py::arg("huge_pages") = true,
          py::arg("packed") = true,
          "Seconds per computation of matmul(w, type, x) over `copies` copies of w, `repeats` times after a "
          "warm-up run (benchmarks); the weights in transparent huge pages where the OS has them, as a "
          "model's streamed weights, unless huge_pages is False, and packed where a model's would be unless "
          "packed is False.");
    m.def(
        "get_matmul_path", []() { return std::string(matmul_path() == MatmulPath::ggml ? "ggml" : "native"); },
        "The kernels graphs are built with: 'native' (the quantized matmul where it applies) or 'ggml'.");
    m.def(
        "set_matmul_path",
        [](const std::string & name) {
            if (name != "native" && name != "ggml") {
                throw Error(format("unknown matmul path '%s' (native or ggml)", name.c_str()));
            }
            set_matmul_path(name == "ggml" ? MatmulPath::ggml : MatmulPath::native);
        },
        py::arg("name"),
        "Testing and benchmarking: build every later graph (every model of this process) with ggml's mul_mat "
        "('ggml') or with the quantized matmul where it applies ('native', the default).");
    m.def("snake_beta", &run_snake_beta, py::arg("x"), py::arg("exp_alpha"), py::arg("inv_beta"),
          py::arg("left") = py::none(), py::kw_only(), py::arg("n_threads") = 1,
          "[left; x + inv_beta * sin^2(x * exp_alpha)] for x [n, C].");
    m.def("elu_left", &run_elu_left, py::arg("x"), py::arg("left") = py::none(), py::arg("pad") = 0, py::kw_only(),
          py::arg("n_threads") = 1, "[left; ELU(x); pad rows of zeros] for x [n, C].");
    m.def("attend", &run_attend, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("k_cache"), py::arg("v_cache"),
          py::kw_only(), py::arg("n_past"), py::arg("lanes") = 1, py::arg("lane_stride") = 0, py::arg("n_threads") = 1,
          "Cached attention (the talker's and predictor's fused op): writes k, v [n * lanes, n_head_kv, hd] "
          "into each lane's window of k_cache, v_cache [n_ctx, n_head_kv, hd] after its n_past positions, "
          "and attends q [n * lanes, n_head, hd] causally over the window. Returns (out [n * lanes, "
          "n_head * hd], k_cache, v_cache).");
    m.def("mul_mat_exact", &run_mul_mat_exact, py::arg("a"), py::arg("b"), py::kw_only(),
          py::arg("every_width") = false,
          "a [H, M, K] times b [H, N, K] per h, through the exact precision's padded product (every "
          "product under 17 columns padded with every_width, as on Vulkan): [H, N, M].");
    m.def("time_stats", &run_time_stats, py::arg("x"), py::arg("logits") = py::none(), py::kw_only(),
          py::arg("n_threads") = 1, "[mean; std] over time of x [T, C], uniform or softmax(logits) weighted.");
}
