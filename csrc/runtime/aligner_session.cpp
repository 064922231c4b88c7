#include "runtime/aligner_session.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/graph.h"

namespace qtts {

namespace {

constexpr size_t kAlignerNodes = 8192;

}  // namespace

AlignerSession::AlignerSession(std::shared_ptr<const AlignerModel> model, int n_threads)
    : model_(std::move(model)), n_threads_(n_threads) {
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
    ggml_backend_cpu_set_n_threads(cpu_, n_threads_);
    ggml_threadpool_params p = ggml_threadpool_params_default(n_threads_);
    threadpool_ = ggml_threadpool_new(&p);
    if (!threadpool_) engine_fail(log, "could not create a threadpool of %d threads", n_threads_);
    ggml_backend_cpu_set_threadpool(cpu_, threadpool_);
    make_sched();
    graph_meta_.resize(ggml_tensor_overhead() * kAlignerNodes + ggml_graph_overhead_custom(kAlignerNodes, false));
}

AlignerSession::~AlignerSession() {
    cache_.release();
    if (graph_ctx_) ggml_free(graph_ctx_);
    if (sched_) ggml_backend_sched_free(sched_);
    if (cpu_ && cpu_ != backend_) ggml_backend_free(cpu_);
    if (backend_) ggml_backend_free(backend_);
    if (threadpool_) ggml_threadpool_free(threadpool_);
}

void AlignerSession::make_sched() {
    std::vector<ggml_backend_t> backends = {backend_};
    if (cpu_ != backend_) backends.push_back(cpu_);
    GgmlErrorCapture log;
    sched_ = ggml_backend_sched_new(backends.data(), nullptr, static_cast<int>(backends.size()), kAlignerNodes,
                                    /*parallel=*/false, /*op_offload=*/true);
    if (!sched_) engine_fail(log, "could not create the backend scheduler");
}

ggml_cgraph * AlignerSession::run(const GraphBuild & build, const GraphInputs & inputs) {
    if (graph_ctx_) ggml_free(graph_ctx_);
    ggml_init_params ip = {graph_meta_.size(), graph_meta_.data(), /*no_alloc=*/true};
    graph_ctx_ = ggml_init(ip);
    ggml_cgraph * gf = ggml_new_graph_custom(graph_ctx_, kAlignerNodes, false);
    ggml_tensor * out = build(graph_ctx_, gf);
    ggml_set_output(out);
    ggml_build_forward_expand(gf, out);
    ggml_backend_sched_reset(sched_);
    if (backend_ != cpu_) place_inputs(sched_, gf, backend_);  // portable on a device (runtime/graph.h)
    GgmlErrorCapture log;
    if (!ggml_backend_sched_alloc_graph(sched_, gf)) engine_fail(log, "could not allocate the aligner's graph");
    inputs(gf);
    const bool observe = profiling_ || census_.on();
    ggml_backend_sched_set_eval_callback(sched_, observe ? &AlignerSession::profile_node : nullptr, this);
    const ggml_status status = ggml_backend_sched_graph_compute(sched_, gf);
    if (status != GGML_STATUS_SUCCESS) engine_fail(log, "graph compute failed: %s", ggml_status_to_string(status));
    return gf;
}

void AlignerSession::set_profiling(bool on) {
    profiling_ = on;
    if (on) profile_.clear();
}

bool AlignerSession::profile_node(ggml_tensor * t, bool ask, void * self) {
    auto * s = static_cast<AlignerSession *>(self);
    const auto now = std::chrono::steady_clock::now();
    if (ask) {
        s->node_t0_ = now;
        return true;  // observe every node: the scheduler then computes them one at a time
    }
    s->census_.count(t);
    if (!s->profiling_) return true;
    std::string op = t->op == GGML_OP_UNARY ? ggml_unary_op_name(ggml_get_unary_op(t)) : ggml_op_name(t->op);
    if (t->op == GGML_OP_MUL_MAT || t->op == GGML_OP_CUSTOM) {
        const ggml_tensor * w = t->src[0]->view_src ? t->src[0]->view_src : t->src[0];
        const bool weight = w->buffer && ggml_backend_buffer_get_usage(w->buffer) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
        const bool conv = weight && std::string(w->name).rfind("aenc.conv.", 0) == 0;
        op = conv ? "MUL_MAT(conv)" : weight ? op + "(weights)" : op;
    }
    s->profile_[std::string(s->phase_) + "/" + op] +=
        std::chrono::duration<double, std::milli>(now - s->node_t0_).count();
    return true;
}

CodecRunner AlignerSession::runner() {
    CodecRunner r;
    r.run = [this](const GraphBuild & build, const GraphInputs & inputs) { return run(build, inputs); };
    // the native path's fused cache is read by a CPU op; the portable one lives on the device
    r.state_backend = model_->ops == OpsPath::native ? cpu_ : backend_;
    return r;
}

std::vector<float> AlignerSession::encode(const std::vector<float> & mel, int64_t n_frames,
                                          const std::vector<std::string> & stages,
                                          std::vector<std::vector<float>> * got) {
    phase_ = "encoder";
    if (stages.empty()) return encode_audio(model_->encoder, runner(), mel, n_frames);
    // The stages make a graph of the same nodes in another order with more outputs, which a
    // scheduler would compute by the plan of the last graph: a fresh one plans it, and the
    // graphs after it.
    ggml_backend_sched_free(sched_);
    make_sched();
    std::vector<float> out = encode_audio(model_->encoder, runner(), mel, n_frames, stages, got);
    ggml_backend_sched_free(sched_);
    make_sched();
    return out;
}

std::vector<float> AlignerSession::timestamp_logits(const std::vector<int32_t> & ids, const std::vector<float> & audio,
                                                    int64_t n_audio) {
    const AlignerModel & m = *model_;
    const size_t width = static_cast<size_t>(m.decoder.tfm.hp.n_embd);
    if (n_audio < 0 || audio.size() != static_cast<size_t>(n_audio) * width) {
        fail("aligner: audio features must have shape [n, %zu], got %zu values for %lld rows", width, audio.size(),
             static_cast<long long>(n_audio));
    }
    const auto first = std::find(ids.begin(), ids.end(), m.audio_pad_id);
    const auto pads = std::count(ids.begin(), ids.end(), m.audio_pad_id);
    if (pads != n_audio ||
        (pads > 0 && !std::all_of(first, first + pads, [&](int32_t id) { return id == m.audio_pad_id; }))) {
        fail(
            "aligner: the prompt must hold one run of %lld audio_pad ids (id %d) for the audio features, it holds %lld",
            static_cast<long long>(n_audio), m.audio_pad_id, static_cast<long long>(pads));
    }
    std::vector<int32_t> slots;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == m.timestamp_id) slots.push_back(static_cast<int32_t>(i));
    }
    phase_ = "decoder";
    const CodecRunner r = runner();
    std::vector<float> embd = aligner_embed(m.decoder, r, ids);
    std::copy(audio.begin(), audio.end(), embd.begin() + (first - ids.begin()) * width);
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<float> out =
        aligner_logits(m.decoder, r, cache_, m.ops == OpsPath::native, embd, n, slots, kAlignerChunk);
    if (n > kAlignerSteady) release_buffers();
    return out;
}

std::map<std::string, size_t> AlignerSession::memory() const {
    size_t compute = ggml_backend_sched_get_buffer_size(sched_, backend_);
    if (cpu_ != backend_) compute += ggml_backend_sched_get_buffer_size(sched_, cpu_);
    return {{"kv_cache", cache_.bytes()}, {"compute_buffers", compute}};
}

void AlignerSession::release_buffers() {
    cache_.release();
    if (graph_ctx_) ggml_free(graph_ctx_);
    graph_ctx_ = nullptr;
    ggml_backend_sched_free(sched_);
    sched_ = nullptr;
    make_sched();
}

}  // namespace qtts
