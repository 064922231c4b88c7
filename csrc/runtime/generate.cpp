// The per-frame generation loop (docs/model.md, "Generation loop"): talker prefill, then per
// frame the code predictor and one talker step, sampling cb0 from the talker and cb1.. from the
// code predictor (the subtalker).
#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>

#include "nets/code_predictor.h"
#include "nets/talker.h"
#include "runtime/error.h"
#include "runtime/graph.h"
#include "runtime/session.h"

namespace qtts {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::vector<int32_t> positions(int n_past, int n) {
    std::vector<int32_t> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = n_past + i;
    return pos;
}

TalkerOutput talker_output(ggml_cgraph * gf) {
    return {read_tensor(gf, kTalkerLogits), read_tensor(gf, kTalkerHidden)};
}

}  // namespace

TalkerOutput Session::talker_prefill(const std::vector<float> & embd, int n, int n_ctx) {
    return talker_prefill(talker_cache_, embd, n, n_ctx);
}

TalkerOutput Session::talker_prefill(KvCache & cache, const std::vector<float> & embd, int n, int n_ctx,
                                     int64_t first) {
    const Phase phase(*this, "prefill");
    const Talker & t = model_->talker;
    if (n < 1 || embd.size() != static_cast<size_t>(n) * t.n_embd()) {
        fail("talker prefill: expected [%d, %d] embeddings, got %zu values", n, t.n_embd(), embd.size());
    }
    if (first == 0 && cache.n_ctx() < std::max(n, n_ctx)) {
        cache.reserve(backend_, t.tfm.hp, std::max(n, n_ctx), fused_attention());
    }
    // Chunks of prefill_chunk_ positions, each attending to the cache so far: the attention
    // scores of a chunk are [n_past + chunk, chunk, heads], linear in the prompt rather than
    // quadratic. Each row is the same dot products and softmax over the keys it sees as in one
    // graph (equal to rounding: masked keys no longer pad the rows).
    const size_t d = static_cast<size_t>(t.n_embd());
    ggml_cgraph * gf = nullptr;
    for (int n_past = 0; n_past < n; n_past += prefill_chunk_) {
        const int c = std::min(prefill_chunk_, n - n_past);
        const std::vector<int32_t> pos = positions(n_past, c);
        gf = run([&](ggml_context * ctx,
                     ggml_cgraph * g) { return build_talker_prefill(ctx, g, t, cache, n_past, c, first); },
                 [&](ggml_cgraph * g) {
                     set_input(g, kTalkerEmbd, embd.data() + n_past * d, c * d * sizeof(float));
                     set_input(g, kTalkerPos, pos);
                 });
    }
    return talker_output(gf);
}

