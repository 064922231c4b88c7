"""`qtts-cli bench serve`: continuous-batching throughput and time to first audio on a full-size
random-weight model (the models and caching of `bench speed`, common.prepare).

Per weight type, in a fresh process: B = 1, 2, 4, 8 requests of a fixed frame count (EOS masked)
stepped together, measured twice: codes only (the batched talker and code predictor, no vocoder)
and end to end through the Scheduler (the vocoder runs per sequence, so its share bounds the
end-to-end gain); then C = 1, 4, 8 concurrent streaming clients (threads calling submit and
iterating), whose time to first audio is reported as p50/p95.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

from .common import TEXT, clip, logger, machine, prepare, settings, worker

BATCHES = (1, 2, 4, 8)
CLIENTS = (1, 4, 8)


def _percentile(xs: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(xs), q))


def serve_worker(gguf: str, threads: int, frames: int, seed: int, rounds: int, device: str = "cpu") -> dict[str, Any]:
    import qtts

    from ..runtime.config import GenerationConfig
    from ..runtime.prompt import build_prompt, resolve_voice
    from ..runtime.scheduler import Scheduler

    m = qtts.Model(gguf, n_threads=threads, device=device, voice_cache=False)
    if m.variant == "base":
        kw: dict[str, Any] = {"voice": m.create_voice((clip(5.0), 24000), x_vector_only_mode=True)}
    else:
        kw = {"speaker": m.speakers[0]} if m.variant == "custom_voice" else {"instruct": "A calm voice."}
    m.synthesize("Warm up.", **kw, **settings(4, seed))
    fps = m.engine.frame_rate
    r: dict[str, Any] = {"codes": {}, "end_to_end": {}, "ttfa": {}}
    cond = resolve_voice(m.context, language="auto", speaker=kw.get("speaker"), instruct=kw.get("instruct"),
                         voice=kw.get("voice"))
    for b in BATCHES:  # codes only: the batched core loop
        batch = m.engine.batch(b)
        with m.engine.session() as s:
            prompt = build_prompt(m.context, s, TEXT, cond, non_streaming_mode=m.variant != "base")
            for i in range(b):
                cfg = GenerationConfig.resolve(m.generation_defaults, settings(frames, seed + i), seed + i, None)
                s.batch_add(batch, prompt.embeddings, prompt.trailing, cfg)
            t0 = time.perf_counter()
            n = 0
            while s.batch_active(batch):
                n += sum(len(c) for _, c, _, _ in s.batch_step(batch, 1))
            wall = time.perf_counter() - t0
        assert n == b * frames
        r["codes"][b] = {"frames_per_s": n / wall, "ms_per_frame": wall / frames * 1e3}
    for b in BATCHES:  # end to end: the scheduler, the vocoder per sequence
        with Scheduler(m, max_batch=b, max_queue=b) as sched:
            t0 = time.perf_counter()
            jobs = [sched.submit(TEXT, **kw, **settings(frames, seed + i)) for i in range(b)]
            audio = sum(job.result().duration for job in jobs)
            wall = time.perf_counter() - t0
        r["end_to_end"][b] = {"audio_s_per_s": audio / wall, "ms_per_frame": wall / frames * 1e3,
                              "rtf": wall / (audio / b)}
    for c in CLIENTS:  # streaming clients arriving together
        ttfa: list[float] = []
        with Scheduler(m, max_batch=max(CLIENTS), max_queue=c) as sched:
            for k in range(rounds):
                def client(i: int, k: int = k, ttfa: list[float] = ttfa) -> None:
                    job = sched.submit(TEXT, **kw, **settings(frames, seed + 100 * k + i))
                    for _ in job:
                        pass
                    ttfa.append(job.timings.time_to_first_audio_ms or 0.0)

                ts = [threading.Thread(target=client, args=(i,)) for i in range(c)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
        r["ttfa"][c] = {"p50_ms": _percentile(ttfa, 50), "p95_ms": _percentile(ttfa, 95), "n": len(ttfa)}
    r["frames"], r["frame_rate"] = frames, fps
    return r


def run_serve(a: argparse.Namespace) -> dict[str, Any]:
    log = logger(a.quiet)
    out: dict[str, Any] = {"benchmark": "serve", "release": a.release, "frames": a.frames, "threads": a.threads,
                           "seed": a.seed, "rounds": a.rounds, "device": a.device, **machine(), "results": {}}
    for qtype in a.types:
        gguf = a.model or str(prepare(a.release, qtype, a.seed, log))
        out["results"][qtype] = worker("serve", gguf, str(a.threads), str(a.frames), str(a.seed), str(a.rounds),
                                       a.device)
        if log:
            log(f"{qtype}: " + json.dumps(out["results"][qtype]))
    out["load_avg_end"] = os.getloadavg()[0]
    return out


def format_serve(r: dict[str, Any]) -> str:
    rows = [f"{r['release']} random weights, {r['frames']} frames per request, {r['threads']} threads, load "
            f"{r['load_avg']:.2f} -> {r['load_avg_end']:.2f}"]
    for qtype, x in r["results"].items():
        rows.append(f"{qtype}: {'B':>3}{'codes f/s':>11}{'x B=1':>7}{'codes ms/f':>12}"
                    f"{'audio s/s':>11}{'x B=1':>7}{'e2e ms/f':>10}")
        c1, e1 = x["codes"]["1"], x["end_to_end"]["1"]
        for b in map(str, BATCHES):
            c, e = x["codes"][b], x["end_to_end"][b]
            rows.append(f"{'':<{len(qtype) + 2}}{b:>3}{c['frames_per_s']:>11.1f}"
                        f"{c['frames_per_s'] / c1['frames_per_s']:>7.2f}{c['ms_per_frame']:>12.1f}"
                        f"{e['audio_s_per_s']:>11.2f}{e['audio_s_per_s'] / e1['audio_s_per_s']:>7.2f}"
                        f"{e['ms_per_frame']:>10.1f}")
        rows.append(f"{'':<{len(qtype) + 2}}time to first audio: " + ", ".join(
            f"{c} clients p50 {t['p50_ms']:.0f} / p95 {t['p95_ms']:.0f} ms" for c, t in x["ttfa"].items()))
    return "\n".join(rows)
