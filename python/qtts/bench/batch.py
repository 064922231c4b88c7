"""`qtts-cli bench batch`: bulk-synthesis throughput of `qtts-cli batch` on a full-size
random-weight model (the models and caching of `bench speed`, common.prepare).

A manifest of --items items of about two sentences each, every item pinned to --frames frames
(random weights never emit EOS: min_new_tokens / max_new_tokens fix the length, as bench speed
does), in an x-vector voice made once. Each configuration runs the command in a fresh process
into a fresh folder: one worker (-t 2), --jobs 2 (1 thread each) and --ray with 2 actors (1 CPU
each). Reported: the process's wall time (model loads and Ray's start included), the synthesis
wall time and audio seconds per second from the command's summary, and the memory of each
worker process (RSS, PSS and anonymous MB from /proc/PID/smaps_rollup; not measured for Ray actors).

With --streams B, the batched streaming vocoder instead (docs/serving.md, "Batched vocoder"), in
a fresh process: a 100-frame offline decode; B streams of --frames random frames pushed in
Model.stream's chunks (1, 2, 4, then 8 frames), one stream after the other and all B together
(SessionHandle.decode_streams_push), each in ms per frame and stream; then end to end through the
Scheduler, B = 1 and B requests of --frames frames (EOS masked), in audio seconds per second, and
where a frame and stream went: each phase's graph computes (bench.profile.plumbing, graphs
computed whole) and the rest of the wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import TEXT, clip, logger, machine, prepare, settings, worker
from .profile import PHASE_ORDER, plumbing

WORDS = ("the quiet river carries light through morning fields while distant bells answer every patient "
         "traveller who waits beside old stone bridges and listens to stories of harvest rain and wind").split()
CONFIGS = {"1 worker": ["-t", "2"], "--jobs 2": ["--jobs", "2", "-t", "2"],
           "--ray 2 actors": ["--ray", "--jobs", "2", "-t", "2"]}


def sentences(i: int) -> str:
    """About two sentences of ordinary words, different per item."""
    def sentence(k: int) -> str:
        words = [WORDS[(k * 7 + j * 3) % len(WORDS)] for j in range(9 + k % 5)]
        return " ".join(words).capitalize() + "."
    return f"{sentence(2 * i)} {sentence(2 * i + 1)}"


def write_manifest(path: Path, items: int, frames: int, seed: int) -> None:
    with open(path, "w") as f:
        for i in range(items):
            f.write(json.dumps({"id": f"{i:05d}", "text": sentences(i), "seed": seed + i, "min_new_tokens": frames,
                                "max_new_tokens": frames + 1, "frame_budget": "none"}) + "\n")


def _voice(gguf: str, work: Path) -> Path:
    import soundfile as sf

    sf.write(work / "ref.wav", clip(5.0), 24000)
    out = work / "voice.qvoice"
    subprocess.run([sys.executable, "-m", "qtts.cli", "voice", "create", "-m", gguf, "--ref-audio",
                    str(work / "ref.wav"), "--x-vector-only", "-o", str(out), "-t", "2", "-q"], check=True)
    return out


def _chunks(frames: int) -> list[int]:
    """Model.stream's default chunk sizes for `frames` frames."""
    out, k = [], 1
    while sum(out) < frames:
        out.append(min(k, frames - sum(out)))
        k = min(2 * k, 8)
    return out


def streams_worker(gguf: str, threads: int, frames: int, streams: int, seed: int,
                   precision: str = "auto") -> dict[str, Any]:
    import numpy as np

    import qtts

    from ..runtime.scheduling.scheduler import Scheduler

    m = qtts.Model(gguf, n_threads=threads, voice_cache=False, precision=precision)
    rng = np.random.default_rng(seed)
    q = m.engine.num_code_groups
    codes = [rng.integers(0, 2048, (frames, q)) for _ in range(streams)]
    sizes = _chunks(frames)
    r: dict[str, Any] = {"streams": streams, "frames": frames, "chunks": sizes, "precision": m.precision}
    with m.engine.session() as s:
        s.decode(codes[0][:4])  # warm-up
        t0 = time.perf_counter()
        s.decode(rng.integers(0, 2048, (100, q)))
        r["offline_100_ms_per_frame"] = (time.perf_counter() - t0) * 1e3 / 100
        ids = [m.engine.new_stream_id() for _ in range(streams)]
        t0 = time.perf_counter()
        for sid, c in zip(ids, codes, strict=True):
            s.decode_stream_reset(stream=sid)
            at = 0
            for k in sizes:
                s.decode_stream_push(c[at:at + k], stream=sid)
                at += k
        r["alone_ms_per_frame"] = (time.perf_counter() - t0) * 1e3 / (frames * streams)
        t0 = time.perf_counter()
        for sid in ids:
            s.decode_stream_reset(stream=sid)
        at = 0
        for k in sizes:
            s.decode_streams_push([(sid, c[at:at + k]) for sid, c in zip(ids, codes, strict=True)])
            at += k
        r["together_ms_per_frame"] = (time.perf_counter() - t0) * 1e3 / (frames * streams)
        for sid in ids:
            s.decode_stream_close(sid)
    kw = {"voice": m.create_voice((clip(5.0), 24000), x_vector_only_mode=True)}
    m.synthesize("Warm up.", **kw, **settings(4, seed))
    r["end_to_end"] = {}
    for b in sorted({1, streams}):
        # the Scheduler closes (its last decodes done) before plumbing reads the profile
        with plumbing(m) as phases, Scheduler(m, max_batch=b, max_queue=b) as sched:
            t0 = time.perf_counter()
            jobs = [sched.submit(TEXT, **kw, **settings(frames, seed + i)) for i in range(b)]
            audio = sum(job.result().duration for job in jobs)
            wall = time.perf_counter() - t0
        n = frames * b
        r["end_to_end"][b] = {"audio_s_per_s": audio / wall, "vocoder_ms_per_frame": sum(
            job.timings.vocoder_ms_per_frame for job in jobs) / b, "wall_ms_per_frame": wall * 1e3 / n,
            "compute_ms_per_frame": {k: v.get("compute", 0.0) / n for k, v in phases.items()}}
    return r


