// The two ways the audio networks (vocoder, codec encoder, speaker encoder) run
// (docs/kernels.md, "Portable graphs"): "native", the custom CPU ops of csrc/ops over the
// panel-packed weights in host memory, and "portable", the same graphs made of stock ggml ops
// (ops/stock.h) over weights repacked once at load and placed on the model's device. A net's
// graph builder calls CodecOps for each of those ops and stays one builder for both paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"

namespace qtts {

class GgmlErrorCapture;  // runtime/error.h

enum class OpsPath { native, portable };

// A conv-GEMM panel weight (runtime/loader.h) and the stride it is applied with (1 unless the
// conv is strided; the kernel must then be a multiple of it).
struct PanelConv {
    const ggml_tensor * panel = nullptr;
    int64_t stride = 1;
};

// The portable copies of a model's panel weights: panel [P, Cin, K, N/P] with stride g becomes
// [g*Cin, N, K/g], so that tap j of a stride-g conv over g-row groups is one dense matrix
// (ops/stock.h). Made once at load; the panels themselves are left untouched.
class ConvWeights {
public:
    ConvWeights() = default;
    ~ConvWeights();
    ConvWeights(const ConvWeights &) = delete;
    ConvWeights & operator=(const ConvWeights &) = delete;

    // Repack every conv in one buffer on `dev`; an EngineError when the device refuses it.
    // Called once, as is build_bf16, and only one of the two per object.
    void build(const std::vector<PanelConv> & convs, ggml_backend_dev_t dev);
    // Or the fast precision's BF16 copies (ops/conv_gemm.h, conv_pack_bf16) in host memory, of
    // those convs that have one (stride 1, conv_packs_bf16); `packed` is called with each panel
    // once its copy is made (Model drops the panel's mapped pages then, so that at most one of
    // them is resident at a time).
    void build_bf16(const std::vector<PanelConv> & convs, const std::function<void(const ggml_tensor *)> & packed = {});
    // The copy of a panel weight (an Error for a panel that has none).
    ggml_tensor * get(const ggml_tensor * panel) const;
    // The copy, or null for a panel that has none.
    ggml_tensor * find(const ggml_tensor * panel) const;
    size_t bytes() const { return buf_ ? ggml_backend_buffer_get_size(buf_) : 0; }

private:
    // The context of n copies; an EngineError (with log's lines) naming `what` when ggml has none.
    void begin(const GgmlErrorCapture & log, size_t n, const char * what);

    ggml_context * ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
    std::map<const ggml_tensor *, ggml_tensor *> copies_;
};

// On the native path an audio network's custom ops run on the CPU and read its weights from host
// memory: an EngineError naming `what` when the model's device kept `weight` elsewhere.
void require_host_weights(const ggml_tensor * weight, bool native, const char * what);

// The ops an audio graph is built from, on the path chosen at load.
struct CodecOps {
    ggml_context * ctx;
    const ConvWeights * portable;  // null: the native path
    const ConvWeights * bf16;      // the native path's BF16 copies at the fast precision, or null

    // conv_gemm (ops/conv_gemm.h) over a panel weight (its BF16 copy where bf16 has one); a
    // stride s > 1 reads kernel-k windows every s rows of xp.
    ggml_tensor * conv(ggml_tensor * xp, ggml_tensor * panel, int64_t n, ggml_tensor * b, ggml_tensor * res,
                       int64_t k = 1, int64_t s = 1) const;
    // The native path's segmented conv_gemm (ops/conv_gemm.h): several streams' causal convs in
    // one op, none of the rows across their boundaries computed. The portable path has none (an
    // Error): it convolves the joined rows and drops those (nets/vocoder_run.cpp).
    ggml_tensor * conv_segments(ggml_tensor * xp, ggml_tensor * panel, ggml_tensor * segments, int64_t n,
                                ggml_tensor * b) const;
    ggml_tensor * snake(ggml_tensor * x, ggml_tensor * exp_alpha, ggml_tensor * inv_beta, ggml_tensor * left) const;
    // The weight the native conv_gemm reads for `panel`: its BF16 copy where bf16 has one.
    ggml_tensor * native_weight(ggml_tensor * panel) const;
    ggml_tensor * elu(ggml_tensor * x, ggml_tensor * left, int64_t pad) const;
    ggml_tensor * time_stats(ggml_tensor * x, ggml_tensor * logits) const;
};

// What an audio net's runners (free functions over the net's own state, e.g. nets/vocoder.h)
// need of whoever holds the compute buffers and threads (a Session, Session::codec_runner):
// build, allocate, fill and compute one graph; the ops path; where carried state lives.
using GraphBuild = std::function<ggml_tensor *(ggml_context *, ggml_cgraph *)>;
using GraphInputs = std::function<void(ggml_cgraph *)>;
struct CodecRunner {
    std::function<ggml_cgraph *(const GraphBuild &, const GraphInputs &)> run;
    // As run, but the graph is built and allocated once under `key` and computed again with new
    // inputs whenever the same key comes back (a few keys kept, the least recent dropped), so a
    // device can replay it (docs/architecture.md, "Graph replay"). The key must name everything
    // the graph's topology and tensor addresses depend on.
    std::function<ggml_cgraph *(const std::string & key, const GraphBuild &, const GraphInputs &)> replay;
    const ConvWeights * portable = nullptr;  // null: the native path
    const ConvWeights * bf16 = nullptr;      // CodecOps::bf16
    ggml_backend_t state_backend = nullptr;  // the CPU on the native path, the model's device otherwise
    CodecOps ops(ggml_context * ctx) const { return {ctx, portable, bf16}; }
};

}  // namespace qtts
