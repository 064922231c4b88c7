"""`qtts-cli bench align`: what word timestamps cost (docs/aligner.md, "Cost"). The full-size
random-weight Qwen3-ForcedAligner-0.6B (convert/randaligner.py) aligns clips of a few lengths,
each length in a fresh process (load time, per-call time split into the host's log-mel and
prompt, the audio encoder, the decoder and the repair, peak RSS); the 0.6B Base model synthesizes
the same length of audio in another (its wall time for that many frames), and the ratio of the
two is the aligner's share of a synthesis. Then the two together as a user runs them: the model
loaded with the aligner streams one sentence of that length with word_timestamps (stream_worker),
in one process, which gives the words' delay after the sentence's last audio and the ratio of
the two measured in the same run."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from .common import TEXT, Log, clip, logger, machine, prepare, settings, worker

ALIGNER = "0.6B-ForcedAligner"
TTS_RELEASE = "0.6B-CustomVoice"  # the synthesis measured against (a speaker: no voice to clone first)
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

    from ..runtime.audio.audio import peak_rss_mb

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


def _voice(m: Any) -> dict[str, Any]:
    """A request's voice for any variant: a speaker, a description, or an x-vector clone."""
    if m.variant == "base":
        return {"voice": m.create_voice((clip(10.0), 24000), x_vector_only_mode=True)}
    return {"speaker": m.speakers[0]} if m.speakers else {"instruct": "Calm."}


def synth_worker(gguf: str, threads: int, seconds: float, repeat: int) -> dict[str, Any]:
    import qtts

    m = qtts.Model(gguf, n_threads=threads, device="cpu", voice_cache=False)
    kw = _voice(m)
    frames = round(seconds * FRAMES_PER_SECOND)
    best, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        m.synthesize(_text(seconds), **kw, **settings(frames, 0))
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return {"seconds": seconds, "frames": frames, "synth_ms": best * 1e3, "synth_cpu_ms": cpu * 1e3}


def stream_worker(tts: str, aligner: str, threads: int, seconds: float, repeat: int, ops: str) -> dict[str, Any]:
    """The model loaded with the aligner streams one sentence of `seconds` with word_timestamps,
    `repeat` times after a first run that allocates (not counted): when its last audio chunk came
    (the synthesis), how long after that its words chunk came, and the aligner's share of it
    (Timings.align_ms; encoder, decoder and host from Aligner.last_timings). The run with the
    shortest delay is kept, and the ratio is of that run's two times."""
    import qtts

    from ..runtime.audio.audio import peak_rss_mb

    m = qtts.load(tts, n_threads=threads, device="cpu", voice_cache=False, ops=ops, aligner=aligner)
    kw = {**_voice(m), **settings(round(seconds * FRAMES_PER_SECOND), 0)}
    text = _text(seconds)
    runs = []
    for _ in range(repeat + 1):
        timings = qtts.Timings()
        t0 = time.perf_counter()
        last_audio = words_at = 0.0
        for chunk in m.stream(text, split_sentences=False, word_timestamps=True, timings=timings, **kw):
            if chunk.piece_text is not None:
                last_audio = time.perf_counter() - t0
            if chunk.words is not None:
                words_at = time.perf_counter() - t0
        t = m.aligner.last_timings
        runs.append({"stream_synth_ms": last_audio * 1e3, "words_after_ms": (words_at - last_audio) * 1e3,
                     "stream_align_ms": timings.align_ms, "stream_first_audio_ms": timings.time_to_first_audio_ms,
                     "stream_encoder_ms": t.encoder_ms, "stream_decoder_ms": t.decoder_ms,
                     "stream_host_ms": t.front_ms + t.repair_ms})
    best = min(runs[1:], key=lambda r: r["words_after_ms"])
    return {**best, "stream_ratio": best["stream_align_ms"] / best["stream_synth_ms"],
            "stream_peak_rss_mb": peak_rss_mb()}


def run_align(a: argparse.Namespace) -> dict[str, Any]:
    log = logger(a.quiet)
    gguf = a.model or str(prepare_aligner(a.type, a.seed, log))
    tts = a.tts_model or str(prepare(TTS_RELEASE, a.tts_type, a.seed, log))
    out: dict[str, Any] = {"benchmark": "align", "aligner": gguf, "aligner_type": a.type if not a.model else "file",
                           "tts": tts, "tts_type": a.tts_type if not a.tts_model else "file",
                           "synthesis": f"{TTS_RELEASE} {a.tts_type}" if not a.tts_model else Path(tts).name,
                           "threads": a.threads,
                           "ops": a.ops, **machine(), "results": []}
    for seconds in a.seconds:
        row = worker("align", gguf, str(a.threads), str(seconds), str(a.repeat), a.ops)
        row.update(worker("align_synth", tts, str(a.threads), str(seconds), str(max(1, a.repeat // 2))))
        row["ratio"] = row["total_ms"] / row["synth_ms"]
        row["cpu_ratio"] = row["cpu_ms"] / row["synth_cpu_ms"]
        row.update(worker("align_stream", tts, gguf, str(a.threads), str(seconds), str(max(1, a.repeat // 2)), a.ops))
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
    rows += ["", "streamed with word_timestamps, model and aligner in one process:",
             f"{'audio s':>8}{'synth ms':>10}{'align ms':>10}{'encoder':>9}{'decoder':>9}{'host':>6}{'ratio':>7}"
             f"{'words after ms':>16}{'first audio ms':>16}{'peak RSS MB':>13}"]
    for x in r["results"]:
        rows.append(f"{x['seconds']:>8.1f}{x['stream_synth_ms']:>10.0f}{x['stream_align_ms']:>10.0f}"
                    f"{x['stream_encoder_ms']:>9.0f}{x['stream_decoder_ms']:>9.0f}{x['stream_host_ms']:>6.0f}"
                    f"{x['stream_ratio']:>7.2f}{x['words_after_ms']:>16.0f}{x['stream_first_audio_ms']:>16.0f}"
                    f"{x['stream_peak_rss_mb']:>13.0f}")
    load = r["results"][0]["load_s"] if r["results"] else 0.0
    return (f"aligner {r['aligner_type']} ({r['ops']} ops), synthesis {r['synthesis']}, {r['threads']} threads, "
            f"{r['cpu']}, load average {r['load_avg']:.1f}; aligner load "
            f"{load:.2f} s; ratio = align / synthesis of the same audio (CPU ratio: of their CPU times)\n"
            + "\n".join(rows))
