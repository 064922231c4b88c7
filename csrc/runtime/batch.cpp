// The batched frame loop (docs/serving.md, "Batching"): per frame one talker step over the
// slots that fed a frame ([D, B], attention per sequence over its own cache), cb0 sampling and
// the stop checks per slot as Session::generate_next, then one code-predictor pass of 15 steps in
// lockstep over the slots still going ([Dc, B], one cache lane each).
#include "runtime/batch.h"

#include <algorithm>
#include <chrono>

#include "nets/code_predictor.h"
#include "nets/talker.h"
#include "runtime/error.h"
#include "runtime/graph.h"

namespace qtts {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

constexpr int kMaxBatch = 256;
// Bounds on a batched talker step's graph nodes: per layer, and per sequence per layer (its own
// attention ops); the rest of the graph stays under kOtherNodes.
constexpr int kNodesPerLayer = 32, kNodesPerSequence = 24, kOtherNodes = 256;

}  // namespace

Batch::Batch(Session & session, int max_batch) : session_(session) {
    if (max_batch < 1 || max_batch > kMaxBatch) fail("max_batch must be in [1, %d], got %d", kMaxBatch, max_batch);
    for (int i = 0; i < max_batch; ++i) slots_.push_back(std::make_unique<Slot>());
    const Model & m = session_.model();
    const int layers = std::max(m.talker.tfm.hp.n_layer, 1);
    const int most = ((static_cast<int>(kMaxNodes) - kOtherNodes) / layers - kNodesPerLayer) / kNodesPerSequence;
    if (max_batch > most) {
        fail("max_batch %d is more than this model's batched talker step holds (%d sequences)", max_batch, most);
    }
    pred_cache_.reserve(session_.backend_, m.code_predictor.tfm.hp, m.talker.n_code_groups * max_batch,
                        session_.fused_attention());
}

std::vector<int> Batch::active() const {
    std::vector<int> ids;
    for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i]->used) ids.push_back(static_cast<int>(i));
    }
    return ids;
}

Batch::Slot & Batch::slot(int id, const char * what) {
    if (id < 0 || id >= max_batch()) fail("%s: slot %d is out of range [0, %d)", what, id, max_batch());
    if (!slots_[id]->used) fail("%s: slot %d holds no generation", what, id);
    return *slots_[id];
}

int Batch::add(const std::vector<float> & prompt, int n_prompt, const std::vector<float> & trailing, int n_trailing,
               const GenerateParams & p) {
    int id = 0;
    while (id < max_batch() && slots_[id]->used) ++id;
    if (id == max_batch()) fail("add: all %d slots are in use (max_batch)", max_batch());
    Slot & s = *slots_[id];
    s.g = GenerationState{};
    s.chunk = GenerateResult{};
    s.cancel.store(false);
    session_.init_generation(s.g, prompt, n_prompt, trailing, n_trailing, p, s.cache);
    s.used = true;
    return id;
}

void Batch::remove(int id) { finish(slot(id, "remove")); }

void Batch::cancel(int id) { slot(id, "cancel").cancel.store(true); }

// As Session::end_generation: an outsized cache is given back, an ordinary one kept for the
// slot's next request.
void Batch::finish(Slot & s) {
    s.used = false;
    if (s.cache.n_ctx() > kSteadyContext) s.cache.release();
    s.g = GenerationState{};
}

std::vector<SlotResult> Batch::step(int n_frames) {
    if (n_frames < 1) fail("step: n_frames must be at least 1, got %d", n_frames);
    std::vector<Slot *> live;
    std::vector<int> ids = active();
    for (int id : ids) {
        live.push_back(slots_[id].get());
        live.back()->chunk = GenerateResult{};
    }
    for (int f = 0; f < n_frames && !live.empty(); ++f) {
        std::vector<Slot *> fed, going;
        for (Slot * s : live) {
            if (s->g.need_step) fed.push_back(s);
        }
        if (!fed.empty()) talker_step(fed);
        for (Slot * s : live) {
            if (session_.next_cb0(s->g, [s] { return s->cancel.load(); })) going.push_back(s);
        }
        if (!going.empty()) predict(going);
        for (Slot * s : going) {
            s->chunk.codes.insert(s->chunk.codes.end(), s->g.frame.begin(), s->g.frame.end());
            ++s->chunk.frames;
            ++s->g.total.frames;
            s->g.need_step = true;
        }
        live = going;
    }
    std::vector<SlotResult> out;
    for (int id : ids) {
        Slot & s = *slots_[id];
        SlotResult r{id, std::move(s.chunk)};
        r.result.stop_reason = s.g.total.stop_reason;
        r.result.prefill_ms = s.g.total.prefill_ms;
        r.result.talker_ms = s.g.total.talker_ms;
        r.result.predictor_ms = s.g.total.predictor_ms;
        if (!r.result.stop_reason.empty()) finish(s);
        out.push_back(std::move(r));
    }
    return out;
}

