"""`qtts-cli bench memory`: peak RSS per weight type and mode (load only, synthesize from a saved
voice, clone a 10 s clip in context and synthesize), each in a fresh process."""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from .common import REF_TEXT, TEXT, clip, logger, machine, prepare, settings, worker


def memory_worker(gguf: str, threads: int, mode: str, voice_file: str | None,
                  precision: str = "auto") -> dict[str, Any]:
    import qtts

    from ..runtime.audio.audio import peak_rss_mb

    m = qtts.Model(gguf, n_threads=threads, device="cpu", voice_cache=False, precision=precision)
    r: dict[str, Any] = {"mode": mode, "precision": m.precision}
    if mode == "synthesize":
        voice = qtts.Voice.load(voice_file) if voice_file else None
        kw = {"voice": voice} if voice else {"speaker": m.speakers[0]} if m.speakers else {"instruct": "Calm."}
        m.synthesize(TEXT, **kw, **settings(100, 0))
    elif mode == "clone":
        m.synthesize(TEXT, ref_audio=(clip(10.0), 24000), ref_text=REF_TEXT, **settings(100, 0))
    memory = m.engine.memory()
    r.update(peak_rss_mb=peak_rss_mb(), file_mb=Path(gguf).stat().st_size / 1e6,
             weights_mb=m.engine.weight_bytes / 1e6, **{k + "_mb": v / 1e6 for k, v in memory.items()})
    return r


def run_memory(a: argparse.Namespace) -> dict[str, Any]:
    import qtts

    log = logger(a.quiet)
    out: dict[str, Any] = {"benchmark": "memory", "release": a.release, "threads": a.threads, **machine(),
                           "results": {}}
    for qtype in a.types:
        gguf = a.model or str(prepare(a.release, qtype, a.seed, log))
        rows = [worker("memory", gguf, str(a.threads), "load", "", a.precision)]
        with tempfile.TemporaryDirectory() as d:
            voice_file = ""
            if a.release.endswith("Base"):
                m = qtts.Model(gguf, n_threads=a.threads, device="cpu", voice_cache=False)
                voice = m.create_voice((clip(10.0), 24000), x_vector_only_mode=True)
                voice_file = str(voice.save(Path(d) / "v.qvoice"))
                del m
            rows.append(worker("memory", gguf, str(a.threads), "synthesize", voice_file, a.precision))
            if voice_file:
                rows.append(worker("memory", gguf, str(a.threads), "clone", "", a.precision))
        out["results"][qtype] = rows
        if log:
            log(f"{qtype}: " + json.dumps(rows))
    return out


def format_memory(r: dict[str, Any]) -> str:
    rows = [f"{'type':<6}{'mode':<12}{'precision':<11}{'file MB':>9}{'peak RSS MB':>13}{'KV MB':>8}"
            f"{'compute MB':>12}"]
    for qtype, items in r["results"].items():
        for x in items:
            rows.append(f"{qtype:<6}{x['mode']:<12}{x.get('precision', '-'):<11}{x['file_mb']:>9.0f}"
                        f"{x['peak_rss_mb']:>13.0f}{x['kv_cache_mb']:>8.1f}{x['compute_buffers_mb']:>12.1f}")
    return f"{r['release']} random weights, {r['threads']} threads\n" + "\n".join(rows)