TalkerOutput Session::talker_step(const std::vector<int32_t> & codes, const float * text, int n_past) {
    const Phase phase(*this, "talker");
    const Talker & t = model_->talker;
    if (static_cast<int>(codes.size()) != t.n_code_groups) {
        fail("talker step: expected %d codes, got %zu", t.n_code_groups, codes.size());
    }
    for (size_t g = 0; g < codes.size(); ++g) {
        const int vocab = g == 0 ? t.codec_vocab : model_->code_predictor.vocab;
        if (codes[g] < 0 || codes[g] >= vocab) fail("talker step: code %d of group %zu is out of range", codes[g], g);
    }
    if (n_past < 1 || n_past >= talker_cache_.n_ctx()) {
        fail("talker step: position %d is outside the cache (prefill first; %d positions)", n_past,
             talker_cache_.n_ctx());
    }
    const int32_t pos = n_past;
    auto set_inputs = [&](ggml_cgraph * g) {
        set_input(g, kTalkerCodes, codes);
        set_input(g, kTalkerText, text, t.n_embd() * sizeof(float));
        set_input(g, kTalkerPos, &pos, sizeof(pos));
    };
    // A fused cache takes the position from the graph's input: the step graph is built once per
    // cache and replayed (docs/architecture.md, "Graph replay and the generation profile").
    if (talker_cache_.fused()) {
        ProfileClock clock(*this);
        if (step_.stale(talker_cache_)) {
            build_replay(step_, talker_cache_, "talker step", [&](ggml_context * ctx, ggml_cgraph * gf) {
                ggml_tensor * out = build_talker_step(ctx, gf, t, model_->code_predictor, talker_cache_);
                ggml_set_output(out);
                ggml_build_forward_expand(gf, out);
            });
        }
        clock.lap(":build");
        set_inputs(step_.gf);
        clock.lap(":alloc");
        compute(step_.sched, step_.gf, clock);
        return talker_output(step_.gf);
    }
    // Elsewhere the batched step's graph with one lane: a window of whole buckets, masked
    // (docs/architecture.md, "KV cache"). Its nodes, shapes and addresses only change with the
    // window, so each window's graph is built once and replayed, which lets a GPU backend replay
    // it as one captured graph (docs/gpu.md, "What runs where").
    const int64_t n_ctx = talker_cache_.n_ctx(), window = kv_window(n_past + 1, n_ctx);
    const KvStepInputs kv = kv_step_inputs(t.tfm.hp, n_ctx, n_ctx, window, {n_past});
    ProfileClock clock(*this);
    Replay & r = window_steps_[window];
    if (r.stale(talker_cache_)) {
        build_replay(r, talker_cache_, "talker step", [&](ggml_context * ctx, ggml_cgraph * gf) {
            ggml_tensor * out =
                build_talker_step_lanes(ctx, gf, t, model_->code_predictor, talker_cache_, 1, n_ctx, window);
            ggml_set_output(out);
            ggml_build_forward_expand(gf, out);
        });
    }
    clock.lap(":build");
    set_inputs(r.gf);
    set_kv_step_inputs(r.gf, kv, "talker");
    clock.lap(":alloc");
    compute(r.sched, r.gf, clock);
    return talker_output(r.gf);
}

void Session::predict_frame(const std::vector<float> & hidden, std::vector<int32_t> & codes, const SamplingParams & p,
                            std::mt19937_64 & rng) {
    const Phase phase(*this, "predictor");
    // the host sampling op reads the logits from host memory: a device samples in the graph
    // (docs/kernels.md, "Sampling on the device") or, where it cannot, keeps the step graphs
    const bool device = device_sampling_ && device_samples(p);
    if (backend_ != cpu_ && !device) return predict_frame_steps(hidden, codes, p, rng);
    ProfileClock clock(*this);
    if (frame_.stale_for(pred_cache_, device, p)) build_frame_graph(device, p);
    clock.lap(":build");
    FrameGraph & f = frame_;
    f.sampler.params = {&p};
    f.sampler.rng = {&rng};
    f.sampler.error = nullptr;
    if (f.io.uniform) {
        // select_token's draw per step, in step order, so the RNG stream stays the host's
        for (float & u : f.uniform) {
            u = std::min(static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53), 0x1.fffffep-1f);
        }
        ggml_backend_tensor_set(f.io.uniform, f.uniform.data(), 0, ggml_nbytes(f.io.uniform));
    }
    ggml_backend_tensor_set(f.io.hidden, hidden.data(), 0, ggml_nbytes(f.io.hidden));
    ggml_backend_tensor_set(f.io.code0, &codes[0], 0, sizeof(int32_t));
    if (!pred_cache_.fused()) {  // the steps' cache rows and masks (the same every frame)
        for (int step = 1; step + 1 < model_->talker.n_code_groups; ++step) {
            set_kv_step_inputs(f.gf, predictor_rows(model_->code_predictor, pred_cache_, step),
                               format("pred.%d", step).c_str());
        }
    }
    for (size_t step = 0; step < f.io.pos.size(); ++step) {
        const std::vector<int32_t> pos = step == 0 ? positions(0, 2) : positions(static_cast<int>(step) + 1, 1);
        ggml_backend_tensor_set(f.io.pos[step], pos.data(), 0, pos.size() * sizeof(int32_t));
    }
    clock.lap(":alloc");
    compute(f.sched, f.gf, clock);
    if (f.sampler.error) std::rethrow_exception(f.sampler.error);
    for (size_t g = 0; g < f.io.codes.size(); ++g) {
        ggml_backend_tensor_get(f.io.codes[g], &codes[g + 1], 0, sizeof(int32_t));
    }
}

