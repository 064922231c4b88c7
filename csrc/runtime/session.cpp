#include "runtime/session.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/graph.h"

namespace qtts {

static void set_cpu_threads(ggml_backend_t cpu, int n_threads, ggml_threadpool_t * tp) {
    ggml_backend_cpu_set_n_threads(cpu, n_threads);
    // Without a persistent pool (the wheel has no OpenMP) every graph spawns and joins threads.
    ggml_threadpool_params p = ggml_threadpool_params_default(n_threads);
    GgmlErrorCapture log;
    *tp = ggml_threadpool_new(&p);
    if (!*tp) engine_fail(log, "could not create a threadpool of %d threads", n_threads);
    ggml_backend_cpu_set_threadpool(cpu, *tp);
}

Session::Session(std::shared_ptr<const Model> model, int n_threads)
    : model_(std::move(model)), n_threads_(n_threads), threads_(n_threads) {
    if (n_threads < 1) fail("n_threads must be at least 1, got %d", n_threads);
    GgmlErrorCapture log;
    backend_ = ggml_backend_dev_init(model_->device, nullptr);
    if (!backend_) engine_fail(log, "could not initialise device %s", ggml_backend_dev_name(model_->device));
    if (ggml_backend_is_cpu(backend_)) {
        cpu_ = backend_;
    } else {
        cpu_ = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
        if (!cpu_) engine_fail(log, "could not initialise the CPU backend");
    }
    set_cpu_threads(cpu_, n_threads_, &threadpool_);
    device_sampling_ = backend_ != cpu_;
    make_sched();
    graph_meta_.resize(ggml_tensor_overhead() * kMaxNodes + ggml_graph_overhead_custom(kMaxNodes, false));
}

Session::~Session() {
    free_replays();
    if (graph_ctx_) ggml_free(graph_ctx_);
    if (sched_) ggml_backend_sched_free(sched_);
    if (cpu_ && cpu_ != backend_) ggml_backend_free(cpu_);
    if (backend_) ggml_backend_free(backend_);
    if (threadpool_) ggml_threadpool_free(threadpool_);
}

ggml_backend_sched_t Session::new_sched() {
    std::vector<ggml_backend_t> backends = {backend_};
    if (cpu_ != backend_) backends.push_back(cpu_);
    GgmlErrorCapture log;
    ggml_backend_sched_t s = ggml_backend_sched_new(backends.data(), nullptr, static_cast<int>(backends.size()),
                                                    kMaxNodes, /*parallel=*/false, /*op_offload=*/true);
    if (!s) engine_fail(log, "could not create the backend scheduler");
    return s;
}

void Session::make_sched() { sched_ = new_sched(); }

void Session::place_graph_inputs(ggml_backend_sched_t sched, ggml_cgraph * gf) const {
    if (backend_ != cpu_ && model_->ops == OpsPath::portable) place_inputs(sched, gf, backend_);
}

void Session::free_replay(Replay & r) {
    if (r.ctx) ggml_free(r.ctx);
    if (r.sched) ggml_backend_sched_free(r.sched);
    r.ctx = nullptr;
    r.sched = nullptr;
    r.gf = nullptr;
    r.cache_epoch = 0;
}

void Session::free_replays() {
    free_replay(frame_);
    free_replay(step_);
    for (auto & w : window_steps_) free_replay(w.second);
    window_steps_.clear();
    for (auto & c : codec_replays_) free_replay(c.second);
    codec_replays_.clear();
}

void Session::build_replay(Replay & r, const KvCache & cache, const char * what,
                           const std::function<void(ggml_context *, ggml_cgraph *)> & build) {
    build_replay(r, cache.epoch(), what, build);
}

void Session::build_replay(Replay & r, uint64_t epoch, const char * what,
                           const std::function<void(ggml_context *, ggml_cgraph *)> & build) {
    free_replay(r);
    const size_t nodes = kMaxNodes;
    ggml_init_params ip = {ggml_tensor_overhead() * nodes + ggml_graph_overhead_custom(nodes, false), nullptr,
                           /*no_alloc=*/true};
    GgmlErrorCapture log;
    r.ctx = ggml_init(ip);
    if (!r.ctx) engine_fail(log, "could not create the %s graph context", what);
    r.gf = ggml_new_graph_custom(r.ctx, static_cast<int>(nodes), false);
    build(r.ctx, r.gf);
    r.sched = new_sched();
    place_graph_inputs(r.sched, r.gf);
    if (!ggml_backend_sched_alloc_graph(r.sched, r.gf)) {
        free_replay(r);
        engine_fail(log, "could not allocate the %s graph", what);
    }
    r.cache_epoch = epoch;
}

// The scheduler's buffers only ever grow to the largest graph seen: recreating it is the way
// to hand them back.
void Session::release_buffers() {
    talker_cache_.release();
    free_replays();
    if (graph_ctx_) ggml_free(graph_ctx_);
    graph_ctx_ = nullptr;
    ggml_backend_sched_free(sched_);
    sched_ = nullptr;
    make_sched();
}

// The pool keeps n_threads_ workers; ggml wakes only the first `n` for each graph and the rest
// sleep without polling, so the cores they leave are free for another session.
void Session::set_threads(int n) {
    if (n < 1 || n > n_threads_) fail("threads must be between 1 and the session's %d, got %d", n_threads_, n);
    ggml_backend_cpu_set_n_threads(cpu_, n);
    threads_ = n;
}

void Session::set_prefill_chunk(int n) {
    if (n < 1) fail("prefill_chunk must be at least 1, got %d", n);
    prefill_chunk_ = n;
}

std::vector<ggml_backend_sched_t> Session::scheds() const {
    std::vector<ggml_backend_sched_t> all = {sched_, frame_.sched, step_.sched};
    for (const auto & w : window_steps_) all.push_back(w.second.sched);
    for (const auto & c : codec_replays_) all.push_back(c.second.sched);
    return all;
}

std::map<std::string, size_t> Session::memory() const {
    size_t compute = 0;
    for (ggml_backend_sched_t s : scheds()) {
        if (!s) continue;
        compute += ggml_backend_sched_get_buffer_size(s, backend_);
        if (cpu_ != backend_) compute += ggml_backend_sched_get_buffer_size(s, cpu_);
    }
    return {{"kv_cache", talker_cache_.bytes() + pred_cache_.bytes()}, {"compute_buffers", compute}};
}

void Session::set_profiling(bool on, bool ops) {
    profile_.clear();
    profiling_ = on;
    profile_ops_ = ops;
}

void Session::set_op_census(bool on) { census_.set(on); }

void Session::profile_add(const char * what, double value) { profile_[std::string(phase_) + "/" + what] += value; }

bool Session::profile_node(ggml_tensor * t, bool ask, void * self) {
    auto * s = static_cast<Session *>(self);
    const auto now = std::chrono::steady_clock::now();
    if (ask) {
        s->profile_t0_ = now;
        return true;  // observe every node: the scheduler then computes them one at a time
    }
    s->census_.count(t);
    if (s->profiling_ && s->profile_ops_) {
        s->profile_add(op_name(t), std::chrono::duration<double, std::milli>(now - s->profile_t0_).count());
    }
    return true;
}

static int computed_nodes(ggml_cgraph * gf) {
    int n = 0;
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) n += computes(ggml_graph_node(gf, i));
    return n;
}

