// One op case: a one-node ggml graph on the CPU backend, as qtts._core.ops builds it
// (csrc/bindings/ops.cpp), over arrays read from the case's .npy files.
#include <stdexcept>

#include "check.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "ops/attend.h"
#include "ops/conv_gemm.h"
#include "ops/elu_left.h"
#include "ops/qmatmul.h"
#include "ops/snake_beta.h"
#include "ops/time_stats.h"
#include "runtime/graph.h"

namespace qtts::check {

namespace {

class Graph {
public:
    Graph() {
        ggml_init_params ip = {ggml_tensor_overhead() * 32 + ggml_graph_overhead(), nullptr, /*no_alloc=*/true};
        ctx_ = ggml_init(ip);
        cpu_ = ggml_backend_cpu_init();
        if (!ctx_ || !cpu_) throw std::runtime_error("could not initialise the CPU backend");
    }
    ~Graph() {
        if (buf_) ggml_backend_buffer_free(buf_);
        ggml_backend_free(cpu_);
        ggml_free(ctx_);
    }
    Graph(const Graph &) = delete;
    Graph & operator=(const Graph &) = delete;

    ggml_context * ctx() { return ctx_; }

    // A tensor of the array's numpy shape reversed (bytes as [row bytes / type size, rows] for
    // quantized weights), filled at run().
    ggml_tensor * input(const Array & a, ggml_type type = GGML_TYPE_F32) {
        int64_t ne[4] = {1, 1, 1, 1};
        for (size_t i = 0; i < a.shape.size(); ++i) ne[i] = a.shape[a.shape.size() - 1 - i];
        if (type != GGML_TYPE_F32) ne[0] = ne[0] / static_cast<int64_t>(ggml_type_size(type)) * ggml_blck_size(type);
        ggml_tensor * t = ggml_new_tensor_4d(ctx_, type, ne[0], ne[1], ne[2], ne[3]);
        inputs_.push_back({t, &a});
        return t;
    }

    // An I32 vector of the array's values (an int32 .npy).
    ggml_tensor * input_i32(const Array & a) {
        ggml_tensor * t = ggml_new_tensor_1d(ctx_, GGML_TYPE_I32, a.count());
        inputs_.push_back({t, &a});
        return t;
    }

    void spacer(int64_t n) { ggml_new_tensor_1d(ctx_, GGML_TYPE_F32, n); }

