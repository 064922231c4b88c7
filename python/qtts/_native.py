"""Import the compiled extension, preloading libggml where the RPATH cannot reach it.

The installed extension finds libggml through its RPATH. Builds loaded from elsewhere
(editable rebuilds, copied build trees) need the libraries preloaded from the installed
libggml-python package.
"""
from __future__ import annotations

import ctypes
import importlib
from pathlib import Path
from types import ModuleType

_PINNED_GGML = "0.20.2"


def _load() -> ModuleType:
    try:
        return importlib.import_module("qtts._core")
    except ImportError as e:
        if "libggml" not in str(e):
            raise
    import libggml

    root = Path(libggml.__file__).parent
    for sub in ("lib64", "lib"):
        if (root / sub / "libggml.so.0").exists():
            for name in ("libggml-base.so.0", "libggml-cpu.so.0", "libggml.so.0"):
                ctypes.CDLL(str(root / sub / name), mode=ctypes.RTLD_GLOBAL)
            break
    return importlib.import_module("qtts._core")


core = _load()
if not core.ggml_version().startswith(_PINNED_GGML):
    raise ImportError(f"qtts was built for ggml {_PINNED_GGML} but libggml {core.ggml_version()} is installed; "
                      "reinstall qtts so both come from the same libggml-python release")