void Session::build_frame_graph(bool device, const SamplingParams & p) {
    build_replay(frame_, pred_cache_, "code predictor's", [&](ggml_context * ctx, ggml_cgraph * gf) {
        build_predictor_frame(ctx, gf, model_->code_predictor, model_->talker, pred_cache_, &frame_.sampler, frame_.io,
                              device ? &p : nullptr);
    });
    frame_.on_device = device;
    frame_.params = p;
    frame_.uniform.assign(frame_.io.uniform ? model_->talker.n_code_groups - 1 : 0, 0.0f);
}

void Session::predict_frame_steps(const std::vector<float> & hidden, std::vector<int32_t> & codes,
                                  const SamplingParams & p, std::mt19937_64 & rng) {
    const int groups = model_->talker.n_code_groups;
    for (int step = 0; step + 1 < groups; ++step) {
        const int32_t code = codes[step];
        const std::vector<int32_t> pos = step == 0 ? positions(0, 2) : positions(step + 1, 1);
        ggml_cgraph * gf = run(
            [&](ggml_context * ctx, ggml_cgraph * g) {
                return build_predictor_step(ctx, g, model_->code_predictor, model_->talker, pred_cache_, step);
            },
            [&](ggml_cgraph * g) {
                set_input(g, kPredCode, &code, sizeof(code));
                set_input(g, kPredPos, pos);
                if (step == 0) set_input(g, kPredHidden, hidden);
                if (step > 0 && !pred_cache_.fused()) {
                    set_kv_step_inputs(g, predictor_rows(model_->code_predictor, pred_cache_, step), "pred");
                }
            });
        std::vector<float> logits = read_tensor(gf, kPredLogits);
        codes[step + 1] = select_token(logits, p, rng);
    }
}

void Session::init_generation(GenerationState & g, const std::vector<float> & prompt, int n_prompt,
                              const std::vector<float> & trailing, int n_trailing, const GenerateParams & p,
                              KvCache & cache, int64_t first) {
    const Model & m = *model_;
    const int d = m.talker.n_embd(), groups = m.talker.n_code_groups;
    if (p.max_new_tokens < 1) fail("max_new_tokens must be at least 1, got %d", p.max_new_tokens);
    if (p.frame_budget < 0) fail("frame_budget must not be negative, got %d", p.frame_budget);
    if (n_trailing < 0 || trailing.size() != static_cast<size_t>(n_trailing) * d) {
        fail("trailing text: expected [%d, %d] values, got %zu", n_trailing, d, trailing.size());
    }
    if (m.codec_ids.eos < 0 || m.codec_ids.eos >= m.talker.codec_vocab) {
        fail("codec EOS id %d is outside the codec vocabulary", m.codec_ids.eos);
    }
    g.p = p;
    g.rng.seed(p.seed);
    g.trailing = trailing;
    g.pad = text_embed({m.text_ids.pad});
    g.n_prompt = n_prompt;
    g.n_trailing = n_trailing;
    // The reference suppresses the top kSuppressedIds ids whatever the vocabulary (docs/model.md,
    // "Sampling and stopping").
    g.suppress_begin = m.talker.codec_vocab - kSuppressedIds;
    g.frame.resize(groups);
    // Positions used: the prompt, then one per fed frame (at most max_new_tokens - 1, and at most
    // the budget): the cache is sized to this request, not to a fixed maximum.
    g.max_fed = max_fed(p);
    if (first < 0) {
        // whole buckets of positions where the step attends a masked window (kv_window)
        int64_t n_ctx = int64_t{n_prompt} + std::max(g.max_fed, 1);
        if (!fused_attention()) n_ctx = (n_ctx + kKvBucket - 1) / kKvBucket * kKvBucket;
        n_ctx = std::min<int64_t>(n_ctx, std::numeric_limits<int>::max());
        cache.reserve(backend_, m.talker.tfm.hp, static_cast<int>(n_ctx), fused_attention());
        first = 0;
    }
    auto t0 = Clock::now();
    g.out = talker_prefill(cache, prompt, n_prompt, 0, first);
    g.total.prefill_ms = ms_since(t0);
}

