// Continuous batching (docs/serving.md, "Batching"): up to max_batch generations in slots,
// stepped together a frame at a time, one talker step and one code-predictor pass for all of
// them; each slot keeps its own lane of one shared KV cache, positions, settings, random stream
// and stop reason, so that its codes are those of the single-sequence loop (Session::generate).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "runtime/generate.h"
#include "runtime/session.h"
#include "runtime/transformer.h"

namespace qtts {

// What one step() did for one slot: the frames it produced and, once it ended, why.
struct SlotResult {
    int slot = 0;
    GenerateResult result;  // codes of this step; stop_reason set once ended; timing totals so far
};

class Batch {
public:
    Batch(Session & session, int max_batch);
    ~Batch();
    Batch(const Batch &) = delete;
    Batch & operator=(const Batch &) = delete;

    const Model & model() const { return session_.model(); }
    int max_batch() const { return static_cast<int>(slots_.size()); }
    // Ids of the slots holding a generation.
    std::vector<int> active() const;

    // Prefill a generation (as Session::generate_begin) into a free slot; its id. text_open: its
    // trailing text is streamed in (append); until the text is complete the slot sits out every
    // frame whose text row has not come (or, with a frame budget, the budget's frame).
    int add(const std::vector<float> & prompt, int n_prompt, const std::vector<float> & trailing, int n_trailing,
            const GenerateParams & p, bool text_open = false);
    // Streamed text of a text-open slot, as Session::generate_append: more trailing rows
    // ([n, D]), the grown frame budget and, with text_final, the end of the text.
    void append(int slot, const std::vector<float> & rows, int n, bool text_final, int frame_budget);
    // Free a slot now, whatever its state.
    void remove(int slot);
    // Ask a slot (from any thread) to stop at its next frame with stop reason "cancelled".
    void cancel(int slot);

    // Up to n_frames frames for every active slot, stepped together; one result per slot that was
    // active. A slot that ended frees itself; a text-open slot that waits for text (it sat out,
    // or will sit out its next frame) has needs_text set.
    std::vector<SlotResult> step(int n_frames);

    // Nodes of the last batched talker step's graph: the same for every number of slots
    // (docs/serving.md, "Batching"); 0 before the first step.
    int talker_step_nodes() const { return step_nodes_; }
    // Bytes of the shared talker KV cache now.
    size_t cache_bytes() const { return cache_ ? cache_->bytes() : 0; }

private:
    struct Slot {
        bool used = false;
        std::atomic<bool> cancel{false};
        GenerationState g;
        GenerateResult chunk;
    };
    Slot & slot(int id, const char * what);
    // (Re)allocate the shared cache for at least `lanes` lanes of lane_len positions, the lanes'
    // contents kept; a ValueError naming the bytes when the device does not have them free.
    void reserve(int lanes, int64_t lane_len);
    void talker_step(const std::vector<Slot *> & stepping);
    void predict(const std::vector<Slot *> & s);
    // The code predictor's pass as one replayed graph with the sampling inside, where the session
    // samples on its device and every slot of the pass has the same settings (predict_frame).
    bool predict_frame(const std::vector<Slot *> & s);
    void finish(Slot & s);
    // The slot's next frame needs a text row (or a budget) that has not been appended yet.
    bool waits_for_text(const Slot & s) const;

    Session & session_;
    std::vector<std::unique_ptr<Slot>> slots_;
    // The talker's cache: slot s's positions are lane s, lane_len_ positions from s * lane_len_.
    std::unique_ptr<KvCache> cache_;
    int lanes_ = 0;
    int64_t lane_len_ = 0;
    int step_nodes_ = 0;
    KvCache pred_cache_;  // one lane of n_code_groups positions per slot
    // The batched frame graph of predict_frame, rebuilt when the number of lanes changes, or the
    // settings for a device's sampling (docs/serving.md, "Batching").
    struct Frame : Session::FrameGraph {
        int lanes = 0;
    };
    Frame frame_;
    // The talker's batched step, replayed while its lanes, lane length and window stay the same
    // (a graph of its own, so that a device can replay it: docs/architecture.md, "Graph replay").
    struct Step : Session::Replay {
        int lanes = 0;
        int64_t lane_len = 0, window = 0;
    };
    Step step_;
};

}  // namespace qtts
