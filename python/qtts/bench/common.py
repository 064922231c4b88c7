"""What the benchmarks share: the machine's description, the cached random-weight models, the
synthetic inputs and settings, and the fresh-process worker call."""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet "
        "forest while the sun goes down behind the hills.")
REF_TEXT = "This is the reference clip, spoken slowly and clearly."
TYPES = ("f32", "bf16", "q8_0", "q4_k")

Log = Callable[[str], None]


def logger(quiet: bool) -> Log | None:
    """Progress lines on stderr, or none."""
    return None if quiet else (lambda s: print(s, file=sys.stderr))


def machine() -> dict[str, Any]:
    from ..runtime.engine.engine import build_info

    native = build_info()
    return {"machine": platform.machine(), "cpu": cpu_model(), "l3_mb": l3_cache_mb(), "cpu_count": os.cpu_count(),
            "load_avg": os.getloadavg()[0], "cpu_features": native["cpu_features"], "ggml": native["ggml"],
            "python": platform.python_version()}


def cpu_model() -> str:
    """The processor's name as the OS reports it ('' where it does not)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def l3_cache_mb() -> float | None:
    """The last-level cache in MB (Linux sysfs; None elsewhere): weights that fit in it are read
    from it, not from memory, when a network reads them again (the code predictor's, 15 times a
    frame), so the bandwidth fractions of bench speed depend on it."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size", encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not m:
        return None
    return int(m.group(1)) * {"": 1e-6, "K": 1024 / 1e6, "M": 1024 ** 2 / 1e6, "G": 1024 ** 3 / 1e6}[m.group(2)]


def prepare(release: str, qtype: str, seed: int, log: Log | None = None) -> Path:
    """The cached GGUF of a random-weight release at `qtype` (built on first use)."""
    from ..convert.checkpoint import convert
    from ..convert.randmodel import write_random_checkpoint
    from ..convert.registry import cache_dir

    root = cache_dir() / "bench" / f"{release}-seed{seed}"
    out = root / f"{qtype}.gguf"
    if out.exists():
        return out
    hf = root / "hf"
    if not (hf / "config.json").exists():
        if log:
            log(f"writing a random {release} checkpoint to {hf}")
        write_random_checkpoint(release, hf, seed=seed)
    convert(hf, out, qtype)  # K-quants too: in one step, the bytes `quantize` would write
    return out


def clip(seconds: float, seed: int = 0) -> Any:
    """A 24 kHz test clip: a modulated 150 Hz tone with a little noise (float32)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(24000 * seconds)) / 24000
    return (0.3 * np.sin(2 * np.pi * 150 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
            + 0.03 * rng.standard_normal(len(t))).astype(np.float32)


def settings(frames: int, seed: int) -> dict[str, Any]:
    """Exactly `frames` frames: EOS is masked until `frames` tokens exist and max_new_tokens stops
    right there."""
    return dict(seed=seed, min_new_tokens=frames, max_new_tokens=frames + 1, frame_budget=None)


def worker(kind: str, *args: str) -> dict[str, Any]:
    """One measurement in a fresh process (`python -m qtts.bench KIND ARGS`): its JSON result."""
    cmd = [sys.executable, "-m", "qtts.bench", kind, *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"benchmark worker {kind} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of `fn` takes."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