def _where(b: int, v: dict[str, Any]) -> str:
    """Where a frame and stream of B went: each phase's graph computes, then the rest of the wall
    time (graph builds and inputs, sampling on the host, the Scheduler, the client side)."""
    got = v["compute_ms_per_frame"]
    parts = [f"{k} {got[k]:.1f}" for k in (*PHASE_ORDER, *sorted(set(got) - set(PHASE_ORDER))) if k in got]
    rest = v["wall_ms_per_frame"] - sum(got.values())
    return f"  B = {b}, ms per frame and stream: {v['wall_ms_per_frame']:.1f} = " + " + ".join(
        [*parts, f"outside the graphs {rest:.1f}"])


def run_bulk(a: argparse.Namespace) -> dict[str, Any]:
    log = logger(a.quiet)
    gguf = a.model or str(prepare(a.release, a.type, a.seed, log))
    if a.streams:
        out = {"benchmark": "batch --streams", "release": a.release, "type": a.type, "model": gguf,
               "threads": a.threads, "seed": a.seed, **machine()}
        out["results"] = worker("streams", gguf, str(a.threads), str(a.frames), str(a.streams), str(a.seed),
                                a.precision)
        out["load_avg_end"] = os.getloadavg()[0]
        return out
    out: dict[str, Any] = {"benchmark": "batch", "release": a.release, "type": a.type, "model": gguf, "items": a.items,
                           "frames": a.frames, "max_batch": a.max_batch, "seed": a.seed, "precision": a.precision,
                           **machine(), "results": {}}
    with tempfile.TemporaryDirectory(prefix="qtts-bench-batch-") as tmp:
        work = Path(tmp)
        manifest = work / "items.jsonl"
        write_manifest(manifest, a.items, a.frames, a.seed)
        voice = _voice(gguf, work)
        for name, flags in CONFIGS.items():
            cmd = [sys.executable, "-m", "qtts.cli", "batch", str(manifest), "-m", gguf, "--voice", str(voice),
                   "--output-dir", str(work / name.replace(" ", "_")), "--max-batch", str(a.max_batch),
                   "--precision", a.precision, "--json", "-q", *flags]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                raise RuntimeError(f"bench batch {name} failed:\n{p.stderr[-3000:]}")
            s = json.loads(p.stdout)
            out["results"][name] = {"process_wall_s": wall, "synthesis_wall_s": s["wall_seconds"],
                                    "audio_s": s["audio_seconds"], "audio_s_per_s": s["throughput"],
                                    "audio_s_per_process_s": s["audio_seconds"] / wall, "done": s["done"],
                                    "workers": s["workers"]}
            if log:
                log(f"{name}: " + json.dumps(out["results"][name]))
    out["load_avg_end"] = os.getloadavg()[0]
    return out


def format_bulk(r: dict[str, Any]) -> str:
    if "streams" in r["benchmark"]:
        x = r["results"]
        e = {int(b): v for b, v in x["end_to_end"].items()}
        precision = f", {x['precision']} precision" if "precision" in x else ""
        rows = [f"{r['release']} {r['type']} random weights, {x['streams']} streams x {x['frames']} frames, "
                f"{r['threads']} threads{precision}, load {r['load_avg']:.2f} -> {r['load_avg_end']:.2f}",
                f"vocoder ms per frame and stream: offline (100 frames) {x['offline_100_ms_per_frame']:.1f}, "
                f"streams alone {x['alone_ms_per_frame']:.1f}, together {x['together_ms_per_frame']:.1f}",
                "end to end (Scheduler): " + ", ".join(
                    f"B = {b}: {v['audio_s_per_s']:.2f} audio s/s (vocoder {v['vocoder_ms_per_frame']:.1f} ms/frame)"
                    for b, v in sorted(e.items())) + f"; x{e[max(e)]['audio_s_per_s'] / e[1]['audio_s_per_s']:.2f}"]
        rows += [_where(b, v) for b, v in sorted(e.items()) if "compute_ms_per_frame" in v]
        return "\n".join(rows)
    rows = [f"{r['release']} {r['type']} random weights, {r['items']} items x {r['frames']} frames, max batch "
            f"{r['max_batch']}, load {r['load_avg']:.2f} -> {r['load_avg_end']:.2f}",
            f"{'configuration':<16}{'wall s':>8}{'synth s':>9}{'audio s':>9}{'audio s/s':>11}  workers (RSS / PSS / "
            f"anonymous MB)"]
    for name, x in r["results"].items():
        mem = ", ".join(f"{w['rss_mb']:.0f} / {w['pss_mb']:.0f} / {w['anonymous_mb']:.0f}" for w in x["workers"]) or "-"
        rows.append(f"{name:<16}{x['process_wall_s']:>8.1f}{x['synthesis_wall_s']:>9.1f}{x['audio_s']:>9.1f}"
                    f"{x['audio_s_per_s']:>11.2f}  {mem}")
    return "\n".join(rows)
