// qtts._core.Batch: continuous batching over a Session (runtime/batch.h).
#include <cstring>

#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "runtime/batch.h"
#include "runtime/error.h"

namespace py = pybind11;

namespace qtts {

namespace {

py::tuple slot_result(const Batch & b, const SlotResult & r) {
    const py::ssize_t groups = b.model().talker.n_code_groups;
    py::array_t<int32_t> codes({static_cast<py::ssize_t>(r.result.frames), groups});
    if (!r.result.codes.empty()) {
        std::memcpy(codes.mutable_data(), r.result.codes.data(), r.result.codes.size() * sizeof(int32_t));
    }
    py::dict timings;
    timings["prefill_ms"] = r.result.prefill_ms;
    timings["talker_ms"] = r.result.talker_ms;
    timings["predictor_ms"] = r.result.predictor_ms;
    timings["needs_text"] = r.result.needs_text;
    const std::string & reason = r.result.stop_reason;
    return py::make_tuple(r.slot, codes, reason.empty() ? py::object(py::none()) : py::object(py::str(reason)),
                          timings);
}

}  // namespace

void bind_batch(py::module_ & m) {
    py::class_<Batch>(m, "Batch")
        .def(py::init([](Session & s, int max_batch) { return std::make_unique<Batch>(s, max_batch); }),
             py::arg("session"), py::arg("max_batch"), py::keep_alive<1, 2>())
        .def_property_readonly("max_batch", &Batch::max_batch)
        .def_property_readonly("active", &Batch::active, "Ids of the slots holding a generation.")
        .def_property_readonly("talker_step_nodes", &Batch::talker_step_nodes,
                               "Nodes of the last batched talker step's graph (0 before the first step).")
        .def_property_readonly("cache_bytes", &Batch::cache_bytes, "Bytes of the shared talker KV cache now.")
        .def(
            "add",
            [](Batch & b, const FloatRows & prompt, const FloatRows & trailing, const GenerateParams & gp,
               bool text_open) {
                const int d = b.model().talker.n_embd();
                int n_prompt = 0, n_trailing = 0;
                std::vector<float> p = rows(prompt, d, "prompt", &n_prompt),
                                   t = rows(trailing, d, "trailing", &n_trailing);
                py::gil_scoped_release release;
                return b.add(p, n_prompt, t, n_trailing, gp, text_open);
            },
            py::arg("prompt"), py::arg("trailing"), py::arg("params"), py::arg("text_open") = false,
            "Prefill a generation into a free slot; its slot id. text_open: its text is streamed in (append).")
        .def(
            "append",
            [](Batch & b, int slot, const FloatRows & text, bool text_final, int frame_budget) {
                int n = 0;
                std::vector<float> t = rows(text, b.model().talker.n_embd(), "rows", &n);
                py::gil_scoped_release release;
                b.append(slot, t, n, text_final, frame_budget);
            },
            py::arg("slot"), py::arg("rows"), py::arg("text_final"), py::arg("frame_budget"),
            "Streamed text of a text-open slot: more trailing rows [n, D], whether they end the text, the "
            "grown frame budget.")
        .def("remove", &Batch::remove, py::arg("slot"), "Free a slot now.")
        .def("cancel", &Batch::cancel, py::arg("slot"), "Stop a slot at its next frame (stop reason 'cancelled').")
        .def(
            "step",
            [](Batch & b, int n_frames) {
                std::vector<SlotResult> rs;
                {
                    py::gil_scoped_release release;
                    rs = b.step(n_frames);
                }
                py::list out;
                for (const SlotResult & r : rs) out.append(slot_result(b, r));
                return out;
            },
            py::arg("n_frames"),
            "Up to n_frames frames of every active slot: [(slot, codes [n, groups], stop reason or None, timing "
            "totals)].");
}

}  // namespace qtts
