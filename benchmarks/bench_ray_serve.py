"""The server on Ray Serve against the single process, with the same streaming clients
(qtts.bench.serve_clients: the same Poisson arrivals, requests and underrun rule as `qtts-cli
bench serve`) on loopback (docs/ray-serve.md):

* single: `qtts-cli serve -t T` (one process, T threads);
* serve x1: `qtts-cli serve --ray --replicas 1 -t T` (the same, behind Serve's proxy: its
  overhead on the first audio);
* serve xR: `qtts-cli serve --ray --replicas R -t T` (T / R threads each).

Each runs a sparse phase (requests rarely overlap: first audio is the path's latency) and a burst
(more clients than one server runs at once: throughput). Prints the figures; not a test.

    python benchmarks/bench_ray_serve.py --release 0.6B-CustomVoice --type q4_k -t 2 --replicas 2

`--paired N` measures the proxy's overhead alone: the single process and one replica behind
Serve run side by side, and N requests go to each in turns (A B, then B A, never two at once),
so both see the same machine; it prints each one's first audio and the paired differences.

    python benchmarks/bench_ray_serve.py -t 2 --paired 20
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from qtts.bench.common import TEXT, prepare
from qtts.bench.serve import summarize
from qtts.bench.serve_clients import poisson_arrivals, run_clients_process

SAMPLE_RATE, SAMPLES_PER_FRAME = 24000, 1920
_READY = re.compile(r"(Uvicorn running on|Ray Serve running on) http://127\.0\.0\.1:(\d+)")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(gguf: Path, log: Path, args: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    cmd = [sys.executable, "-m", "qtts.cli", "serve", "-m", str(gguf), "--port", str(port), *args]
    with open(log, "wb") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if _READY.search(log.read_text(errors="replace")):
            return p, port
        if p.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-3000:]}")
        time.sleep(0.5)
    p.kill()
    raise RuntimeError("the server did not start")


def _phase(port: int, spec: str, seed: int, duration: float) -> dict[str, Any]:
    """One phase of `spec` (clients,rate,frames) against the server on `port`."""
    clients, rate, frames = int(spec.split(",")[0]), float(spec.split(",")[1]), int(spec.split(",")[2])

    def body(i: int, n: int) -> dict[str, Any]:
        return {"model": "tts-1", "input": TEXT, "voice": "ryan", "response_format": "pcm", "stream_format": "audio",
                "seed": seed + i, "max_new_tokens": n + 1}

    run_clients_process(port, [body(0, 4), body(1, 4)], [0.0, 0.0], 300, SAMPLE_RATE)  # warm-up
    load0 = os.getloadavg()[0]
    streams = run_clients_process(port, [body(i, frames) for i in range(clients)],
                                  poisson_arrivals(clients, rate, seed), duration, SAMPLE_RATE)
    return asdict(summarize(0, streams, SAMPLES_PER_FRAME, SAMPLE_RATE, (load0, os.getloadavg()[0]), 0))


def _first_audio_ms(port: int, seed: int) -> float:
    """One streamed request's time to its first audio bytes."""
    body = {"model": "tts-1", "input": TEXT, "voice": "ryan", "response_format": "pcm", "stream_format": "audio",
            "seed": seed, "max_new_tokens": 4}
    t0 = time.perf_counter()
    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/audio/speech", json=body, timeout=600) as r:
        r.raise_for_status()
        first = None
        for chunk in r.iter_bytes():
            if chunk and first is None:
                first = (time.perf_counter() - t0) * 1000
    assert first is not None, "no audio"
    return first


def _paired(gguf: Path, a: argparse.Namespace) -> None:
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="qtts-bench-ray-") as tmp:
        servers = {name: _start(gguf, Path(tmp) / f"{name}.log", [*args, "-t", str(a.threads)])
                   for name, args in (("single", []), ("serve x1", ["--ray", "--replicas", "1"]))}
        try:
            ports = {name: port for name, (_, port) in servers.items()}
            for name in ports:  # warm-up
                _first_audio_ms(ports[name], 0)
            load0 = os.getloadavg()[0]
            ms: dict[str, list[float]] = {name: [] for name in ports}
            for i in range(a.paired):
                for name in (list(ports) if i % 2 == 0 else list(reversed(ports))):
                    ms[name].append(_first_audio_ms(ports[name], a.seed + i))
            load1 = os.getloadavg()[0]
        finally:
            for p, _ in servers.values():
                p.send_signal(signal.SIGTERM)
                p.wait(300)
    ms["serve x1 - single"] = (np.array(ms["serve x1"]) - np.array(ms["single"])).tolist()
    out = {name: {"p50_ms": float(np.percentile(v, 50)), "p95_ms": float(np.percentile(v, 95))}
           for name, v in ms.items()}
    print(f"first audio, {a.paired} requests each in turns, 4 frames, -t {a.threads}; load {load0:.2f} -> {load1:.2f}")
    for name, r in out.items():
        print(f"  {name:18} p50 {r['p50_ms']:8.1f} ms   p95 {r['p95_ms']:8.1f} ms")
    if a.json:
        Path(a.json).write_text(json.dumps({"release": a.release, "type": a.type, "threads": a.threads,
                                            "paired": a.paired, "load": [load0, load1], "first_audio": out,
                                            "raw_ms": ms}, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", default="0.6B-CustomVoice")
    ap.add_argument("--type", default="q4_k")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--sparse", default="12,0.25,12", help="clients,rate,frames of the latency phase")
    ap.add_argument("--burst", default="12,4,24", help="clients,rate,frames of the throughput phase")
    ap.add_argument("--duration", type=float, default=240.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paired", type=int, default=0, metavar="N",
                    help="only the proxy's overhead on first audio: N requests to each server in turns")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    gguf = prepare(a.release, a.type, a.seed, lambda s: print(s, file=sys.stderr))
    if a.paired:
        return _paired(gguf, a)
    configs = {"single": ["-t", str(a.threads)],
               "serve x1": ["--ray", "--replicas", "1", "-t", str(a.threads)],
               f"serve x{a.replicas}": ["--ray", "--replicas", str(a.replicas), "-t", str(a.threads)]}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="qtts-bench-ray-") as tmp:
        for name, args in configs.items():
            p, port = _start(gguf, Path(tmp) / "serve.log", [*args, "--max-batch", "8", "--max-queue", "64"])
            try:
                results[name] = {phase: _phase(port, spec, a.seed, a.duration)
                                 for phase, spec in (("sparse", a.sparse), ("burst", a.burst))}
            finally:
                p.send_signal(signal.SIGTERM)
                p.wait(300)
            print(f"{name}: " + json.dumps(results[name]), file=sys.stderr)
    print(f"{'':10} {'phase':7} {'done':>5} {'audio s/s':>9} {'ms/frame':>9} {'first p50':>9} {'p95 ms':>7} "
          f"{'load':>5}")
    for name, phases in results.items():
        for phase, r in phases.items():
            print(f"{name:10} {phase:7} {r['completed']:5d} {r['audio_s_per_s']:9.2f} {r['ms_per_frame'] or 0:9.1f} "
                  f"{r['first_audio_p50_ms'] or 0:9.0f} {r['first_audio_p95_ms'] or 0:7.0f} {r['load_avg_start']:5.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"release": a.release, "type": a.type, "threads": a.threads,
                                            "replicas": a.replicas, "results": results}, indent=2))


if __name__ == "__main__":
    main()
