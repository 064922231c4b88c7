#include "runtime/graph.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include "ops/qmatmul.h"
#include "runtime/error.h"

namespace qtts {

ggml_tensor * named(ggml_tensor * t, const char * fmt, ...) {
    char buf[GGML_MAX_NAME];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return ggml_set_name(t, buf);
}

ggml_tensor * input(ggml_tensor * t, const char * name) {
    ggml_set_input(t);
    return ggml_set_name(t, name);
}

namespace {

std::atomic<MatmulPath> & current_matmul_path() {
    static std::atomic<MatmulPath> path{MatmulPath::native};
    return path;
}

}  // namespace

MatmulPath matmul_path() { return current_matmul_path().load(std::memory_order_relaxed); }

void set_matmul_path(MatmulPath path) { current_matmul_path().store(path, std::memory_order_relaxed); }

ggml_tensor * matmul(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x) {
    if (qmatmul_packed(w)) return qmatmul(ctx, w, x);  // only it reads packed weights
    // the quantized matmul reads host memory only; shapes it does not take (batched 3-D
    // activations, strided columns) stay with ggml
    if (matmul_path() == MatmulPath::native && qmatmul_vectorized(w->type) && w->buffer &&
        ggml_backend_buffer_is_host(w->buffer) && ggml_is_contiguous(w) && x->type == GGML_TYPE_F32 && x->ne[2] == 1 &&
        x->ne[3] == 1 && x->nb[0] == sizeof(float) && x->ne[0] == w->ne[0] && w->ne[0] % ggml_blck_size(w->type) == 0) {
        return qmatmul(ctx, w, x);
    }
    return mul_mat(ctx, w, x);
}

ggml_tensor * linear(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, ggml_tensor * b) {
    ggml_tensor * y = matmul(ctx, w, x);
    return b ? ggml_add(ctx, y, b) : y;
}

ggml_tensor * overlapping_rows(ggml_context * ctx, ggml_tensor * x, int64_t width, int64_t rows, size_t step) {
    if (step == 0) step = x->nb[1];
    ggml_tensor * v = ggml_view_1d(ctx, x, width, 0);
    v->ne[1] = rows;
    v->nb[1] = step;
    v->nb[2] = v->nb[3] = step * rows;
    return v;
}

ggml_tensor * concat_rows(ggml_context * ctx, std::vector<ggml_tensor *> parts) {
    while (parts.size() > 1) {
        std::vector<ggml_tensor *> next;
        for (size_t i = 0; i + 1 < parts.size(); i += 2) next.push_back(ggml_concat(ctx, parts[i], parts[i + 1], 1));
        if (parts.size() % 2) next.push_back(parts.back());
        parts = std::move(next);
    }
    return parts[0];
}

void keep(ggml_context * ctx, ggml_cgraph * gf, ggml_tensor * xp, ggml_tensor * left) {
    const int64_t p = left->ne[1];
    ggml_tensor * tail = ggml_view_2d(ctx, xp, xp->ne[0], p, xp->nb[1], (xp->ne[1] - p) * xp->nb[1]);
    ggml_build_forward_expand(gf, ggml_cpy(ctx, tail, left));
}

ggml_tensor * rows_operand(ggml_context * ctx, ggml_tensor * t) {
    return t->view_offs % 256 == 0 ? t : ggml_cont(ctx, t);
}

ggml_tensor * index_row(ggml_context * ctx, ggml_tensor * ids, int64_t row) {
    ggml_tensor * r = ggml_view_1d(ctx, ids, ids->ne[0], row * ids->nb[1]);
    return row == 0 ? r : ggml_cont(ctx, r);
}

bool computes(const ggml_tensor * t) {
    switch (t->op) {
        case GGML_OP_NONE:
        case GGML_OP_VIEW:
        case GGML_OP_RESHAPE:
        case GGML_OP_PERMUTE:
        case GGML_OP_TRANSPOSE: return false;
        default: return true;
    }
}

const char * op_name(const ggml_tensor * t) {
    if (t->op == GGML_OP_UNARY) return ggml_unary_op_name(ggml_get_unary_op(t));
    if (t->op == GGML_OP_MUL_MAT) {
        const ggml_tensor * a = t->src[0]->view_src ? t->src[0]->view_src : t->src[0];
        const bool weight = a->buffer && ggml_backend_buffer_get_usage(a->buffer) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
        return weight ? "MUL_MAT" : "MUL_MAT_ACT";
    }
    if (t->op != GGML_OP_CUSTOM) return ggml_op_name(t->op);
    if (t->src[0] && qmatmul_supports(t->src[0]->type)) return "QMATMUL";
    return t->type == GGML_TYPE_I32 ? "SAMPLE" : "CUSTOM";
}

void OpCensus::count(const ggml_tensor * t) {
    if (!on_ || !computes(t)) return;
    std::string sig = t->op == GGML_OP_UNARY    ? ggml_unary_op_name(ggml_get_unary_op(t))
                      : t->op == GGML_OP_GLU    ? ggml_glu_op_name(ggml_get_glu_op(t))
                      : t->op == GGML_OP_CUSTOM ? op_name(t)
                                                : ggml_op_name(t->op);
    sig += std::string(" ") + ggml_type_name(t->type) + " <-";
    for (int i = 0; i < GGML_MAX_SRC && t->src[i]; ++i) {
        const ggml_tensor * a = t->src[i];
        sig += std::string(i ? ", " : " ") + ggml_type_name(a->type);
        if (a->view_offs) {  // the offset's alignment: the largest power of two (to 256) dividing it
            size_t align = 1;
            while (align < 256 && a->view_offs % (2 * align) == 0) align *= 2;
            sig += "@" + std::to_string(align);
        }
        if (!ggml_is_contiguous(a)) sig += ggml_is_contiguous_rows(a) ? "/rows" : "/strided";
    }
    ++counts_[sig];
}

bool OpCensus::observe(ggml_tensor * t, bool ask, void * census) {
    if (!ask) static_cast<OpCensus *>(census)->count(t);
    return true;  // observe every node: the scheduler then computes them one at a time
}

void place_inputs(ggml_backend_sched_t sched, ggml_cgraph * gf, ggml_backend_t device) {
    std::unordered_map<ggml_tensor *, bool> on_device;  // input -> every op reading it runs there
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * node = ggml_graph_node(gf, i);
        if (!computes(node)) continue;  // views read nothing; the ops reading them do
        const bool here = ggml_backend_supports_op(device, node);
        for (int j = 0; j < GGML_MAX_SRC && node->src[j]; ++j) {
            ggml_tensor * src = node->src[j]->view_src ? node->src[j]->view_src : node->src[j];
            if (!(src->flags & GGML_TENSOR_FLAG_INPUT)) continue;
            auto it = on_device.emplace(src, here).first;
            it->second = it->second && here;
        }
    }
    for (const auto & [t, here] : on_device) {
        if (here) ggml_backend_sched_set_tensor_backend(sched, t, device);
    }
}

