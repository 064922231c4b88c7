// A Session holds everything mutable for running a Model: backends, the CPU threadpool,
// the scheduler and its compute buffers. Several sessions can share one Model.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "nets/code_predictor.h"
#include "runtime/generate.h"
#include "runtime/graph.h"
#include "runtime/model.h"
#include "runtime/transformer.h"

namespace qtts {

// Nodes a graph may have.
inline constexpr size_t kMaxNodes = 8192;
// Prompt positions per talker prefill graph (Session::talker_prefill).
inline constexpr int kPrefillChunk = 256;
// A generation whose context (prompt and frames) went past this many positions gives its KV cache
// and the compute buffers back when it ends; ordinary requests (a sentence-sized piece, a voice
// clone's prompt) stay below it and keep them for the next call.
inline constexpr int kSteadyContext = 2048;

class Session {
public:
    Session(std::shared_ptr<const Model> model, int n_threads);
    ~Session();
    Session(const Session &) = delete;
    Session & operator=(const Session &) = delete;

    const Model & model() const { return *model_; }
    int n_threads() const { return n_threads_; }
    // Threads the next graphs run on, at most n_threads (the pool's size): a pipelined stream
    // generates on fewer while a second session vocodes (docs/serving.md, "Pipelined
    // streaming"). Results do not depend on it.
    int threads() const { return threads_; }
    void set_threads(int n);
    std::string device() const;

    // P(ids): the talker's text embedding followed by the text projection MLP, [n, D] row-major.
    std::vector<float> text_embed(const std::vector<int32_t> & ids);
    // C(ids): rows of the talker's codec embedding, [n, D] row-major.
    std::vector<float> codec_embed(const std::vector<int32_t> & ids);

    // F(frame) = C(code_0) + sum_g CPE_{g-1}(code_g) per frame of codes [n, groups]: how the talker
    // sees a frame of codes (the ICL prompt's reference frames), [n, D] row-major.
    std::vector<float> frame_embed(const std::vector<int32_t> & codes, int64_t n);

    // The generation methods below (and the private talker_step, predict_frame) live in generate.cpp.

    // The talker over a prompt of n embeddings ([n, D] row-major), from an empty cache with
    // room for at least n_ctx positions.
    TalkerOutput talker_prefill(const std::vector<float> & embd, int n, int n_ctx = 0);
    // One talker step after a prefill: the frame's codes (one per group) and text vector fed at
    // position n_past.
    TalkerOutput talker_step(const std::vector<int32_t> & codes, const float * text, int n_past);

    // Stepwise generation for streaming: begin (validates, sizes the cache, prefills), then
    // next(n) runs up to n_frames frames and returns their codes; the returned stop_reason is set
    // once the generation ended, and the timings are totals so far. should_stop is polled once
    // per frame (for Ctrl-C); returning true cancels the generation.
    // text_open: the trailing text is streamed in: generate_next returns early with needs_text
    // where it needs a row not appended yet (or, with a frame budget, the budget's frame), and
    // generate_append adds rows, the grown budget and, with text_final, the end of the text.
    void generate_begin(const std::vector<float> & prompt, int n_prompt, const std::vector<float> & trailing,
                        int n_trailing, const GenerateParams & p, bool text_open = false);
    GenerateResult generate_next(int n_frames, const std::function<bool()> & should_stop);
    void generate_append(const std::vector<float> & rows, int n, bool text_final, int frame_budget);

    // Where the code predictor's steps sample (docs/kernels.md, "Sampling on the device"): in
    // the frame graph on the device (the default off the CPU) or by the host sampler (the CPU's
    // default; top_p < 1 always); settable to check one against the other.
    bool device_sampling() const { return device_sampling_; }
    void set_device_sampling(bool on) { device_sampling_ = on; }

    // Ask a generation in progress (from any thread) to stop after the current frame.
    void cancel() { cancel_.store(true); }

    // Codes for a prompt ([n_prompt, D]) and the text vectors added at each decode step
    // ([n_trailing, D], then PAD).
    GenerateResult generate(const std::vector<float> & prompt, int n_prompt, const std::vector<float> & trailing,
                            int n_trailing, const GenerateParams & p, const std::function<bool()> & should_stop);

    // What the audio nets' runners (free functions, e.g. nets/vocoder.h) run their graphs with:
    // this session's scheduler, buffers and threads, the graphs counted under `phase` when
    // profiling.
    CodecRunner codec_runner(const char * phase);
    // Graphs built for CodecRunner::replay so far: a replayed one is not counted again.
    int64_t codec_replay_builds() const { return codec_replay_builds_; }
    // The vocoder's streams (nets/vocoder.h): state the streaming runner takes, kept here
    // between calls (several requests decode at once when batched, each under its own id).
    VocoderStreams & vocoder_streams() { return vocoder_streams_; }

