"""`qtts-cli bench ops`: the audio networks on their two paths, native custom CPU ops against
portable stock ggml ops (docs/kernels.md, "Portable graphs"), in one process on `--device`
(default the CPU).

Both models load the same random-weight GGUF (common.prepare); each case alternates the paths
repetition by repetition, so that load from other processes hits both alike, and keeps each
path's best. Times are per 12.5 Hz frame: of decoded audio for the vocoder, of input audio for
the codec encoder and the speaker encoder.
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from .common import clip, logger, machine, prepare

PATHS = ("native", "portable")


def _best_ms(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    best = {k: float("inf") for k in fns}
    for fn in fns.values():
        fn()  # warm: compute buffers, caches
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], (time.perf_counter() - t) * 1e3)
    return best


def run_ops(a: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    import qtts

    log = logger(a.quiet)
    gguf = a.model or str(prepare(a.release, a.type, a.seed, log))
    models = {p: qtts.Model(gguf, n_threads=a.threads, device=a.device, voice_cache=False, ops=p) for p in PATHS}
    rate = models["native"].sample_rate
    hop = rate * 2 // 25  # samples per 12.5 Hz frame
    codes = np.random.default_rng(a.seed).integers(0, 2048, (a.frames, 16))
    wav = clip(a.frames * hop / rate, a.seed)
    out: dict[str, Any] = {"benchmark": "ops", "release": a.release, "type": a.type, "frames": a.frames,
                           "threads": a.threads, "device": a.device, **machine(),
                           "portable_weight_mb": models["portable"].engine.portable_weight_bytes / 2**20,
                           "results": {}}

    def on(path: str, work: Callable[[Any], Any]) -> Callable[[], Any]:
        def call() -> Any:
            with models[path].engine.session() as s:
                return work(s)
        return call

    cases: dict[str, Callable[[Any], Any]] = {"vocoder": lambda s: s.decode(codes),
                                              "codec encoder": lambda s: s.encode(wav)}
    if models["native"].variant == "base":
        from ..runtime.audio.mel import log_mel_spectrogram

        mel = log_mel_spectrogram(wav)
        cases["speaker encoder"] = lambda s: s.speaker_embed(mel)
    for name, work in cases.items():
        ms = _best_ms({p: on(p, work) for p in PATHS}, a.repeat)
        out["results"][name] = {p: ms[p] / a.frames for p in PATHS}
        if log:
            log(f"{name}: " + json.dumps(out["results"][name]))
    return out


def format_ops(r: dict[str, Any]) -> str:
    rows = [f"{'network':<18}{'native ms/frame':>17}{'portable ms/frame':>19}{'ratio':>8}"]
    for name, x in r["results"].items():
        rows.append(f"{name:<18}{x['native']:>17.2f}{x['portable']:>19.2f}{x['portable'] / x['native']:>8.2f}")
    return (f"{r['release']} {r['type']} random weights, {r['frames']} frames, {r['threads']} threads, "
            f"{r.get('device', 'cpu')}; "
            f"portable conv weights {r['portable_weight_mb']:.1f} MB\n" + "\n".join(rows))