void Session::compute(ggml_backend_sched_t sched, ggml_cgraph * gf, ProfileClock & clock) {
    GgmlErrorCapture log;
    // the switch as it is now, also for a scheduler made before it changed (a batch's replays)
    const bool observe = (profiling_ && profile_ops_) || census_.on();
    ggml_backend_sched_set_eval_callback(sched, observe ? &Session::profile_node : nullptr, this);
    const ggml_status status = ggml_backend_sched_graph_compute(sched, gf);
    if (status != GGML_STATUS_SUCCESS) engine_fail(log, "graph compute failed: %s", ggml_status_to_string(status));
    clock.lap(":compute");
    if (profiling_) {
        profile_add(":graphs", 1.0);
        profile_add(":nodes", computed_nodes(gf));
        profile_add(":splits", ggml_backend_sched_get_n_splits(sched));
    }
}

CodecRunner Session::codec_runner(const char * phase) {
    CodecRunner r;
    r.run = [this, phase](const GraphBuild & build, const GraphInputs & inputs) {
        const Phase p(*this, phase);
        return run(build, inputs);
    };
    // On the portable path only (what a GPU runs, where a graph built per push is a CUDA-graph
    // capture lost): on the CPU's native path a push's graph costs little to build, and each kept
    // graph would hold a compute buffer of its own (docs/serving.md, "Batched vocoder").
    if (model_->ops == OpsPath::portable) {
        r.replay = [this, phase](const std::string & key, const GraphBuild & build, const GraphInputs & inputs) {
            const Phase p(*this, phase);
            return run_replayed(key, build, inputs);
        };
    }
    r.portable = model_->ops == OpsPath::portable ? &model_->conv_weights : nullptr;
    r.bf16 = &model_->bf16_convs;
    r.state_backend = codec_backend();
    return r;
}

// Each kept graph holds its own compute buffer: a few suffice for a stream's chunk sizes.
constexpr size_t kCodecReplays = 8;

