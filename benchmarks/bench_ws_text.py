"""Text streamed in over the server's WebSocket (/v1/audio/speech/stream, docs/server.md): first
audio after the first complete word, and playback gaps, as bench_stream_text.py measures them for
the library, through the server's Scheduler, the socket and the JSON messages.

The server runs in this process on a loopback port (create_app under uvicorn, in a thread); the
client replays bench_stream_text's ~60-word text as LLM deltas at a fixed rate from a thread
while it reads the audio. Three ways, the same voice and seed (so the same audio):

* whole: the text in one delta at once (the floor);
* deltas: each delta as it arrives;
* sentences: whole sentences, each when its last delta arrives (sentence buffering).

usage: python benchmarks/bench_ws_text.py [--model GGUF] [--threads 2] [--rate 30] [--repeats 2]
                                          [--frames N]
With no --model, the random-weight 0.6B-Base at Q4_K of `qtts-cli bench speed` (built once in
the qtts cache) speaks with an x-vector voice. The random weights decide when EOS comes (and
--frames caps the frames, as max_new_tokens); every way makes the same frames, since the same
text and seed give the same codes.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import threading
import time

from bench_stream_text import TEXT, deltas, first_word_index, replay


def start_server(model: object) -> tuple[str, object]:
    """create_app on a free loopback port; (http base URL, the uvicorn server)."""
    import uvicorn

    from qtts.runtime.scheduling.scheduler import Scheduler
    from qtts.server.app import create_app

    app = create_app(model, Scheduler(model, max_batch=2, max_queue=4), model_id="bench")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", server


def session(url: str, start: dict, parts: list[str], rate: float, release: set[int] | None,
            whole: bool) -> tuple[float, list[tuple[float, float]]]:
    """One session: (t0, [(arrival s, audio s)]) of its audio messages."""
    from websockets.sync.client import connect

    arrivals: list[tuple[float, float]] = []
    with connect(url.replace("http", "ws", 1) + "/v1/audio/speech/stream") as ws:
        ws.send(json.dumps(start))
        t0 = time.perf_counter()

        def send() -> None:
            for fragment in [TEXT] if whole else replay(parts, rate, t0, release):
                ws.send(json.dumps({"type": "text", "delta": fragment}))
            ws.send(json.dumps({"type": "done"}))

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        for message in ws:
            if isinstance(message, bytes):
                arrivals.append((time.perf_counter() - t0, len(message) / 2 / 24000))
            elif json.loads(message)["type"] in ("done", "error"):
                assert json.loads(message)["type"] == "done", message
        sender.join()
    return t0, arrivals


def gaps(arrivals: list[tuple[float, float]]) -> list[float]:
    start = arrivals[0][0]
    played_until, out = start, []
    for t, dur in arrivals:
        if t > played_until:
            out.append(t - played_until)
        played_until = max(played_until, t) + dur
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="a qtts GGUF (default: a random-weight 0.6B-Base at Q4_K)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rate", type=float, default=30.0, help="deltas per second")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--frames", type=int, help="at most this many frames a run (default: the text's budget)")
    a = ap.parse_args()

    import httpx
    import soundfile as sf

    import qtts
    from qtts.bench.common import clip, prepare

    path = a.model or str(prepare("0.6B-Base", "q4_k", 0))
    model = qtts.load(path, n_threads=a.threads)
    url, server = start_server(model)
    start = {"type": "start", "model": "bench", "response_format": "pcm", "seed": 1}
    if a.frames:
        start["max_new_tokens"] = a.frames + 1
    if model.variant == "base":
        buf = io.BytesIO()
        sf.write(buf, clip(3.0), 24000, format="WAV")
        r = httpx.post(f"{url}/v1/audio/voices", files={"audio": ("ref.wav", buf.getvalue(), "audio/wav")},
                       data={"x_vector_only": "true"}, timeout=300)
        start["voice"] = r.json()["id"]
    elif model.variant == "custom_voice":
        start["voice"] = model.speakers[0]
    else:
        start["instructions"] = "A clear voice."
    parts = deltas(TEXT)
    k_word = first_word_index(parts)
    ends = {k for k, p in enumerate(parts) if re.search(r"[.!?]\s*$", p)} | {len(parts) - 1}
    session(url, start, ["Warm up."], 1000.0, None, False)

    print(f"{os.path.basename(path)} ({model.variant}), {a.threads} threads, over the WebSocket; "
          f"{len(TEXT.split())} words as {len(parts)} deltas at {a.rate:g}/s (first word complete at "
          f"{(k_word + 1) / a.rate:.3f} s, text done at {len(parts) / a.rate:.2f} s)")
    print(f"{'':10} {'first audio s':>14} {'word->audio ms':>15} {'gaps':>5} {'gap total ms':>13} "
          f"{'gap max ms':>11} {'audio s':>8} {'done s':>7} {'load':>5}", flush=True)
    for _ in range(a.repeats):
        for name in ("whole", "deltas", "sentences"):
            _, arrivals = session(url, start, parts, a.rate, ends if name == "sentences" else None, name == "whole")
            g = gaps(arrivals)
            first = arrivals[0][0]
            w2a = "-" if name == "whole" else f"{(first - (k_word + 1) / a.rate) * 1e3:.0f}"
            print(f"{name:10} {first:14.3f} {w2a:>15} {len(g):5d} {sum(g) * 1e3:13.0f} {max(g, default=0) * 1e3:11.0f} "
                  f"{sum(d for _, d in arrivals):8.2f} {arrivals[-1][0]:7.2f} {os.getloadavg()[0]:5.2f}", flush=True)
    server.should_exit = True  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