    // Bytes held now: the talker and predictor KV caches, the scheduler's compute buffers.
    std::map<std::string, size_t> memory() const;
    // Free the compute buffers and the talker's KV cache; later graphs allocate what they need.
    void release_buffers();

    // Prompt positions per prefill graph: a smaller chunk bounds the attention scores tighter.
    int prefill_chunk() const { return prefill_chunk_; }
    void set_prefill_chunk(int n);

    // Per-op time accounting for performance work: while enabled, graphs run node by node (slower
    // overall) and each node's time, in ms, is added to "<phase>/<op>" ("predictor/CUSTOM"), the
    // phase being the part of the work the graph ran for: prefill, talker, predictor, vocoder or
    // other. The plumbing around the compute adds "<phase>/:build" (graph construction),
    // "<phase>/:alloc" (scheduling, allocation, inputs), "<phase>/:compute" (the compute calls,
    // ops included), "<phase>/:graphs" (a count of graph computes) and "<phase>/:nodes" (the
    // nodes those computes ran, views and reshapes left out: kernel launches on a GPU) and
    // "<phase>/:splits" (the parts the scheduler cut those graphs into: more than one per graph
    // means some op ran on another backend, with copies between). ops = false: the plumbing's
    // entries alone, the graphs computed whole as without profiling (what a device's wall-clock
    // split needs: node-by-node runs synchronize after every node).
    void set_profiling(bool on, bool ops = true);
    std::map<std::string, double> profile() const { return profile_; }
    // The op census (OpCensus, runtime/graph.h): while on, graphs run node by node and each
    // computed node counts under its signature.
    void set_op_census(bool on);
    std::map<std::string, int64_t> op_census() const { return census_.counts(); }

    // Names the phase of the graphs run while it lives (profiling keys).
    class Phase {
    public:
        Phase(Session & s, const char * name) : s_(s), prev_(s.phase_) { s.phase_ = name; }
        ~Phase() { s_.phase_ = prev_; }
        Phase(const Phase &) = delete;
        Phase & operator=(const Phase &) = delete;

    private:
        Session & s_;
        const char * prev_;
    };

private:
    friend class Batch;  // runtime/batch.cpp: the batched loop runs its graphs on this session
    void make_sched();
    // Validate a generation's inputs, set up its state, size `cache` to the request and prefill it;
    // first >= 0: the caller sized the cache, and the prompt goes to positions first.. (a batch
    // slot's lane, runtime/batch.cpp).
    void init_generation(GenerationState & g, const std::vector<float> & prompt, int n_prompt,
                         const std::vector<float> & trailing, int n_trailing, const GenerateParams & p, KvCache & cache,
                         int64_t first = -1);
    // Sample the next cb0 and check the stop conditions, as the reference: false once stopped.
    bool next_cb0(GenerationState & g, const std::function<bool()> & cancelled);
    // The text vector fed with the last emitted frame.
    const float * step_text(const GenerationState & g) const;
    TalkerOutput talker_prefill(KvCache & cache, const std::vector<float> & embd, int n, int n_ctx, int64_t first = 0);
    // Frames the talker cache holds for a generation: at most max_new_tokens - 1, and the budget.
    static int max_fed(const GenerateParams & p);
    // Reallocate the talker cache for n_ctx positions, keeping its contents (streamed text's
    // budget grows with the text).
    void grow_talker_cache(int n_ctx);
    // A generation stopped (or was abandoned): give back what an outsized one grew.
    void end_generation(const GenerationState & g);

    static bool profile_node(ggml_tensor * t, bool ask, void * self);
    void profile_add(const char * what, double value);
    std::map<std::string, double> profile_;
    std::chrono::steady_clock::time_point profile_t0_;
    bool profiling_ = false, profile_ops_ = true;
    OpCensus census_;
    const char * phase_ = "other";
    int prefill_chunk_ = kPrefillChunk;

    // Adds the time since the previous lap to "<phase>/<what>" while profiling.
    class ProfileClock {
    public:
        explicit ProfileClock(Session & s) : s_(s), t_(std::chrono::steady_clock::now()) {}
        void lap(const char * what) {
            if (!s_.profiling_) return;
            const auto now = std::chrono::steady_clock::now();
            s_.profile_add(what, std::chrono::duration<double, std::milli>(now - t_).count());
            t_ = now;
        }

    private:
        Session & s_;
        std::chrono::steady_clock::time_point t_;
    };
    // Compute an allocated graph on `sched`; an EngineError when ggml fails.
    void compute(ggml_backend_sched_t sched, ggml_cgraph * gf, ProfileClock & clock);

