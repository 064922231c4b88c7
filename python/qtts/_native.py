"""Import the compiled extension, preloading libggml where the RPATH cannot reach it.

The installed extension finds libggml through its RPATH (Linux, macOS). Builds loaded from
elsewhere (editable rebuilds, copied build trees) need the libraries preloaded from the installed
libggml-python package. Windows has no RPATH and does not search PATH for a module's DLLs: the
package's DLL folders are added to the search path before the import (docs/kernels.md, "Builds").
"""
from __future__ import annotations

import ctypes
import importlib
import logging
import os
import sys
from pathlib import Path
from types import ModuleType

_PINNED_GGML = "0.20.2"


def _add_windows_dll_dirs() -> None:
    import libggml

    root = Path(libggml.__file__).parent
    for sub in ("bin", "lib", "lib64"):
        if (root / sub).is_dir():
            os.add_dll_directory(str(root / sub))


def _load() -> ModuleType:
    if sys.platform == "win32":
        _add_windows_dll_dirs()
    try:
        return importlib.import_module("qtts._core")
    except ImportError as e:
        if "libggml" not in str(e):
            raise
    import libggml

    root = Path(libggml.__file__).parent
    suffix = ".0.dylib" if sys.platform == "darwin" else ".so.0"  # the wheels' SONAMEs
    for sub in ("lib64", "lib"):
        if (root / sub / f"libggml{suffix}").exists():
            for name in ("libggml-base", "libggml-cpu", "libggml"):
                ctypes.CDLL(str(root / sub / f"{name}{suffix}"), mode=ctypes.RTLD_GLOBAL)
            break
    return importlib.import_module("qtts._core")


core = _load()
if not core.ggml_version().startswith(_PINNED_GGML):
    raise ImportError(f"qtts was built for ggml {_PINNED_GGML} but libggml {core.ggml_version()} is installed; "
                      "reinstall qtts so both come from the same libggml-python release")


# ggml's own log lines (docs/architecture.md, "Errors"), by ggml_log_level: DEBUG, INFO, WARN, ERROR
_GGML_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


def sync_ggml_debug() -> None:
    """Have the core queue ggml's debug lines while the "qtts" logger is enabled for DEBUG
    (e.g. GGML_SCHED_DEBUG's scheduler splits); the engine calls this before each load and with
    each forward, so a level set between operations holds from the next one."""
    core.set_ggml_debug(logging.getLogger("qtts").isEnabledFor(logging.DEBUG))


def forward_ggml_log() -> None:
    """Hand the lines ggml logged since the last call to logging.getLogger("qtts"). The core
    queues them (ggml logs from whichever thread computes, with or without the GIL); the engine
    forwards them after each load and each operation."""
    log = logging.getLogger("qtts")
    for level, text in core.take_ggml_log():
        log.log(_GGML_LEVELS.get(level, logging.INFO), "ggml: %s", text.decode("utf-8", "replace"))
    sync_ggml_debug()