void Session::generate_begin(const std::vector<float> & prompt, int n_prompt, const std::vector<float> & trailing,
                             int n_trailing, const GenerateParams & p, bool text_open) {
    if (gen_ && gen_->total.stop_reason.empty()) end_generation(*gen_);  // abandoned, as a closed stream
    gen_.reset();
    auto g = std::make_unique<GenerationState>();
    cancel_.store(false);
    init_generation(*g, prompt, n_prompt, trailing, n_trailing, p, talker_cache_);
    g->text_open = text_open;
    pred_cache_.reserve(backend_, model_->code_predictor.tfm.hp, model_->talker.n_code_groups, fused_attention());
    gen_ = std::move(g);
}

bool Session::next_cb0(GenerationState & g, const std::function<bool()> & cancelled) {
    const int eos = model_->codec_ids.eos;
    talker_logits_processors(g.out.logits, g.history, g.p.repetition_penalty, eos, g.p.min_new_tokens,
                             g.suppress_begin);
    const int32_t cb0 = select_token(g.out.logits, g.p.talker, g.rng);
    g.history.push_back(cb0);
    if (cb0 == eos) {
        g.total.stop_reason = "eos";
    } else if (static_cast<int>(g.history.size()) >= g.p.max_new_tokens) {
        g.total.stop_reason = "max_new_tokens";
    } else if (g.p.frame_budget > 0 && g.total.frames >= g.p.frame_budget) {
        g.total.stop_reason = "budget";
    } else if (cancelled()) {
        g.total.stop_reason = "cancelled";
    }
    g.frame[0] = cb0;
    return g.total.stop_reason.empty();
}

const float * Session::step_text(const GenerationState & g) const {
    const int f = g.total.frames - 1;
    const size_t d = static_cast<size_t>(model_->talker.n_embd());
    return f < g.n_trailing ? g.trailing.data() + f * d : g.pad.data();
}

GenerateResult Session::generate_next(int n_frames, const std::function<bool()> & should_stop) {
    if (n_frames < 1) fail("generate_next: n_frames must be at least 1, got %d", n_frames);
    if (!gen_) fail("no generation in progress (call generate_begin first)");
    GenerationState & g = *gen_;
    GenerateResult chunk;
    while (g.total.stop_reason.empty() && chunk.frames < n_frames) {
        // Streamed text: wait (return) before a step whose text row has not come, and before the
        // budget's frame while the budget can still grow (docs/model.md, "Text streamed in").
        const bool row_missing = g.need_step && g.total.frames - 1 >= g.n_trailing;
        const bool budget_open = g.p.frame_budget > 0 && g.total.frames >= g.p.frame_budget;
        if (g.text_open && (row_missing || budget_open)) {
            chunk.needs_text = true;
            break;
        }
        if (g.need_step) {
            const int pos = g.n_prompt + g.total.frames - 1;
            if (pos >= talker_cache_.n_ctx()) grow_talker_cache(std::max(g.n_prompt + g.max_fed, pos + 1));
            auto t0 = Clock::now();
            g.out = talker_step(g.frame, step_text(g), g.n_prompt + g.total.frames - 1);
            g.total.talker_ms += ms_since(t0);
            g.need_step = false;
        }
        if (!next_cb0(g, [&] { return cancel_.load() || (should_stop && should_stop()); })) break;
        auto t0 = Clock::now();
        predict_frame(g.out.hidden, g.frame, g.p.subtalker, g.rng);
        g.total.predictor_ms += ms_since(t0);
        chunk.codes.insert(chunk.codes.end(), g.frame.begin(), g.frame.end());
        ++chunk.frames;
        ++g.total.frames;
        g.need_step = true;
    }
    chunk.stop_reason = g.total.stop_reason;
    if (!chunk.stop_reason.empty()) end_generation(g);
    chunk.prefill_ms = g.total.prefill_ms;
    chunk.talker_ms = g.total.talker_ms;
    chunk.predictor_ms = g.total.predictor_ms;
    return chunk;
}

