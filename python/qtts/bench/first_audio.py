"""`qtts-cli bench first-audio`: how soon streamed text is heard, over the HTTP server's
WebSocket route and over the Wyoming server, on the same model and machine (docs/integrations.md,
"Home Assistant"; docs/performance.md).

Each server runs as `qtts-cli serve` / `qtts-cli wyoming` would, in a process of its own, one after
the other. Per repetition a client sends the text word by word as an LLM would (start, then a
delta per word) and times from the moment the first word is complete (the delta after it has
been sent) to the first audio bytes; it then sends the rest and reads to the end. The figure is
the median, with the minimum and maximum, of --repeat repetitions after one unmeasured warm-up.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TEXT = "Hello there, this is a reply that an assistant writes one word at a time."
START_TIMEOUT_S = 300.0


def _deltas(text: str) -> list[str]:
    words = text.split(" ")
    return [words[0]] + [" " + w for w in words[1:]]


def _start(cmd: list[str], pattern: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with open(log, "wb") as f:
        process = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text(errors="replace"))
        if m:
            return process, m.group(1)
        if process.poll() is not None:
            raise RuntimeError(f"{cmd[3]} exited with {process.returncode}:\n{log.read_text()}")
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{cmd[3]} did not start within {START_TIMEOUT_S} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _websocket_once(url: str, a: argparse.Namespace) -> float:
    from websockets.sync.client import connect

    deltas = _deltas(TEXT)
    with connect(url, open_timeout=60) as ws:
        ws.send(json.dumps({"type": "start", "voice": a.voice, "model": "tts-1", "response_format": "pcm",
                            "seed": a.seed, "max_new_tokens": a.frames}))
        assert json.loads(ws.recv(timeout=120))["type"] == "started"
        ws.send(json.dumps({"type": "text", "delta": deltas[0]}))
        ws.send(json.dumps({"type": "text", "delta": deltas[1]}))  # the first word is complete
        t0 = time.perf_counter()
        while not isinstance(message := ws.recv(timeout=120), bytes):
            pass
        first = time.perf_counter() - t0
        assert message
        for d in deltas[2:]:
            ws.send(json.dumps({"type": "text", "delta": d}))
        ws.send(json.dumps({"type": "done"}))
        for _ in ws:
            pass
    return first


def _wyoming_once(port: int, voice: str) -> float:
    from wyoming.event import read_event, write_event
    from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

    deltas = _deltas(TEXT)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s, s.makefile("rwb") as f:
        write_event(SynthesizeStart(voice=SynthesizeVoice(name=voice)).event(), f)
        write_event(SynthesizeChunk(text=deltas[0]).event(), f)
        write_event(SynthesizeChunk(text=deltas[1]).event(), f)  # the first word is complete
        t0 = time.perf_counter()
        while (event := read_event(f)) is not None and event.type != "audio-chunk":
            pass
        first = time.perf_counter() - t0
        for d in deltas[2:]:
            write_event(SynthesizeChunk(text=d).event(), f)
        write_event(Synthesize(text=TEXT).event(), f)
        write_event(SynthesizeStop().event(), f)
        while (event := read_event(f)) is not None and event.type != "synthesize-stopped":
            pass
    return first


def _figures(times: list[float]) -> dict[str, float]:
    ms = [t * 1000 for t in times]
    return {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms)}


def run_first_audio(a: argparse.Namespace) -> dict[str, Any]:
    load = ["-m", a.model, "-t", str(a.threads), "--max-batch", "1"]
    out: dict[str, Any] = {"model": a.model, "voice": a.voice, "text": TEXT, "repeat": a.repeat,
                           "frames": a.frames, "threads": a.threads, "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        process, url = _start([sys.executable, "-m", "qtts.cli", "serve", *load, "--port", "0"],
                              r"Uvicorn running on (http://127\.0\.0\.1:\d+)", Path(tmp) / "serve.log")
        try:
            ws_url = url.replace("http://", "ws://") + "/v1/audio/speech/stream"
            times = [_websocket_once(ws_url, a) for _ in range(a.repeat + 1)][1:]
            out["websocket"] = _figures(times)
        finally:
            _stop(process)
        process, port = _start([sys.executable, "-m", "qtts.cli", "wyoming", *load, "--seed", str(a.seed),
                                "--max-new-tokens", str(a.frames), "--uri", "tcp://127.0.0.1:0", "-q"],
                               r"listening on tcp://127\.0\.0\.1:(\d+)", Path(tmp) / "wyoming.log")
        try:
            times = [_wyoming_once(int(port), a.voice) for _ in range(a.repeat + 1)][1:]
            out["wyoming"] = _figures(times)
        finally:
            _stop(process)
    out["load_after"] = os.getloadavg()[0]
    out["difference_ms"] = out["wyoming"]["median_ms"] - out["websocket"]["median_ms"]
    return out


def format_first_audio(r: dict[str, Any]) -> str:
    rows = [f"first audio after the first complete word, {r['repeat']} repetitions, {r['threads']} threads, "
            f"voice {r['voice']} ({r['model']}); load {r['load_before']:.1f} -> {r['load_after']:.1f}"]
    for route in ("websocket", "wyoming"):
        f = r[route]
        rows.append(f"  {route:9s}  median {f['median_ms']:7.1f} ms   min {f['min_ms']:7.1f}   max {f['max_ms']:7.1f}")
    rows.append(f"  wyoming - websocket: {r['difference_ms']:+.1f} ms (median)")
    return "\n".join(rows)
