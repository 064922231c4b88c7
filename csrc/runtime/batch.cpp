// The batched frame loop (docs/serving.md, "Batching"): per frame one talker step over the
// slots' lanes of one shared KV cache ([D, lanes], the same ops whatever the number of slots), cb0
// sampling and the stop checks per slot as Session::generate_next, then one code-predictor pass
// of 15 steps in lockstep over the slots still going ([Dc, B], one cache lane each).
#include "runtime/batch.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "nets/code_predictor.h"
#include "nets/talker.h"
#include "runtime/error.h"
#include "runtime/graph.h"

namespace qtts {

namespace {

// Positions of a slot's lane written so far: the prompt and every talker step (one per frame
// but the last, until that frame was fed).
int64_t positions_used(const GenerationState & g) { return g.n_prompt + g.total.frames - (g.need_step ? 1 : 0); }

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

constexpr int kMaxBatch = 256;
// Lanes are added this many at a time, so that a growing batch reallocates its cache rarely.
constexpr int kLaneGroup = 8;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// The code predictor's positions at `step` for `lanes` lanes in lockstep: [0, 1] each for the
// two-position prefill, then [step + 1] each.
std::vector<int32_t> predictor_positions(int step, int lanes) {
    std::vector<int32_t> pos;
    for (int b = 0; b < lanes; ++b) {
        if (step == 0) {
            pos.push_back(0);
            pos.push_back(1);
        } else {
            pos.push_back(step + 1);
        }
    }
    return pos;
}

// Bytes of K and V per cached position of a transformer.
int64_t position_bytes(const TransformerHParams & hp) {
    return int64_t{2} * hp.n_layer * hp.n_head_kv * hp.head_dim * static_cast<int64_t>(sizeof(float));
}

// A ValueError naming the bytes when `bytes` more do not fit the backend's free memory.
void check_memory(ggml_backend_t backend, int64_t bytes, const char * what) {
    size_t free = 0, total = 0;
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    if (dev) ggml_backend_dev_memory(dev, &free, &total);
    if (free > 0 && bytes > static_cast<int64_t>(free)) {
        fail("%s needs %lld bytes, more than the %zu bytes free on %s", what, static_cast<long long>(bytes), free,
             ggml_backend_name(backend));
    }
}

}  // namespace

Batch::Batch(Session & session, int max_batch) : session_(session) {
    if (max_batch < 1 || max_batch > kMaxBatch) fail("max_batch must be in [1, %d], got %d", kMaxBatch, max_batch);
    const Model & m = session_.model();
    // the least the caches take at this max_batch: one bucket of talker positions per slot
    const int64_t least = int64_t{max_batch} * (kKvBucket * position_bytes(m.talker.tfm.hp) +
                                                m.talker.n_code_groups * position_bytes(m.code_predictor.tfm.hp));
    check_memory(session_.backend_, least, format("max_batch %d: the KV caches", max_batch).c_str());
    for (int i = 0; i < max_batch; ++i) slots_.push_back(std::make_unique<Slot>());
    pred_cache_.reserve(session_.backend_, m.code_predictor.tfm.hp, m.talker.n_code_groups * max_batch,
                        session_.fused_attention());
}

Batch::~Batch() {
    session_.free_replay(frame_);
    session_.free_replay(step_);
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
               const GenerateParams & p, bool text_open) {
    int id = 0;
    while (id < max_batch() && slots_[id]->used) ++id;
    if (id == max_batch()) fail("add: all %d slots are in use (max_batch)", max_batch());
    // The lane holds the prompt and every fed frame (as Session::init_generation sizes its
    // cache), and one position more: a lane that sits a step out writes its last position.
    int max_fed = p.max_new_tokens - 1;
    if (p.frame_budget > 0) max_fed = std::min(max_fed, p.frame_budget);
    const int64_t need = int64_t{std::max(n_prompt, 1)} + std::max(max_fed, 1) + 1;
    reserve(std::min(max_batch(), static_cast<int>(round_up(id + 1, kLaneGroup))), round_up(need, kKvBucket));
    Slot & s = *slots_[id];
    s.g = GenerationState{};
    s.chunk = GenerateResult{};
    s.cancel.store(false);
    session_.init_generation(s.g, prompt, n_prompt, trailing, n_trailing, p, *cache_, id * lane_len_);
    s.g.text_open = text_open;
    s.used = true;
    return id;
}

// Streamed text (docs/serving.md, "Batching", streamed text): the checks and bookkeeping of
// Session::generate_append on the slot's state, and a lane long enough for the grown budget.
void Batch::append(int id, const std::vector<float> & rows, int n, bool text_final, int frame_budget) {
    Slot & s = slot(id, "append");
    GenerationState & g = s.g;
    if (!g.text_open) fail("append: slot %d's text is complete", id);
    const size_t d = static_cast<size_t>(model().talker.n_embd());
    if (n < 0 || rows.size() != static_cast<size_t>(n) * d) {
        fail("append: expected [%d, %zu] values, got %zu", n, d, rows.size());
    }
    if (frame_budget < g.p.frame_budget || (g.p.frame_budget == 0 && frame_budget != 0)) {
        fail("append: the frame budget may only grow (%d -> %d)", g.p.frame_budget, frame_budget);
    }
    GenerateParams p = g.p;
    p.frame_budget = frame_budget;
    const int max_fed = Session::max_fed(p);
    const int64_t need = int64_t{std::max(g.n_prompt, 1)} + std::max(max_fed, 1) + 1;
    if (need > lane_len_) reserve(lanes_, round_up(need, kKvBucket));
    g.trailing.insert(g.trailing.end(), rows.begin(), rows.end());
    g.n_trailing += n;
    g.p = p;
    g.max_fed = max_fed;
    g.text_open = !text_final;
}

bool Batch::waits_for_text(const Slot & s) const {
    const GenerationState & g = s.g;
    if (!g.text_open || !g.total.stop_reason.empty()) return false;
    const bool row_missing = g.need_step && g.total.frames - 1 >= g.n_trailing;
    const bool budget_open = g.p.frame_budget > 0 && g.total.frames >= g.p.frame_budget;
    return row_missing || budget_open;
}

void Batch::reserve(int lanes, int64_t lane_len) {
    lanes = std::max(lanes, lanes_);
    lane_len = std::max(lane_len, lane_len_);
    if (cache_ && lanes == lanes_ && lane_len == lane_len_) return;
    const Model & m = session_.model();
    const TransformerHParams & hp = m.talker.tfm.hp;
    const int64_t positions = lanes * lane_len, bytes = positions * position_bytes(hp);
    const std::string what =
        format("the batch's talker KV cache (%d slots of %lld positions)", lanes, static_cast<long long>(lane_len));
    if (positions > std::numeric_limits<int>::max()) {
        fail("%s needs %lld bytes, more than one cache holds", what.c_str(), static_cast<long long>(bytes));
    }
    check_memory(session_.backend_, bytes, what.c_str());
    auto grown = std::make_unique<KvCache>();
    grown->reserve(session_.backend_, hp, static_cast<int>(positions), session_.fused_attention());
    const std::vector<int> ids = active();
    if (cache_ && !ids.empty()) {
        // the positions in use of the lanes in use into the new cache, one copy per layer and
        // tensor (what lies past them was never written, or is stale)
        int64_t lo = 1;
        for (int id : ids) lo = std::max(lo, positions_used(slots_[id]->g));
        const KvCache & old = *cache_;
        const int64_t so = ids.back() + 1, hd = hp.head_dim, nkv = hp.n_head_kv;
        const size_t es = sizeof(float);
        auto lanes_of = [&](ggml_context * ctx, ggml_tensor * c, int64_t len, bool v) {
            if (old.fused()) return ggml_view_4d(ctx, c, hd, lo, nkv, so, hd * es, c->nb[2], len * hd * es, 0);
            if (!v) return ggml_view_3d(ctx, c, hd * nkv, lo, so, hd * nkv * es, len * hd * nkv * es, 0);
            return ggml_view_4d(ctx, c, lo, hd, nkv, so, c->nb[1], c->nb[2], len * es, 0);
        };
        session_.run(
            [&](ggml_context * ctx, ggml_cgraph * gf) {
                ggml_tensor * last = nullptr;
                for (size_t il = 0; il < old.k.size(); ++il) {
                    for (bool v : {false, true}) {
                        ggml_tensor *from = (v ? old.v : old.k)[il], *to = (v ? grown->v : grown->k)[il];
                        last = ggml_cpy(ctx, lanes_of(ctx, from, lane_len_, v), lanes_of(ctx, to, lane_len, v));
                        ggml_build_forward_expand(gf, last);
                    }
                }
                return last;
            },
            [](ggml_cgraph *) {});
    }
    cache_ = std::move(grown);
    lanes_ = lanes;
    lane_len_ = lane_len;
}

void Batch::remove(int id) { finish(slot(id, "remove")); }

void Batch::cancel(int id) { slot(id, "cancel").cancel.store(true); }

// As Session::end_generation: an outsized cache is given back once no slot holds a
// generation, an ordinary one kept for the next requests.
void Batch::finish(Slot & s) {
    s.used = false;
    s.g = GenerationState{};
    if (active().empty() && lane_len_ > kSteadyContext) {
        cache_.reset();
        lanes_ = 0;
        lane_len_ = 0;
    }
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
        // A slot waiting for streamed text sits the frame out (and the rest of this call: nothing
        // is appended during it), so that it holds up no other slot; cancelled, it stops there.
        std::vector<Slot *> stepping, going;
        for (Slot * s : live) {
            if (!waits_for_text(*s)) {
                stepping.push_back(s);
            } else if (s->cancel.load()) {
                s->g.total.stop_reason = "cancelled";
            }
        }
        if (std::any_of(stepping.begin(), stepping.end(), [](const Slot * s) { return s->g.need_step; })) {
            talker_step(stepping);
        }
        for (Slot * s : stepping) {
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
        r.result.needs_text = r.result.stop_reason.empty() && waits_for_text(s);
        if (!r.result.stop_reason.empty()) finish(s);
        out.push_back(std::move(r));
    }
    return out;
}

// One talker step over lanes 0..the highest slot in use, for the `stepping` slots that have a
// frame to feed. Any other slot (its prefill's logits are still to be sampled, or it waits for
// streamed text) sits it out: it writes its lane's last position,
// which no generation reaches (Batch::add); so does a free lane, at its first. Their outputs are
// dropped. Each slot's wall time is the whole batched step: what its request waited.
void Batch::talker_step(const std::vector<Slot *> & stepping) {
    const Session::Phase phase(session_, "talker");  // the profile's keys, as a lone generation's
    const Model & m = session_.model();
    const std::vector<int> ids = active();
    const int lanes = ids.back() + 1, groups = m.talker.n_code_groups, d = m.talker.n_embd();
    std::vector<char> steps(lanes, 0);
    for (int b = 0; b < lanes; ++b) {
        steps[b] = std::find(stepping.begin(), stepping.end(), slots_[b].get()) != stepping.end();
    }
    std::vector<int32_t> codes(static_cast<size_t>(lanes) * groups, 0), pos(lanes), attend(lanes, -1);
    std::vector<float> text(static_cast<size_t>(lanes) * d, 0.0f);
    int64_t widest = 1;
    for (int b = 0; b < lanes; ++b) {
        const Slot & s = *slots_[b];
        // a free lane writes and attends its first position (nobody's), a waiting slot's its
        // last (kv_step_inputs does the same with attend[b] = -1)
        pos[b] = s.used ? static_cast<int32_t>(lane_len_ - 1) : 0;
        if (!s.used || !steps[b] || !s.g.need_step) continue;
        const GenerationState & g = s.g;
        const int n_past = static_cast<int>(positions_used(g));
        if (n_past >= lane_len_ - 1) fail("batch step: position %d is outside the slot's cache", n_past);
        pos[b] = attend[b] = n_past;
        widest = std::max<int64_t>(widest, n_past + 1);
        for (int gi = 0; gi < groups; ++gi) codes[static_cast<size_t>(gi) * lanes + b] = g.frame[gi];
        std::copy_n(session_.step_text(g), d, text.begin() + static_cast<size_t>(b) * d);
    }
    const KvCache & cache = *cache_;
    const int64_t window = kv_window(widest, lane_len_);
    KvStepInputs kv;
    if (!cache.fused()) kv = kv_step_inputs(m.talker.tfm.hp, cache.n_ctx(), lane_len_, window, attend);
    auto t0 = Clock::now();
    Step & r = step_;
    if (r.stale(cache) || r.lanes != lanes || r.lane_len != lane_len_ || r.window != window) {
        session_.build_replay(r, cache, "batched talker step's", [&](ggml_context * ctx, ggml_cgraph * g) {
            ggml_tensor * out =
                build_talker_step_lanes(ctx, g, m.talker, m.code_predictor, cache, lanes, lane_len_, window);
            ggml_set_output(out);
            ggml_build_forward_expand(g, out);
        });
        r.lanes = lanes;
        r.lane_len = lane_len_;
        r.window = window;
    }
    ggml_cgraph * gf = r.gf;
    set_input(gf, kTalkerCodes, codes);
    set_input(gf, kTalkerText, text);
    set_input(gf, kTalkerPos, pos);
    if (!cache.fused()) set_kv_step_inputs(gf, kv, "talker");
    Session::ProfileClock clock(session_);
    session_.compute(r.sched, gf, clock);
    step_nodes_ = ggml_graph_n_nodes(gf);
    const std::vector<float> logits = read_tensor(gf, kTalkerLogits), hidden = read_tensor(gf, kTalkerHidden);
    const double ms = ms_since(t0);
    const size_t vocab = logits.size() / lanes;
    for (int b = 0; b < lanes; ++b) {
        if (attend[b] < 0) continue;
        GenerationState & g = slots_[b]->g;
        g.out.logits.assign(logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab);
        const auto h = hidden.begin() + static_cast<ptrdiff_t>(b) * d;
        g.out.hidden.assign(h, h + d);
        g.total.talker_ms += ms;
        g.need_step = false;
    }
}

void Batch::predict(const std::vector<Slot *> & s) {
    const Session::Phase phase(session_, "predictor");
    const Model & m = session_.model();
    const int B = static_cast<int>(s.size()), groups = m.talker.n_code_groups, d = m.talker.n_embd();
    auto t0 = Clock::now();
    if (predict_frame(s)) {
        const double ms = ms_since(t0);
        for (Slot * x : s) x->g.total.predictor_ms += ms;
        return;
    }
    std::vector<float> hidden(static_cast<size_t>(B) * d);
    for (int b = 0; b < B; ++b) std::copy(s[b]->g.out.hidden.begin(), s[b]->g.out.hidden.end(), hidden.begin() + b * d);
    std::vector<int32_t> code(B);
    for (int step = 0; step + 1 < groups; ++step) {
        for (int b = 0; b < B; ++b) code[b] = s[b]->g.frame[step];
        const std::vector<int32_t> pos = predictor_positions(step, B);
        ggml_cgraph * gf = session_.run(
            [&](ggml_context * ctx, ggml_cgraph * g) {
                return build_predictor_step_batch(ctx, g, m.code_predictor, m.talker, pred_cache_, step, B, groups);
            },
            [&](ggml_cgraph * g) {
                set_input(g, kPredCode, code);
                set_input(g, kPredPos, pos);
                if (step == 0) set_input(g, kPredHidden, hidden);
                if (step > 0 && !pred_cache_.fused()) {
                    set_kv_step_inputs(g, predictor_rows(m.code_predictor, pred_cache_, step, B, groups), "pred");
                }
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

bool Batch::predict_frame(const std::vector<Slot *> & s) {
    const SamplingParams & p = s.front()->g.p.subtalker;
    auto same = [&p](const Slot * x) {
        const SamplingParams & q = x->g.p.subtalker;
        return q.do_sample == p.do_sample && q.temperature == p.temperature && q.top_k == p.top_k && q.top_p == p.top_p;
    };
    // as Session::predict_frame: sampled on the device in the graph, or on the CPU by the host
    // sampler (each slot's own settings and RNG); a device that cannot sample keeps the steps
    const bool device = session_.device_sampling_ && device_samples(p) && std::all_of(s.begin(), s.end(), same);
    if (!device && session_.backend_ != session_.cpu_) return false;
    const Model & m = session_.model();
    const int B = static_cast<int>(s.size()), groups = m.talker.n_code_groups, d = m.talker.n_embd();
    Frame & f = frame_;
    if (f.stale_for(pred_cache_, device, p) || f.lanes != B) {
        session_.build_replay(f, pred_cache_, "batched code predictor's", [&](ggml_context * ctx, ggml_cgraph * gf) {
            build_predictor_frame(ctx, gf, m.code_predictor, m.talker, pred_cache_, &f.sampler, f.io,
                                  device ? &p : nullptr, B, groups);
        });
        f.lanes = B;
        f.on_device = device;
        f.params = p;
        f.uniform.assign(f.io.uniform ? static_cast<size_t>(groups - 1) * B : 0, 0.0f);
    }
    f.sampler.params.clear();
    f.sampler.rng.clear();
    for (Slot * x : s) {
        f.sampler.params.push_back(&x->g.p.subtalker);
        f.sampler.rng.push_back(&x->g.rng);
    }
    f.sampler.error = nullptr;
    // each slot's select_token draws, in step order from its own stream (Session::predict_frame)
    if (f.io.uniform) {
        for (int b = 0; b < B; ++b) {
            for (int step = 0; step + 1 < groups; ++step) {
                const double u = static_cast<double>(s[b]->g.rng() >> 11) * 0x1.0p-53;
                f.uniform[static_cast<size_t>(step) * B + b] = std::min(static_cast<float>(u), 0x1.fffffep-1f);
            }
        }
        ggml_backend_tensor_set(f.io.uniform, f.uniform.data(), 0, ggml_nbytes(f.io.uniform));
    }
    std::vector<float> hidden(static_cast<size_t>(B) * d);
    std::vector<int32_t> code0(B);
    for (int b = 0; b < B; ++b) {
        std::copy(s[b]->g.out.hidden.begin(), s[b]->g.out.hidden.end(), hidden.begin() + static_cast<ptrdiff_t>(b) * d);
        code0[b] = s[b]->g.frame[0];
    }
    ggml_backend_tensor_set(f.io.hidden, hidden.data(), 0, ggml_nbytes(f.io.hidden));
    ggml_backend_tensor_set(f.io.code0, code0.data(), 0, ggml_nbytes(f.io.code0));
    for (int step = 0; step + 1 < groups; ++step) {
        const std::vector<int32_t> pos = predictor_positions(step, B);
        ggml_backend_tensor_set(f.io.pos[step], pos.data(), 0, pos.size() * sizeof(int32_t));
        if (step > 0 && !pred_cache_.fused()) {
            set_kv_step_inputs(f.gf, predictor_rows(m.code_predictor, pred_cache_, step, B, groups),
                               format("pred.%d", step).c_str());
        }
    }
    Session::ProfileClock clock(session_);
    session_.compute(f.sched, f.gf, clock);
    if (f.sampler.error) std::rethrow_exception(f.sampler.error);
    std::vector<int32_t> codes(B);
    for (int step = 0; step + 1 < groups; ++step) {
        ggml_backend_tensor_get(f.io.codes[step], codes.data(), 0, codes.size() * sizeof(int32_t));
        for (int b = 0; b < B; ++b) s[b]->g.frame[step + 1] = codes[b];
    }
    return true;
}

}  // namespace qtts
