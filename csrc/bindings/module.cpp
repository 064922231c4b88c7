// Python bindings (qtts._core). The GIL is released while ggml computes.
#include <cstring>

#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "runtime/error.h"

namespace py = pybind11;

namespace {

// messages quote names from the file, which a corrupt file can make invalid UTF-8
py::str message(const char * what) {
    const auto n = static_cast<Py_ssize_t>(std::strlen(what));
    return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(what, n, "replace"));
}

}  // namespace

PYBIND11_MODULE(_core, mod) {
    mod.doc() = "qtts native core: Qwen3-TTS on ggml";
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const qtts::Error & e) {
            PyErr_SetObject(PyExc_ValueError, message(e.what()).ptr());
        } catch (const qtts::EngineError & e) {
            // imported here: qtts.errors is pure Python and qtts imports this module first
            py::object cls = py::module_::import("qtts.errors").attr("QttsError");
            py::object err = cls(message(e.what()), py::cast(e.ggml_log));
            PyErr_SetObject(cls.ptr(), err.ptr());
        }
    });
    qtts::install_ggml_log();
    // ggml's queued log lines as (level, bytes), for logging.getLogger("qtts") (_native.py): bytes,
    // because a line can quote a corrupt file's strings, which need not be UTF-8
    mod.def("take_ggml_log", [] {
        py::list out;
        for (const auto & [level, text] : qtts::take_ggml_log()) out.append(py::make_tuple(level, py::bytes(text)));
        return out;
    });
    mod.def("set_ggml_debug", &qtts::set_ggml_debug, py::arg("on"));
    qtts::bind_params(mod);
    qtts::bind_model(mod);
    qtts::bind_session(mod);
    qtts::bind_vocoder(mod);
    qtts::bind_aligner(mod);
    qtts::bind_batch(mod);
    qtts::bind_tools(mod);
    qtts::bind_ops(mod);
}
