// The code predictor: cb1..cb15 of one frame from the talker's normed hidden state and cb0, a
// small Qwen3 transformer with a fresh KV cache per frame (docs/model.md, "Code predictor").
#pragma once

#include <exception>
#include <random>
#include <vector>

#include "runtime/sampling.h"
#include "runtime/transformer.h"

namespace qtts {

class GgufFile;
struct Talker;

struct CodePredictor {
    Transformer tfm;  // QWEN3, hp.n_embd = Dc
    int vocab = 0;
    ggml_tensor * output_norm = nullptr;   // [Dc]
    ggml_tensor * mtp_proj = nullptr;      // [D, Dc]; null (identity) when Dc = D
    ggml_tensor * mtp_proj_b = nullptr;    // [Dc]
    std::vector<ggml_tensor *> codec_embd; // per group 1..: [D, vocab]
    std::vector<ggml_tensor *> lm_head;    // per group 1..: [Dc, vocab]
};

void load_code_predictor(GgufFile & f, const Talker & t, CodePredictor & c);

inline constexpr const char * kPredHidden = "pred.inp_hidden";  // F32 [D_talker, lanes] (prefill)
inline constexpr const char * kPredCode = "pred.inp_code";      // I32 [lanes]: cb0 (prefill) or cb_j (step j)
inline constexpr const char * kPredPos = "pred.inp_pos";        // I32 [n]
inline constexpr const char * kPredLogits = "pred.logits";      // output [vocab]

// Step 0 is the 2-position prefill [h, C(cb0)] giving cb1; step j = 1..14 feeds CPE_{j-1}(cb_j)
// at position 1 + j and gives cb_{j+1} through lm_head[j].
ggml_tensor * build_predictor_step(ggml_context * ctx, ggml_cgraph * gf, const CodePredictor & c, const Talker & t,
                                   const KvCache & cache, int step);

// What a step after the prefill reads besides its code off the fused path: the rows its key and
// value go to and its mask (runtime/transformer.h, KvStepInputs), to be set as
// set_kv_step_inputs(gf, ..., "pred") in a step graph, "pred.<step>" in the frame graph.
KvStepInputs predictor_rows(const CodePredictor & c, const KvCache & cache, int step, int64_t lanes = 1,
                            int64_t lane_stride = 0);

// The same step for `lanes` frames in lockstep (runtime/batch.cpp): kPredCode, kPredHidden and the
// logits have one column per lane; lane b's cache positions start at b * lane_stride.
ggml_tensor * build_predictor_step_batch(ggml_context * ctx, ggml_cgraph * gf, const CodePredictor & c,
                                         const Talker & t, const KvCache & cache, int step, int64_t lanes,
                                         int64_t lane_stride);

// What the sampling op inside build_predictor_frame reads: per lane, the subtalker's settings and
// the generation's RNG, set before each compute. An exception select_token raised is kept here (the
// op answers code 0 so that the graph finishes) and rethrown by the caller after the compute.
struct FrameSampler {
    std::vector<const SamplingParams *> params;
    std::vector<std::mt19937_64 *> rng;
    std::vector<float> logits;
    std::exception_ptr error;
};

// The tensors of a frame graph the session fills and reads.
struct FrameGraphIo {
    ggml_tensor * hidden = nullptr;      // kPredHidden [D, lanes]
    ggml_tensor * code0 = nullptr;       // kPredCode [lanes]: cb0
    std::vector<ggml_tensor *> pos;      // per step and lane: [0, 1] for step 0, [step + 1] after
    std::vector<ggml_tensor *> codes;    // outputs, I32 [lanes]: cb1..
    ggml_tensor * uniform = nullptr;     // sampling on the device: F32 [(groups - 1) * lanes], step-major
};

// Whether sample_on_device can follow `p` (top-p is left to the host: see below).
bool device_samples(const SamplingParams & p);

// select_token's choice built from stock ops, so that a frame's steps run on any device without
// a host round trip (docs/kernels.md, "Sampling on the device"): argmax when greedy; otherwise
// logits / temperature, the top-k threshold (ties with the k-th score kept), softmax, and the
// first token whose cumulative probability, in token order, exceeds u * total, where u is the
// host RNG's draw for the step (the same 53-bit draw select_token makes). The sums are float, not
// double, so a draw within rounding of a boundary can pick its neighbour. Logits [vocab, lanes]
// and u [lanes] (one draw per lane) give I32 [lanes], each lane sampled on its own.
ggml_tensor * sample_on_device(ggml_context * ctx, ggml_tensor * logits, const SamplingParams & p, ggml_tensor * u);

// cb1..cb_{groups-1} of one frame as one graph: the steps of build_predictor_step in order, each
// step's logits sampled by a single-threaded custom op calling select_token per lane (the same
// host function, the same RNG stream as the step-by-step loop), whose I32 output the next step's
// embedding lookup reads; or, with `device` set (any backend), by sample_on_device with those
// settings. The graph's shapes do not depend on the frame: it is built once and replayed
// (docs/architecture.md, "Graph replay"). With `lanes` > 1 it steps that many frames in lockstep
// as build_predictor_step_batch does, lane b's cache positions from b * lane_stride: every tensor
// of `io` gets one column (or value) per lane, the draws step-major.
ggml_tensor * build_predictor_frame(ggml_context * ctx, ggml_cgraph * gf, const CodePredictor & c, const Talker & t,
                                    const KvCache & cache, FrameSampler * sampler, FrameGraphIo & io,
                                    const SamplingParams * device = nullptr, int64_t lanes = 1,
                                    int64_t lane_stride = 0);

}  // namespace qtts