void Session::generate_append(const std::vector<float> & rows, int n, bool text_final, int frame_budget) {
    if (!gen_ || !gen_->total.stop_reason.empty()) fail("no generation in progress (call generate_begin first)");
    GenerationState & g = *gen_;
    if (!g.text_open) fail("generate_append: this generation's text is complete");
    const size_t d = static_cast<size_t>(model_->talker.n_embd());
    if (n < 0 || rows.size() != static_cast<size_t>(n) * d) {
        fail("generate_append: expected [%d, %zu] values, got %zu", n, d, rows.size());
    }
    if (frame_budget < g.p.frame_budget || (g.p.frame_budget == 0 && frame_budget != 0)) {
        fail("generate_append: the frame budget may only grow (%d -> %d)", g.p.frame_budget, frame_budget);
    }
    g.trailing.insert(g.trailing.end(), rows.begin(), rows.end());
    g.n_trailing += n;
    g.p.frame_budget = frame_budget;
    g.max_fed = max_fed(g.p);
    g.text_open = !text_final;
}

int Session::max_fed(const GenerateParams & p) {
    const int most = p.max_new_tokens - 1;
    return p.frame_budget > 0 ? std::min(most, p.frame_budget) : most;
}

void Session::grow_talker_cache(int n_ctx) {
    // Every layer's tensors are read out, the cache reallocated and the old contents written back
    // into the same indices: the axis that grew is the positions', whatever the layout.
    struct Saved {
        std::vector<uint8_t> data;
        int64_t ne[4];
        size_t nb[4];
    };
    std::vector<Saved> saved;
    for (size_t il = 0; il < talker_cache_.k.size(); ++il) {
        for (ggml_tensor * t : {talker_cache_.k[il], talker_cache_.v[il]}) {
            Saved s{std::vector<uint8_t>(ggml_nbytes(t)), {}, {}};
            ggml_backend_tensor_get(t, s.data.data(), 0, s.data.size());
            std::copy(t->ne, t->ne + 4, s.ne);
            std::copy(t->nb, t->nb + 4, s.nb);
            saved.push_back(std::move(s));
        }
    }
    // whole buckets where the step attends a masked window (kv_window), as init_generation sizes it
    int64_t want = n_ctx;
    if (!fused_attention()) want = std::min<int64_t>((want + kKvBucket - 1) / kKvBucket * kKvBucket, INT32_MAX);
    talker_cache_.reserve(backend_, model_->talker.tfm.hp, static_cast<int>(want), fused_attention());
    size_t j = 0;
    for (size_t il = 0; il < talker_cache_.k.size(); ++il) {
        for (ggml_tensor * t : {talker_cache_.k[il], talker_cache_.v[il]}) {
            const Saved & s = saved[j++];
            for (int64_t i3 = 0; i3 < s.ne[3]; ++i3) {
                for (int64_t i2 = 0; i2 < s.ne[2]; ++i2) {
                    for (int64_t i1 = 0; i1 < s.ne[1]; ++i1) {
                        ggml_backend_tensor_set(t, s.data.data() + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3],
                                                i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], s.ne[0] * s.nb[0]);
                    }
                }
            }
        }
    }
}

void Session::end_generation(const GenerationState & g) {
    if (g.n_prompt + g.total.frames > kSteadyContext) {
        release_buffers();
    } else if (talker_cache_.n_ctx() > kSteadyContext) {
        talker_cache_.release();  // reserved for a frame budget that this generation did not use
    }
}

GenerateResult Session::generate(const std::vector<float> & prompt, int n_prompt, const std::vector<float> & trailing,
                                 int n_trailing, const GenerateParams & p, const std::function<bool()> & should_stop) {
    generate_begin(prompt, n_prompt, trailing, n_trailing, p);
    GenerateResult r = generate_next(std::numeric_limits<int>::max(), should_stop);
    gen_.reset();
    return r;
}

}  // namespace qtts