// Each slot's wall time is the whole batched step: what its request waited.
void Batch::talker_step(const std::vector<Slot *> & s) {
    const Model & m = session_.model();
    const int B = static_cast<int>(s.size()), groups = m.talker.n_code_groups, d = m.talker.n_embd();
    std::vector<KvWindow> seqs(B);
    std::vector<int32_t> codes(static_cast<size_t>(B) * groups), pos(B);
    std::vector<float> text(static_cast<size_t>(B) * d);
    for (int b = 0; b < B; ++b) {
        const GenerationState & g = s[b]->g;
        const int n_past = g.n_prompt + g.total.frames - 1;
        if (n_past >= s[b]->cache.n_ctx()) fail("batch step: position %d is outside the slot's cache", n_past);
        seqs[b] = KvWindow{&s[b]->cache.k, &s[b]->cache.v, n_past, n_past + 1, 1, 0, s[b]->cache.fused()};
        pos[b] = n_past;
        for (int gi = 0; gi < groups; ++gi) codes[static_cast<size_t>(gi) * B + b] = g.frame[gi];
        std::copy_n(session_.step_text(g), d, text.begin() + static_cast<size_t>(b) * d);
    }
    auto t0 = Clock::now();
    ggml_cgraph * gf = session_.run(
        [&](ggml_context * ctx, ggml_cgraph * g) {
            return build_talker_step_batch(ctx, g, m.talker, m.code_predictor, seqs);
        },
        [&](ggml_cgraph * g) {
            set_input(g, kTalkerCodes, codes);
            set_input(g, kTalkerText, text);
            set_input(g, kTalkerPos, pos);
        });
    const std::vector<float> logits = read_tensor(gf, kTalkerLogits), hidden = read_tensor(gf, kTalkerHidden);
    const double ms = ms_since(t0);
    const size_t vocab = logits.size() / B;
    for (int b = 0; b < B; ++b) {
        GenerationState & g = s[b]->g;
        g.out.logits.assign(logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab);
        g.out.hidden.assign(hidden.begin() + static_cast<size_t>(b) * d, hidden.begin() + static_cast<size_t>(b + 1) * d);
        g.total.talker_ms += ms;
        g.need_step = false;
    }
}

void Batch::predict(const std::vector<Slot *> & s) {
    const Model & m = session_.model();
    const int B = static_cast<int>(s.size()), groups = m.talker.n_code_groups, d = m.talker.n_embd();
    std::vector<float> hidden(static_cast<size_t>(B) * d);
    for (int b = 0; b < B; ++b) std::copy(s[b]->g.out.hidden.begin(), s[b]->g.out.hidden.end(), hidden.begin() + b * d);
    auto t0 = Clock::now();
    std::vector<int32_t> code(B), pos;
    for (int step = 0; step + 1 < groups; ++step) {
        for (int b = 0; b < B; ++b) code[b] = s[b]->g.frame[step];
        pos.clear();
        for (int b = 0; b < B; ++b) {
            if (step == 0) {
                pos.push_back(0);
                pos.push_back(1);
            } else {
                pos.push_back(step + 1);
            }
        }
        ggml_cgraph * gf = session_.run(
            [&](ggml_context * ctx, ggml_cgraph * g) {
                return build_predictor_step_batch(ctx, g, m.code_predictor, m.talker, pred_cache_, step, B, groups);
            },
            [&](ggml_cgraph * g) {
                set_input(g, kPredCode, code);
                set_input(g, kPredPos, pos);
                if (step == 0) set_input(g, kPredHidden, hidden);
            });
        const std::vector<float> logits = read_tensor(gf, kPredLogits);
        const size_t vocab = logits.size() / B;
        for (int b = 0; b < B; ++b) {
            GenerationState & g = s[b]->g;
            std::vector<float> row(logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab);
            g.frame[step + 1] = select_token(row, g.p.subtalker, g.rng);
        }
    }
    const double ms = ms_since(t0);
    for (Slot * x : s) x->g.total.predictor_ms += ms;
}

}  // namespace qtts