    // Build a graph with `build`, allocate it, let `set_inputs` fill the inputs, compute.
    ggml_cgraph * run(const std::function<ggml_tensor *(ggml_context *, ggml_cgraph *)> & build,
                      const std::function<void(ggml_cgraph *)> & set_inputs);

    std::vector<float> embed_rows(const std::vector<int32_t> & ids, int vocab, const char * what,
                                  ggml_tensor * (*build)(ggml_context *, const Talker &, int64_t));
    // cb1..cb15 of one frame into codes[1..], given the talker's hidden state and codes[0]: one
    // replayed graph (build_predictor_frame) on the CPU, step graphs elsewhere.
    void predict_frame(const std::vector<float> & hidden, std::vector<int32_t> & codes, const SamplingParams & p,
                       std::mt19937_64 & rng);

    std::shared_ptr<const Model> model_;
    int n_threads_ = 1;
    int threads_ = 1;
    ggml_backend_t backend_ = nullptr;      // on the model's device
    ggml_backend_t cpu_ = nullptr;          // fallback for ops the device lacks (same as backend_ on CPU)
    ggml_threadpool_t threadpool_ = nullptr;
    ggml_backend_sched_t sched_ = nullptr;
    ggml_context * graph_ctx_ = nullptr;
    std::vector<uint8_t> graph_meta_;
    KvCache talker_cache_, pred_cache_;
    // A graph built and allocated once, by a scheduler of its own so that the other graphs in
    // between leave it intact, and computed again with new inputs (generate.cpp); rebuilt when
    // the KV cache it attends is reallocated (KvCache::epoch).
    struct Replay {
        ggml_backend_sched_t sched = nullptr;
        ggml_context * ctx = nullptr;
        ggml_cgraph * gf = nullptr;
        uint64_t cache_epoch = 0;
        bool stale(const KvCache & cache) const { return !gf || cache_epoch != cache.epoch(); }
    };
    // The code predictor's frame (every step, the sampling inside).
    struct FrameGraph : Replay {
        FrameGraphIo io;
        FrameSampler sampler;
        bool on_device = false;         // built with sample_on_device for `params`
        SamplingParams params;
        std::vector<float> uniform;
        bool stale_for(const KvCache & cache, bool device, const SamplingParams & p) const {
            return stale(cache) || on_device != device ||
                   (device && (p.do_sample != params.do_sample || p.temperature != params.temperature ||
                               p.top_k != params.top_k || p.top_p != params.top_p));
        }
    };
    FrameGraph frame_;
    // The talker's decode step over its whole fused cache, the position an input (CPU, native).
    Replay step_;
    // Elsewhere, its step over each masked window of whole buckets (kv_window) in use.
    std::map<int64_t, Replay> window_steps_;
    // The audio nets' replayed graphs (CodecRunner::replay) by key, the most recent last.
    std::vector<std::pair<std::string, Replay>> codec_replays_;
    int64_t codec_replay_builds_ = 0;
    ggml_cgraph * run_replayed(const std::string & key,
                               const std::function<ggml_tensor *(ggml_context *, ggml_cgraph *)> & build,
                               const std::function<void(ggml_cgraph *)> & set_inputs);
    ggml_backend_sched_t new_sched();
    // A graph's inputs on the device for the portable path (place_inputs, runtime/graph.h); the
    // native path's custom CPU ops read theirs from host memory.
    void place_graph_inputs(ggml_backend_sched_t sched, ggml_cgraph * gf) const;
    std::vector<ggml_backend_sched_t> scheds() const;  // the main one and every replay's
    void free_replay(Replay & r);
    void free_replays();
    // (Re)build `r` with `build` for the current epoch of `cache`.
    void build_replay(Replay & r, const KvCache & cache, const char * what,
                      const std::function<void(ggml_context *, ggml_cgraph *)> & build);
    void build_replay(Replay & r, uint64_t epoch, const char * what,
                      const std::function<void(ggml_context *, ggml_cgraph *)> & build);
    void build_frame_graph(bool device, const SamplingParams & p);
    void predict_frame_steps(const std::vector<float> & hidden, std::vector<int32_t> & codes, const SamplingParams & p,
                             std::mt19937_64 & rng);
    bool device_sampling_ = false;
    std::atomic<bool> cancel_{false};
    std::unique_ptr<GenerationState> gen_;
    // The ops the audio networks' graphs are built from (runtime/codec_ops.h), and the backend
    // that holds their carried state: the CPU on the native path, the model's device otherwise.
    CodecOps codec_ops(ggml_context * ctx) const;
    ggml_backend_t codec_backend() const { return model_->ops == OpsPath::portable ? backend_ : cpu_; }
    bool fused_attention() const { return model_->fused_attention; }
    VocoderStreams vocoder_streams_;
};

}  // namespace qtts