    std::vector<float> run(ggml_tensor * out, int n_threads, std::vector<int64_t> & shape) {
        ggml_cgraph * gf = ggml_new_graph(ctx_);
        ggml_build_forward_expand(gf, out);
        buf_ = ggml_backend_alloc_ctx_tensors(ctx_, cpu_);
        if (!buf_) throw std::runtime_error("could not allocate the op's tensors");
        for (const auto & in : inputs_) {
            ggml_backend_tensor_set(in.first, in.second->data.data(), 0, ggml_nbytes(in.first));
        }
        ggml_backend_cpu_set_n_threads(cpu_, n_threads);
        if (ggml_backend_graph_compute(cpu_, gf) != GGML_STATUS_SUCCESS) throw std::runtime_error("compute failed");
        std::vector<float> y(static_cast<size_t>(ggml_nelements(out)));
        ggml_backend_tensor_get(out, y.data(), 0, ggml_nbytes(out));
        shape = {out->ne[1], out->ne[0]};
        return y;
    }

private:
    ggml_context * ctx_ = nullptr;
    ggml_backend_t cpu_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
    std::vector<std::pair<ggml_tensor *, const Array *>> inputs_;
};

ggml_type weight_type(const std::string & name) {
    if (name == "q8_0") return GGML_TYPE_Q8_0;
    if (name == "q4_k") return GGML_TYPE_Q4_K;
    if (name == "q6_k") return GGML_TYPE_Q6_K;
    throw std::runtime_error("unknown weight type " + name);
}

}  // namespace

std::vector<float> run_op(const Line & l, const std::string & dir, std::vector<int64_t> & shape) {
    // every argument naming a file is read up front: `arrays` outlives the graph's inputs
    std::vector<Array> arrays;
    arrays.reserve(l.size());
    auto arg = [&](size_t i) -> const Array * {
        if (l.at(i) == "-") return nullptr;
        arrays.push_back(read_npy(dir + "/" + l[i]));
        return &arrays.back();
    };
    const std::string & op = l.at(0);
    Graph g;
    auto in = [&](const Array * a) { return a ? g.input(*a) : nullptr; };
    if (op == "conv_gemm") {  // id n stride threads xp w bias res
        const int64_t n = std::stoll(l.at(2)), stride = std::stoll(l.at(3));
        const Array *xp = arg(5), *w = arg(6), *b = arg(7), *r = arg(8);
        g.spacer(8);  // weights 32 bytes off a cache line, as the Python runner places them
        ggml_tensor * wt = g.input(*w);
        ggml_tensor * x = g.input(*xp);
        ggml_tensor *bt = in(b), *rt = in(r);
        if (stride > 1) {
            const int64_t cin = w->shape[2], K = w->shape[1];
            x = overlapping_rows(g.ctx(), x, cin * K, n, static_cast<size_t>(stride) * x->nb[1]);
            wt = ggml_reshape_4d(g.ctx(), wt, w->shape[3], cin * K, 1, w->shape[0]);
        }
        return g.run(conv_gemm(g.ctx(), x, wt, n, bt, rt), std::stoi(l.at(4)), shape);
    }
    if (op == "snake_beta") {  // id threads x exp_alpha inv_beta left
        const Array *x = arg(3), *ea = arg(4), *ib = arg(5), *left = arg(6);
        ggml_tensor *xt = in(x), *eat = in(ea), *ibt = in(ib), *lt = in(left);
        return g.run(snake_beta(g.ctx(), xt, eat, ibt, lt), std::stoi(l.at(2)), shape);
    }
    if (op == "elu_left") {  // id threads pad x left
        const Array *x = arg(4), *left = arg(5);
        ggml_tensor *xt = in(x), *lt = in(left);
        return g.run(elu_left(g.ctx(), xt, lt, std::stoll(l.at(3))), std::stoi(l.at(2)), shape);
    }
    if (op == "time_stats") {  // id threads x logits
        const Array *x = arg(3), *logits = arg(4);
        ggml_tensor *xt = in(x), *lt = in(logits);
        return g.run(time_stats(g.ctx(), xt, lt), std::stoi(l.at(2)), shape);
    }
    if (op == "qmatmul") {  // id threads type w x
        const Array *w = arg(4), *x = arg(5);
        ggml_tensor * wt = g.input(*w, weight_type(l.at(3)));
        ggml_tensor * xt = g.input(*x);
        return g.run(qmatmul(g.ctx(), wt, xt), std::stoi(l.at(2)), shape);
    }
    if (op == "attend") {  // id threads n_kv lanes lane_stride q k v k_cache v_cache pos
        const int64_t n_kv = std::stoll(l.at(3)), lanes = std::stoll(l.at(4)), stride = std::stoll(l.at(5));
        const Array *q = arg(6), *k = arg(7), *v = arg(8), *kc = arg(9), *vc = arg(10), *pos = arg(11);
        ggml_tensor *qt = g.input(*q), *kt = g.input(*k), *vt = g.input(*v), *kct = g.input(*kc), *vct = g.input(*vc);
        ggml_tensor * pt = g.input_i32(*pos);
        // the caches [n_ctx, n_head_kv, hd] in numpy order, viewed as the op's [hd, n_kv, n_head_kv, lanes]
        auto window = [&](ggml_tensor * c) {
            return ggml_view_4d(g.ctx(), c, c->ne[0], n_kv, c->ne[1], lanes, c->nb[2], c->nb[1], stride * c->nb[2], 0);
        };
        return g.run(attend_cached(g.ctx(), qt, kt, vt, window(kct), window(vct), pt), std::stoi(l.at(2)), shape);
    }
    throw std::runtime_error("unknown op " + op);
}

}  // namespace qtts::check