ggml_cgraph * Session::run_replayed(const std::string & key,
                                    const std::function<ggml_tensor *(ggml_context *, ggml_cgraph *)> & build,
                                    const std::function<void(ggml_cgraph *)> & set_inputs) {
    ProfileClock clock(*this);
    auto it =
        std::find_if(codec_replays_.begin(), codec_replays_.end(), [&](const auto & c) { return c.first == key; });
    if (it != codec_replays_.end()) {
        std::rotate(it, it + 1, codec_replays_.end());  // the most recent last
    } else {
        if (codec_replays_.size() >= kCodecReplays) {
            free_replay(codec_replays_.front().second);
            codec_replays_.erase(codec_replays_.begin());
        }
        codec_replays_.emplace_back(key, Replay{});
        try {
            build_replay(codec_replays_.back().second, 1, "audio network's", [&](ggml_context * ctx, ggml_cgraph * gf) {
                ggml_tensor * out = build(ctx, gf);
                ggml_set_output(out);
                ggml_build_forward_expand(gf, out);
            });
        } catch (...) {
            codec_replays_.pop_back();
            throw;
        }
        ++codec_replay_builds_;
        clock.lap(":build");
    }
    Replay & r = codec_replays_.back().second;
    set_inputs(r.gf);
    clock.lap(":alloc");
    compute(r.sched, r.gf, clock);
    return r.gf;
}

CodecOps Session::codec_ops(ggml_context * ctx) const {
    return {ctx, model_->ops == OpsPath::portable ? &model_->conv_weights : nullptr};
}

std::string Session::device() const { return ggml_backend_dev_name(model_->device); }

ggml_cgraph * Session::run(const std::function<ggml_tensor *(ggml_context *, ggml_cgraph *)> & build,
                           const std::function<void(ggml_cgraph *)> & set_inputs) {
    ProfileClock clock(*this);
    if (graph_ctx_) ggml_free(graph_ctx_);
    ggml_init_params ip = {graph_meta_.size(), graph_meta_.data(), /*no_alloc=*/true};
    graph_ctx_ = ggml_init(ip);
    ggml_cgraph * gf = ggml_new_graph_custom(graph_ctx_, kMaxNodes, false);
    ggml_tensor * out = build(graph_ctx_, gf);
    ggml_set_output(out);
    ggml_build_forward_expand(gf, out);
    clock.lap(":build");
    ggml_backend_sched_reset(sched_);
    place_graph_inputs(sched_, gf);
    GgmlErrorCapture log;
    if (!ggml_backend_sched_alloc_graph(sched_, gf)) engine_fail(log, "could not allocate the compute graph");
    set_inputs(gf);
    clock.lap(":alloc");
    compute(sched_, gf, clock);
    return gf;
}

std::vector<float> Session::text_embed(const std::vector<int32_t> & ids) {
    return embed_rows(ids, model_->talker.text_vocab, "text", &build_text_embed);
}

std::vector<float> Session::codec_embed(const std::vector<int32_t> & ids) {
    return embed_rows(ids, model_->talker.codec_vocab, "codec", &build_codec_embed);
}

std::vector<float> Session::frame_embed(const std::vector<int32_t> & codes, int64_t n) {
    const Model & m = *model_;
    const int64_t G = m.talker.n_code_groups;
    if (n < 1 || static_cast<int64_t>(codes.size()) != n * G) {
        fail("frame codes must have shape [n >= 1, %lld], got %zu values", static_cast<long long>(G), codes.size());
    }
    std::vector<int32_t> ids(codes.size());  // group-major, one contiguous index run per group
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t g = 0; g < G; ++g) {
            const int32_t c = codes[t * G + g];
            if (c < 0 || c >= m.code_predictor.vocab) {
                fail("code %d at frame %lld, group %lld is outside [0, %d)", c, static_cast<long long>(t),
                     static_cast<long long>(g), m.code_predictor.vocab);
            }
            ids[g * n + t] = c;
        }
    }
    ggml_cgraph * gf =
        run([&](ggml_context * ctx, ggml_cgraph *) { return build_frame_embed(ctx, m.talker, m.code_predictor, n); },
            [&](ggml_cgraph * g) { set_input(g, kFrameCodes, ids); });
    return read_output(gf);
}

std::vector<float> Session::embed_rows(const std::vector<int32_t> & ids, int vocab, const char * what,
                                       ggml_tensor * (*build)(ggml_context *, const Talker &, int64_t)) {
    if (ids.empty()) fail("%s embedding: no token ids", what);
    for (int32_t id : ids) {
        if (id < 0 || id >= vocab) fail("%s token id %d is outside the %s vocabulary [0, %d)", what, id, what, vocab);
    }
    const int64_t n = static_cast<int64_t>(ids.size());
    ggml_cgraph * gf = run([&](ggml_context * ctx, ggml_cgraph *) { return build(ctx, model_->talker, n); },
                           [&](ggml_cgraph * g) { set_input(g, kEmbedIds, ids); });
    return read_output(gf);
}

}  // namespace qtts
