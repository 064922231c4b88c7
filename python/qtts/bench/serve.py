"""`qtts-cli bench serve`: the HTTP server under load, on a full-size random-weight model (the
models and caching of `bench speed`, common.prepare) or a given GGUF (docs/serving.md,
"Benchmarking the server"; docs/performance.md).

Per weight type, in a fresh process that loads the model once: for each B of --batches, a live
server (the app of `qtts-cli serve` under uvicorn in a thread, on 127.0.0.1 and a free port, its
Scheduler at max_batch B) and N streaming clients on loopback (serve_clients.py, in a process of
their own) arriving as a Poisson process, each asking for the same text and frame count as raw 16-bit PCM. Per B: the
aggregate audio seconds per wall second, each request's ms per frame, the first-audio
percentiles, the underruns, the load average before and after, and the node count of one batched
talker step with B sequences (Batch.talker_step_nodes).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .common import TEXT, clip, logger, machine, prepare
from .profile import plumbing
from .serve_clients import UNDERRUN_TOLERANCE_S, Stream, poisson_arrivals, run_clients_process

BATCHES = (1, 2, 4, 8)
VOICE_ID = "bench"
START_TIMEOUT_S = 60.0
WARMUP_FRAMES = 4
SHUTDOWN_S = 10.0  # after the clients: the longest uvicorn waits for responses still open


def parse_batches(value: str) -> list[int]:
    """--batches: comma-separated batch sizes, each 1..MAX_BATCH (the Scheduler's limit)."""
    from ..runtime.settings.config import check_int
    from ..runtime.settings.options import MAX_BATCH

    try:
        out = [int(x) for x in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None
    for b in out:
        try:
            check_int("batches", b, 1, MAX_BATCH)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return out


@dataclass
class BatchResult:
    """One B's measurement (times in ms unless named _s)."""
    batch: int
    requests: int  # the Poisson arrivals within --duration
    completed: int  # streams that ended by themselves within --duration
    rejected: int  # answered with an HTTP error (429 when the queue is full)
    failed: int  # no response: the connection failed
    timed_out: int  # still streaming (or queued) at the deadline, then closed
    audio_s: float  # audio received, all streams
    wall_s: float  # first request sent to last byte received
    audio_s_per_s: float
    frames_min: int
    frames_max: int
    ms_per_frame: float | None  # mean over completed streams: (last byte - request sent) / frames
    # from request sent to first audio byte, over the requests the server accepted; one that had
    # no audio by the deadline counts as infinitely late, and a percentile it reaches is None
    first_audio_p50_ms: float | None
    first_audio_p95_ms: float | None
    first_audio_max_ms: float | None
    no_audio: int  # accepted requests that had no audio by the deadline
    underruns: int  # streams whose received audio fell behind real time by over the tolerance
    worst_lag_ms: float  # the largest such shortfall over all streams
    load_avg_start: float
    load_avg_end: float
    talker_step_nodes: int


NEVER = 1e18  # ms: a request without audio by the deadline, in the percentiles


def _percentile(xs: list[float], q: float) -> float | None:
    import numpy as np

    if not xs:
        return None
    v = float(np.percentile(np.asarray(xs), q))
    return None if v >= NEVER / 2 else v


def summarize(batch: int, streams: list[Stream], samples_per_frame: int, sample_rate: int, load: tuple[float, float],
              nodes: int) -> BatchResult:
    """The figures of one B from its clients' records."""
    heard = [s for s in streams if s.first_audio_s is not None]
    done = [s for s in streams if s.status == 200 and not s.timed_out and s.samples > 0]
    audio = sum(s.samples for s in streams) / sample_rate
    wall = max((s.end_s for s in streams), default=0.0) - min((s.start_s for s in streams), default=0.0)
    frames = [s.samples // samples_per_frame for s in done]
    per_frame = [(s.end_s - s.start_s) * 1e3 / (s.samples / samples_per_frame) for s in done]
    accepted = [s for s in streams if s.status == 200 or s.timed_out]
    first = [NEVER if s.first_audio_s is None else s.first_audio_s * 1e3 for s in accepted]
    return BatchResult(
        batch=batch, requests=len(streams), completed=len(done),
        rejected=sum(s.status not in (0, 200) for s in streams),
        failed=sum(s.status == 0 and not s.timed_out for s in streams), timed_out=sum(s.timed_out for s in streams),
        audio_s=audio, wall_s=wall, audio_s_per_s=audio / wall if wall > 0 else 0.0,
        frames_min=min(frames, default=0), frames_max=max(frames, default=0),
        ms_per_frame=sum(per_frame) / len(per_frame) if per_frame else None,
        first_audio_p50_ms=_percentile(first, 50), first_audio_p95_ms=_percentile(first, 95),
        first_audio_max_ms=_percentile(first, 100), no_audio=sum(s.first_audio_s is None for s in accepted),
        underruns=sum(s.lag_s > UNDERRUN_TOLERANCE_S for s in heard),
        worst_lag_ms=max((s.lag_s for s in heard), default=0.0) * 1e3,
        load_avg_start=load[0], load_avg_end=load[1], talker_step_nodes=nodes)


def _voice(m: Any, voices: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A voice of this variant as request fields and as Model keyword arguments (a base model's
    x-vector voice is saved where the server's voice store reads it)."""
    from ..server.voices import SUFFIX

    if m.variant == "base":
        voice = m.create_voice((clip(5.0), 24000), x_vector_only_mode=True)
        voice.save(voices / f"{VOICE_ID}{SUFFIX}")
        return {"voice": VOICE_ID}, {"voice": voice}
    if m.variant == "custom_voice":
        return {"voice": m.speakers[0]}, {"speaker": m.speakers[0]}
    return {"instructions": "A calm voice."}, {"instruct": "A calm voice."}


def talker_step_nodes(m: Any, kw: dict[str, Any], b: int, seed: int) -> int:
    """Nodes of one batched talker step with b sequences in the batch (docs/serving.md,
    "Batching": the same for every b where the attention is one set of ops for all lanes)."""
    from ..runtime.settings.config import GenerationConfig
    from ..runtime.synthesis.prompt import build_prompt, resolve_voice

    cond = resolve_voice(m.context, language="auto", speaker=kw.get("speaker"), instruct=kw.get("instruct"),
                         voice=kw.get("voice"))
    batch = m.engine.batch(b)
    with m.engine.session() as s:
        prompt = build_prompt(m.context, s, "Count the nodes.", cond, non_streaming_mode=m.variant != "base")
        cfg = GenerationConfig.resolve(m.generation_defaults, dict(seed=seed, min_new_tokens=2, max_new_tokens=3,
                                                                    frame_budget=None), seed, None)
        for _ in range(b):
            s.batch_add(batch, prompt.embeddings, prompt.trailing, cfg)
        s.batch_step(batch, 2)  # the first frame samples the prefills' logits, the second steps the talker
    return batch.talker_step_nodes


@contextlib.contextmanager
def live_server(m: Any, max_batch: int, max_queue: int, voices: Path,
                pipelined_vocoder: bool | None = None) -> Iterator[tuple[int, Any]]:
    """`qtts-cli serve`'s app and Scheduler under uvicorn in a thread on 127.0.0.1: its port and
    the Scheduler.
    Leaving stops uvicorn (in-flight responses finish first) and the app's lifespan closes the
    scheduler."""
    import uvicorn

    from ..runtime.scheduling.scheduler import Scheduler
    from ..server import create_app

    scheduler = Scheduler(m, max_batch=max_batch, max_queue=max_queue, pipelined_vocoder=pipelined_vocoder)
    app = create_app(m, scheduler, model_id="bench", voices_dir=voices)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=SHUTDOWN_S))
    thread = threading.Thread(target=server.run, name="bench-uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the benchmark's server did not start")
            time.sleep(0.01)
        yield int(server.servers[0].sockets[0].getsockname()[1]), scheduler
    finally:
        server.should_exit = True
        thread.join()
        scheduler.close(cancel=True)


def serve_worker(gguf: str, threads: int, frames: int, seed: int, clients: int, rate: float, duration: float,
                 batches: list[int], device: str = "cpu", precision: str = "auto",
                 profile: bool = False, pipelined_vocoder: bool | None = None) -> dict[str, Any]:
    """profile: each B's result also has the session's time per phase while the clients ran
    (bench.profile.plumbing: build, alloc and compute ms, graph, node and split counts).
    pipelined_vocoder: the Scheduler's (None: by the device)."""
    import qtts

    from ..runtime.engine.engine import available_devices

    m = qtts.Model(gguf, n_threads=threads, device=device, voice_cache=False, precision=precision)
    spf, sr = m.engine.samples_per_frame, m.sample_rate
    arrivals = poisson_arrivals(clients, rate, seed)
    described = {d["name"]: d["description"] for d in available_devices()}
    r: dict[str, Any] = {"device": m.device, "device_description": described.get(m.device, ""), "devices": m.devices,
                         "precision": m.precision, "variant": m.variant, "frame_rate": m.engine.frame_rate,
                         "batches": {}}
    with tempfile.TemporaryDirectory(prefix="qtts-bench-serve-") as tmp:
        voice, kw = _voice(m, Path(tmp))

        def body(i: int, n: int) -> dict[str, Any]:  # request i, at most n frames
            return {"model": "bench", "input": TEXT, **voice, "response_format": "pcm", "stream_format": "audio",
                    "seed": seed + i, "max_new_tokens": n + 1}

        for b in batches:
            nodes = talker_step_nodes(m, kw, b, seed)
            with live_server(m, b, clients, Path(tmp), pipelined_vocoder) as (port, scheduler):
                r["pipelined_vocoder"] = scheduler.pipelined_vocoder
                run_clients_process(port, [body(0, WARMUP_FRAMES)], [0.0], START_TIMEOUT_S, sr)  # the first graphs
                load0 = os.getloadavg()[0]
                with plumbing(m) if profile else contextlib.nullcontext({}) as prof:
                    streams = run_clients_process(port, [body(i, frames) for i in range(clients)], arrivals, duration,
                                                  sr)
                load1 = os.getloadavg()[0]
            r["batches"][str(b)] = asdict(summarize(b, streams, spf, sr, (load0, load1), nodes))
            if profile:
                r["batches"][str(b)]["profile"] = prof
    return r


def run_serve(a: argparse.Namespace) -> dict[str, Any]:
    from .common import worker

    log = logger(a.quiet)
    out: dict[str, Any] = {"benchmark": "serve", "release": a.release, "model": a.model, "frames": a.frames,
                           "threads": a.threads, "seed": a.seed, "clients": a.clients, "rate": a.rate,
                           "duration": a.duration, "batches": a.batches, "device": a.device,
                           "precision": a.precision, "pipelined_vocoder": a.pipelined_vocoder,
                           "underrun_tolerance_ms": UNDERRUN_TOLERANCE_S * 1e3,
                           **machine(), "results": {}}
    for qtype in a.types if a.model is None else ["model"]:
        gguf = a.model or str(prepare(a.release, qtype, a.seed, log))
        out["results"][qtype] = worker("serve", gguf, str(a.threads), str(a.frames), str(a.seed), str(a.clients),
                                       str(a.rate), str(a.duration), ",".join(map(str, a.batches)), a.device,
                                       a.precision, {None: "auto", True: "on", False: "off"}[a.pipelined_vocoder])
        if log:
            log(f"{qtype}: " + json.dumps(out["results"][qtype]))
    out["load_avg_end"] = os.getloadavg()[0]
    return out


COLUMNS = (("B", "batch", "d", 4), ("sent", "requests", "d", 6), ("done", "completed", "d", 6),
           ("frames", "frames", "s", 8), ("audio s/s", "audio_s_per_s", ".2f", 11),
           ("ms/frame", "ms_per_frame", ".1f", 10), ("first p50", "first_audio_p50_ms", ".0f", 11),
           ("p95 ms", "first_audio_p95_ms", ".0f", 8), ("underruns", "underruns", "d", 11),
           ("worst lag ms", "worst_lag_ms", ".0f", 14), ("nodes", "talker_step_nodes", "d", 7),
           ("load", "load_avg_start", ".2f", 7), ("->", "load_avg_end", ".2f", 6))


def format_serve(r: dict[str, Any]) -> str:
    rows = [f"{r['model'] or r['release'] + ' random weights'}, {r['clients']} streaming clients at {r['rate']:g} "
            f"requests/s (Poisson, seed {r['seed']}), {r['frames']} frames per request, threads {r['threads']}, "
            f"underrun tolerance {r['underrun_tolerance_ms']:.0f} ms, load {r['load_avg']:.2f} -> "
            f"{r['load_avg_end']:.2f}"]
    for qtype, x in r["results"].items():
        voc = "pipelined" if x.get("pipelined_vocoder") else "between steps"
        rows.append(f"{qtype} on {x['device']} {x.get('device_description', '')} ({x['precision']}, vocoder {voc}):")
        rows.append("".join(f"{title:>{w}}" for title, _, _, w in COLUMNS))
        for b in x["batches"].values():
            row = {**b, "frames": f"{b['frames_min']}-{b['frames_max']}"}
            rows.append("".join(f"{'-':>{w}}" if row[key] is None else format(row[key], f">{w}{spec}")
                                for _, key, spec, w in COLUMNS))
            if b["rejected"] or b["failed"] or b["timed_out"]:
                rows.append(f"{'':>4}  {b['rejected']} refused, {b['failed']} failed, {b['timed_out']} cut at the "
                            f"{r['duration']:g} s deadline ({b['no_audio']} of them before any audio; a first-"
                            "audio figure they reach is shown as -)")
    return "\n".join(rows)
