"""`qtts-cli bench align`: what word timestamps cost (docs/aligner.md, "Cost"). The full-size
random-weight Qwen3-ForcedAligner-0.6B (convert/randaligner.py) aligns clips of a few lengths,
each length in a fresh process (load time, per-call time split into the host's log-mel and
prompt, the audio encoder, the decoder and the repair, peak RSS); the 0.6B Base model synthesizes
the same length of audio in another (its wall time for that many frames), and the ratio of the
two is the aligner's share of a synthesis."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from .common import TEXT, Log, clip, logger, machine, prepare, settings, worker

ALIGNER = "0.6B-ForcedAligner"
WORDS_PER_SECOND = 3.0  # about the talker's speaking rate on TEXT
FRAMES_PER_SECOND = 12.5


def prepare_aligner(qtype: str, seed: int, log: Log | None = None) -> Path:
    """The cached GGUF of the random-weight aligner at `qtype` (built on first use)."""
    from ..convert.checkpoint import convert
    from ..convert.randaligner import write_random_aligner
    from ..convert.registry import cache_dir

    root = cache_dir() / "bench" / f"{ALIGNER}-seed{seed}"
    out = root / f"{qtype}.gguf"
    if out.exists():
        return out
    hf = root / "hf"
    if not (hf / "config.json").exists():
        if log:
            log(f"writing a random {ALIGNER} checkpoint to {hf}")
        write_random_aligner(hf, seed=seed)
    convert(hf, out, qtype)
    return out


def _text(seconds: float) -> str:
    words = TEXT.split()
    n = max(1, round(seconds * WORDS_PER_SECOND))
    return " ".join(words[i % len(words)] for i in range(n))


def align_worker(gguf: str, threads: int, seconds: float, repeat: int, ops: str) -> dict[str, Any]:
    import numpy as np

    import qtts

    from ..runtime.audio import peak_rss_mb

    t0 = time.perf_counter()
    aligner = qtts.load_aligner(gguf, n_threads=threads, device="cpu", ops=ops)
    load_s = time.perf_counter() - t0
    text = _text(seconds)
    audio = (clip(seconds), 24000)
    runs, cpu = [], []
    for _ in range(repeat):
        c0 = time.process_time()
        words = aligner.align(audio, text, "english")
        cpu.append((time.process_time() - c0) * 1e3)
        runs.append(aligner.last_timings)
    best = min(runs, key=lambda t: t.total_ms)
    memory = aligner.engine.memory()
    return {"seconds": seconds, "words": len(words), "load_s": load_s, "total_ms": best.total_ms,
            "front_ms": best.front_ms, "encoder_ms": best.encoder_ms, "decoder_ms": best.decoder_ms,
            "repair_ms": best.repair_ms, "median_total_ms": float(np.median([t.total_ms for t in runs])),
            "cpu_ms": min(cpu),
            "peak_rss_mb": peak_rss_mb(), "weights_mb": aligner.engine.weight_bytes / 1e6,
            **{k + "_mb": v / 1e6 for k, v in memory.items()}}


def synth_worker(gguf: str, threads: int, seconds: float, repeat: int) -> dict[str, Any]:
    import qtts

    m = qtts.Model(gguf, n_threads=threads, device="cpu", voice_cache=False)
    voice = m.create_voice((clip(10.0), 24000), x_vector_only_mode=True) if m.variant == "base" else None
    kw: dict[str, Any] = {"voice": voice} if voice else {"speaker": m.speakers[0]} if m.speakers else {
        "instruct": "Calm."}
    frames = round(seconds * FRAMES_PER_SECOND)
    best, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        m.synthesize(_text(seconds), **kw, **settings(frames, 0))
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return {"seconds": seconds, "frames": frames, "synth_ms": best * 1e3, "synth_cpu_ms": cpu * 1e3}


def run_align(a: argparse.Namespace) -> dict[str, Any]:
    log = logger(a.quiet)
    gguf = a.model or str(prepare_aligner(a.type, a.seed, log))
    tts = a.tts_model or str(prepare("0.6B-Base", a.tts_type, a.seed, log))
    out: dict[str, Any] = {"benchmark": "align", "aligner": gguf, "aligner_type": a.type if not a.model else "file",
                           "tts": tts, "tts_type": a.tts_type if not a.tts_model else "file", "threads": a.threads,
                           "ops": a.ops, **machine(), "results": []}
    for seconds in a.seconds:
        row = worker("align", gguf, str(a.threads), str(seconds), str(a.repeat), a.ops)
        row.update(worker("align_synth", tts, str(a.threads), str(seconds), str(max(1, a.repeat // 2))))
        row["ratio"] = row["total_ms"] / row["synth_ms"]
        row["cpu_ratio"] = row["cpu_ms"] / row["synth_cpu_ms"]
        out["results"].append(row)
        if log:
            log(json.dumps(row))
    return out


def format_align(r: dict[str, Any]) -> str:
    head = (f"{'audio s':>8}{'words':>7}{'align ms':>10}{'log-mel+prompt':>16}{'encoder':>9}{'decoder':>9}"
            f"{'repair':>8}{'synth ms':>10}{'ratio':>7}{'CPU ratio':>11}{'peak RSS MB':>13}{'KV MB':>7}"
            f"{'compute MB':>12}")
    rows = [head]
    for x in r["results"]:
        rows.append(f"{x['seconds']:>8.1f}{x['words']:>7}{x['total_ms']:>10.0f}{x['front_ms']:>16.0f}"
                    f"{x['encoder_ms']:>9.0f}{x['decoder_ms']:>9.0f}{x['repair_ms']:>8.1f}{x['synth_ms']:>10.0f}"
                    f"{x['ratio']:>7.2f}{x['cpu_ratio']:>11.2f}{x['peak_rss_mb']:>13.0f}{x['kv_cache_mb']:>7.1f}"
                    f"{x['compute_buffers_mb']:>12.1f}")
    load = r["results"][0]["load_s"] if r["results"] else 0.0
    return (f"aligner {r['aligner_type']} ({r['ops']} ops), synthesis 0.6B-Base {r['tts_type']}, {r['threads']} "
            f"threads, {r['cpu']}, load average {r['load_avg']:.1f}; aligner load {load:.2f} s; ratio = align / "
            f"synthesis of the same audio (CPU ratio: of their CPU times)\n"
            + "\n".join(rows))