void set_input(ggml_cgraph * gf, const char * name, const void * data, size_t bytes) {
    ggml_tensor * t = ggml_graph_get_tensor(gf, name);
    if (!t || ggml_nbytes(t) != bytes) fail("graph input '%s' is missing or has the wrong size", name);
    ggml_backend_tensor_set(t, data, 0, bytes);
}

static std::vector<float> to_host(const ggml_tensor * t) {
    std::vector<float> out(static_cast<size_t>(ggml_nelements(t)));
    ggml_backend_tensor_get(t, out.data(), 0, ggml_nbytes(t));
    return out;
}

std::vector<float> read_tensor(ggml_cgraph * gf, const char * name) {
    const ggml_tensor * t = ggml_graph_get_tensor(gf, name);
    if (!t) fail("graph has no tensor named '%s'", name);
    return to_host(t);
}

std::vector<float> read_output(ggml_cgraph * gf) { return to_host(ggml_graph_node(gf, -1)); }

ggml_context * StateBuffer::begin(size_t n_tensors) {
    release();
    GgmlErrorCapture log;
    ggml_init_params ip = {ggml_tensor_overhead() * n_tensors, nullptr, /*no_alloc=*/true};
    ctx_ = ggml_init(ip);
    if (!ctx_) engine_fail(log, "could not create a ggml context for %zu state tensors", n_tensors);
    return ctx_;
}

void StateBuffer::allocate(ggml_backend_t backend, const char * what) {
    GgmlErrorCapture log;
    buf_ = ggml_backend_alloc_ctx_tensors(ctx_, backend);
    if (!buf_) {
        release();
        engine_fail(log, "could not allocate %s", what);
    }
}

void StateBuffer::clear() { ggml_backend_buffer_clear(buf_, 0); }

void StateBuffer::release() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
    buf_ = nullptr;
    ctx_ = nullptr;
}

}  // namespace qtts
