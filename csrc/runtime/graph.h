// Shared graph-building helpers: every intermediate gets a name so stages can be dumped; inputs
// are filled by name once the scheduler allocated the graph; carried state lives in a
// StateBuffer between graphs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "ops/stock.h"

namespace qtts {

// Name a tensor printf-style and return it (ggml keeps at most GGML_MAX_NAME-1 characters).
ggml_tensor * named(ggml_tensor * t, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// A graph input named `name`, filled after allocation with set_input.
ggml_tensor * input(ggml_tensor * t, const char * name);

// W x for a weight matrix W [in, out] (any stored type) and activations x [in, n]: the one
// place a network multiplies by its weights. Host weights of the types the quantized matmul
// takes (ops/qmatmul.h) go to it on the native path, everything else to ggml_mul_mat.
ggml_tensor * matmul(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x);

// Which kernels matmul() builds graphs with: native (the default) or ggml's mul_mat always, a
// testing and benchmarking switch for the whole process, read when a graph is built.
enum class MatmulPath { native, ggml };
MatmulPath matmul_path();
void set_matmul_path(MatmulPath path);

// y = W x (+ b); W in ggml order [in, out], x [in, n].
ggml_tensor * linear(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, ggml_tensor * b = nullptr);

// An operand of ggml_get_rows: `t` itself where it starts on a 256-byte boundary of its tensor,
// else a copy. ggml-vulkan's get_rows takes its operands only where they start on the device's
// storage-buffer alignment (up to 256 bytes; it asserts otherwise), where its other kernels take
// any offset (docs/gpu.md, "Views at an offset").
ggml_tensor * rows_operand(ggml_context * ctx, ggml_tensor * t);
// Row `row` of the index matrix `ids` [n, rows] (I32) as the indices of ggml_get_rows: row 0
// itself, every other row a copy (a few integers), whatever n is, so that a graph indexed by
// the rows of an [n, rows] input has the same nodes at every n (a batched step's graph is the
// same at 1 and 64 slots, tests/qtts/runtime/scheduling/test_batch.py) and is a rows_operand
// on any device.
ggml_tensor * index_row(ggml_context * ctx, ggml_tensor * ids, int64_t row);

// Rows t..t+width/C-1 of x for every t < rows, rows `step` bytes apart (x's row stride when 0),
// as one [width, rows] matrix without copying: consecutive rows overlap. ggml_view_2d rejects
// views larger than dense, so this patches a 1-D view (the CPU mul_mat and conv-GEMM read src1
// rows through nb[1]).
ggml_tensor * overlapping_rows(ggml_context * ctx, ggml_tensor * x, int64_t width, int64_t rows, size_t step = 0);

// The parts ([C, n_i] each) one after the other along ne1, concatenated in pairs: each row is
// copied about log2(count) times, not count/2.
ggml_tensor * concat_rows(ggml_context * ctx, std::vector<ggml_tensor *> parts);

// Once the graph has read `left` ([C, p], a conv's carried left context), it receives the last p
// rows of xp for the next graph.
void keep(ggml_context * ctx, ggml_cgraph * gf, ggml_tensor * xp, ggml_tensor * left);

// Whether a backend computes `t` (a kernel launch on a GPU, a thread barrier on the CPU): views
// and reshapes compute nothing.
bool computes(const ggml_tensor * t);
// A node's op as the session's profile names it: ggml's name, the unary op's, MUL_MAT for a
// product by a weight and MUL_MAT_ACT by an activation (a KV cache, attention scores), and
// custom ops by what they do (QMATMUL: quantized weights in; SAMPLE: an I32 code out; CUSTOM).
const char * op_name(const ggml_tensor * t);

// The op census, for checking a backend's support op by op (docs/gpu.md, "Metal, op by op"):
// while on, each computed node of the graphs run counts under its signature, "OP type <- src0,
// src1, ...", each source its type, then "@N" when it is a view at a non-zero offset (N: the
// largest power of two up to 256 that divides the offset in bytes), "/rows" when only its rows
// are contiguous, "/strided" when not even those. A session observes its graphs node by node
// (ggml_backend_sched_set_eval_callback) while it is on.
class OpCensus {
public:
    void set(bool on) {
        counts_.clear();
        on_ = on;
    }
    bool on() const { return on_; }
    void count(const ggml_tensor * t);
    const std::map<std::string, int64_t> & counts() const { return counts_; }
    // A ggml_backend_sched_eval_callback over an OpCensus: observes (and counts) every node.
    static bool observe(ggml_tensor * t, bool ask, void * census);

private:
    bool on_ = false;
    std::map<std::string, int64_t> counts_;
};

// Allocate the graph's inputs on `device` (a scheduler's first backend) instead of the CPU,
// where the scheduler puts every input by default: each input a device graph reads from the
// host is one of a split's inputs, and past 30 of them (GGML_SCHED_MAX_SPLIT_INPUTS) the
// scheduler starts a new split on the same device, as the code predictor's frame graph with its
// per-step positions, KV rows and masks did (docs/gpu.md, "Inputs on the device"). An input
// some op the device lacks reads stays on the CPU. Call after ggml_backend_sched_reset, before
// ggml_backend_sched_alloc_graph; set_input then writes into device memory.
void place_inputs(ggml_backend_sched_t sched, ggml_cgraph * gf, ggml_backend_t device);

// Copy `bytes` into the graph input `name`; an Error when the graph has no such input or its
// size differs (a graph and its caller out of step).
void set_input(ggml_cgraph * gf, const char * name, const void * data, size_t bytes);
template <typename T> void set_input(ggml_cgraph * gf, const char * name, const std::vector<T> & v) {
    set_input(gf, name, v.data(), v.size() * sizeof(T));
}

// An F32 graph tensor (an output or an input) copied to the host.
std::vector<float> read_tensor(ggml_cgraph * gf, const char * name);
// The graph's last node, the one Session::run marked as its output.
std::vector<float> read_output(ggml_cgraph * gf);

// The tensors a network carries from one graph to the next (a KV cache, a codec's conv context):
// their ggml context and the backend buffer that holds them.
class StateBuffer {
public:
    StateBuffer() = default;
    ~StateBuffer() { release(); }
    StateBuffer(const StateBuffer &) = delete;
    StateBuffer & operator=(const StateBuffer &) = delete;

    // Free what is held and start a context for up to n_tensors tensors (created by the caller).
    ggml_context * begin(size_t n_tensors);
    // Allocate every tensor of the context on `backend` (contents undefined until clear()); an
    // EngineError naming `what` when the buffer cannot be had.
    void allocate(ggml_backend_t backend, const char * what);
    // Zero the buffer.
    void clear();
    void release();
    bool allocated() const { return buf_ != nullptr; }
    size_t bytes() const { return buf_ ? ggml_backend_buffer_get_size(buf_) : 0; }

private:
    ggml_context * ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
};

}  // namespace qtts
