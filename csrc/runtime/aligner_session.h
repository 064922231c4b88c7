// What running an AlignerModel changes: the backends, the CPU threadpool, the scheduler and its
// compute buffers, and the decoder's KV cache. One session runs one graph at a time; several may
// share a model.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "runtime/aligner_model.h"
#include "runtime/graph.h"
#include "runtime/transformer.h"

namespace qtts {

// Decoder positions per graph: the attention scores of a chunk are [n_past + chunk, chunk,
// heads], linear in the prompt rather than quadratic (as the talker's prefill).
inline constexpr int kAlignerChunk = 256;
// A prompt longer than this (about 40 s of audio and its words) gives the KV cache and the compute
// buffers back when its alignment ends; shorter ones keep them for the next call.
inline constexpr int64_t kAlignerSteady = 1024;

class AlignerSession {
public:
    AlignerSession(std::shared_ptr<const AlignerModel> model, int n_threads);
    ~AlignerSession();
    AlignerSession(const AlignerSession &) = delete;
    AlignerSession & operator=(const AlignerSession &) = delete;

    const AlignerModel & model() const { return *model_; }
    int n_threads() const { return n_threads_; }

    // The audio encoder's output [tokens, width] row-major of a log-mel [n_mels, n_frames].
    // stages, got: named intermediates too (encode_audio, nets/aligner.h).
    std::vector<float> encode(const std::vector<float> & mel, int64_t n_frames,
                              const std::vector<std::string> & stages = {},
                              std::vector<std::vector<float>> * got = nullptr);
    // The timestamp logits [slots, classes] row-major of a prompt: its token ids, the
    // audio_pad_id positions (one run) taking the rows of `audio` [n_audio, width] in order;
    // the slots are the positions of timestamp_id, in order.
    std::vector<float> timestamp_logits(const std::vector<int32_t> & ids, const std::vector<float> & audio,
                                        int64_t n_audio);

    // Per-op time accounting (as Session's, docs/architecture.md "Graph replay and the generation
    // profile"): while on, graphs run node by node and each node's ms is added to
    // "<encoder|decoder>/<op>", the products named by their weight's kind (the convs', the
    // layers'); off clears nothing, set_profiling(true) starts afresh.
    void set_profiling(bool on);
    std::map<std::string, double> profile() const { return profile_; }
    // The op census of the graphs run while it is on (OpCensus, runtime/graph.h).
    void set_op_census(bool on) { census_.set(on); }
    std::map<std::string, int64_t> op_census() const { return census_.counts(); }

    // Bytes held now: the decoder's KV cache, the scheduler's compute buffers.
    std::map<std::string, size_t> memory() const;
    // Free the compute buffers and the KV cache; later graphs allocate what they need.
    void release_buffers();

private:
    ggml_cgraph * run(const GraphBuild & build, const GraphInputs & inputs);
    CodecRunner runner();
    void make_sched();

    std::shared_ptr<const AlignerModel> model_;
    int n_threads_ = 1;
    ggml_backend_t backend_ = nullptr;  // on the model's device
    ggml_backend_t cpu_ = nullptr;      // fallback for ops the device lacks (backend_ on the CPU)
    ggml_threadpool_t threadpool_ = nullptr;
    ggml_backend_sched_t sched_ = nullptr;
    ggml_context * graph_ctx_ = nullptr;
    std::vector<uint8_t> graph_meta_;
    KvCache cache_;
    bool profiling_ = false;
    const char * phase_ = "encoder";
    std::map<std::string, double> profile_;
    std::chrono::steady_clock::time_point node_t0_;
    static bool profile_node(ggml_tensor * t, bool ask, void * self);
    OpCensus census_;
};

}  // namespace qtts
