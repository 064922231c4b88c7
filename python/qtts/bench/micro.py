"""`qtts-cli bench micro`: the weight-free stages, best of `--repeat`: the sampler, the mel front
end, resampling, PCM packing."""
from __future__ import annotations

import argparse
from typing import Any

from .common import machine, timed


def run_micro(a: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from ..runtime.audio.audio import pcm16
    from ..runtime.audio.mel import log_mel_spectrogram
    from ..runtime.audio.refaudio import load_reference_audio
    from ..runtime.engine.engine import sample_tokens

    rng = np.random.default_rng(a.seed)
    logits = rng.standard_normal((1000, 3072)).astype(np.float32) * 3
    wav44 = (0.1 * rng.standard_normal(44100 * 30)).astype(np.float32)
    wav24 = (0.1 * rng.standard_normal(24000 * 30)).astype(np.float32)
    cases = {
        "sample greedy, 3072 logits (us/token)": (lambda: sample_tokens(logits, False, 1.0, 0, 1.0, 0), 1e6 / 1000),
        "sample top-k 50, T 0.9 (us/token)": (lambda: sample_tokens(logits, True, 0.9, 50, 1.0, 0), 1e6 / 1000),
        "sample top-p 0.8, T 0.9 (us/token)": (lambda: sample_tokens(logits, True, 0.9, 0, 0.8, 0), 1e6 / 1000),
        "log-mel of 30 s (ms)": (lambda: log_mel_spectrogram(wav24), 1e3),
        "resample 30 s 44.1 -> 24 kHz (ms)": (lambda: load_reference_audio((wav44, 44100)), 1e3),
        "PCM16 packing of 30 s (ms)": (lambda: pcm16(wav24), 1e3),
    }
    results = {}
    for name, (fn, scale) in cases.items():
        fn()
        best = min(timed(fn) for _ in range(a.repeat))
        results[name] = best * scale
    return {"benchmark": "micro", **machine(), "results": results}


def format_micro(r: dict[str, Any]) -> str:
    return "\n".join(f"{k:<42}{v:>10.2f}" for k, v in r["results"].items())
