// A Session holds everything mutable for running a Model: backends, the CPU threadpool,
// the scheduler and its compute buffers. Several sessions can share one Model.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "model.h"

namespace qtts {

class Session {
public:
    Session(std::shared_ptr<const Model> model, int n_threads);
    ~Session();
    Session(const Session &) = delete;
    Session & operator=(const Session &) = delete;

    const Model & model() const { return *model_; }
    int n_threads() const { return n_threads_; }
    std::string device() const;

    // P(ids): the talker's text embedding followed by the text projection MLP, [n, D] row-major.
    std::vector<float> text_embed(const std::vector<int32_t> & ids);

private:
    // Build a graph with `build`, allocate it, let `set_inputs` fill the inputs, compute.
    ggml_cgraph * run(const std::function<ggml_tensor *(ggml_context *)> & build,
                      const std::function<void(ggml_cgraph *)> & set_inputs);

    std::shared_ptr<const Model> model_;
    int n_threads_ = 1;
    ggml_backend_t backend_ = nullptr;      // on the model's device
    ggml_backend_t cpu_ = nullptr;          // fallback for ops the device lacks (same as backend_ on CPU)
    ggml_threadpool_t threadpool_ = nullptr;
    ggml_backend_sched_t sched_ = nullptr;
    ggml_context * graph_ctx_ = nullptr;
    std::vector<uint8_t> graph_meta_;
};

}  // namespace qtts
