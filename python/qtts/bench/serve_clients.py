"""The streaming clients of `bench serve` (serve.py): one thread per request, each sending its
POST /v1/audio/speech (raw 16-bit PCM, streamed) at its Poisson arrival time over a plain
HTTP/1.1 connection on loopback, and recording when each piece of audio arrived. They run in a
process of their own (this file as a script, run_clients_process), as real clients would: in the
server's process their reads would share its interpreter lock with the Scheduler's worker.

Underrun rule (docs/serving.md, "Benchmarking the server"): a player that starts at the first
audio byte has played, t seconds later, t seconds of audio; the stream underruns if at some byte's
arrival the audio received before it is shorter than the time since the first byte by more than
UNDERRUN_TOLERANCE_S. Checked at every arrival, where the shortfall is largest; a stream closed
at the deadline is judged on the pieces it received (it is counted as timed out anyway).
"""
from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

# A stall shorter than this is absorbed by a player's output buffer (audio devices commonly buffer
# 20-50 ms), so it is not counted as an underrun.
UNDERRUN_TOLERANCE_S = 0.05
READ_BYTES = 1 << 16


@dataclass
class Stream:
    """One client's request, in seconds of time.perf_counter unless said otherwise."""
    start_s: float  # request sent
    end_s: float  # last byte received (or the failure, or the deadline)
    status: int = 0  # HTTP status; 0: no response
    first_audio_s: float | None = None  # first audio byte, after start_s
    samples: int = 0  # 16-bit samples received
    lag_s: float = 0.0  # the largest shortfall of received audio behind real time (above)
    timed_out: bool = False
    error: str = ""


def poisson_arrivals(n: int, rate: float, seed: int) -> list[float]:
    """n arrival times (seconds from the first, which is at 0) of a Poisson process of `rate`
    requests per second: exponential gaps drawn from a seeded generator, so runs are repeatable."""
    import numpy as np

    gaps = np.random.default_rng(seed).exponential(1.0 / rate, max(n - 1, 0))
    return [0.0, *np.cumsum(gaps).tolist()][:n]


def _client(port: int, body: bytes, start_at: float, deadline: float, sample_rate: int) -> Stream:
    time.sleep(max(0.0, start_at - time.perf_counter()))
    start = time.perf_counter()
    s = Stream(start_s=start, end_s=start)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=max(deadline - start, 1e-3))
    bytes_per_s = 2.0 * sample_rate
    received = 0
    try:
        conn.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        s.status = resp.status
        if resp.status != 200:
            s.error = resp.read(2000).decode("utf-8", "replace")
            return s
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                s.timed_out = True
                break
            assert conn.sock is not None
            conn.sock.settimeout(remaining)  # each read ends by the deadline
            data = resp.read1(READ_BYTES)
            now = time.perf_counter()
            if not data:
                break
            if s.first_audio_s is None:
                s.first_audio_s = now - start
            else:
                s.lag_s = max(s.lag_s, now - start - s.first_audio_s - received / bytes_per_s)
            received += len(data)
    except TimeoutError:
        s.timed_out = True
    except (OSError, http.client.HTTPException) as e:
        s.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
        s.end_s = time.perf_counter()
        s.samples = received // 2
    return s


def run_clients(port: int, bodies: list[dict[str, Any]], arrivals: list[float], duration: float,
                sample_rate: int) -> list[Stream]:
    """Send bodies[i] at arrivals[i] seconds from now; requests due after `duration` are not sent
    and streams still open at `duration` are closed (the server then cancels their jobs), so the
    call returns within `duration` and a little."""
    t0 = time.perf_counter()
    deadline = t0 + duration
    due = [(b, a) for b, a in zip(bodies, arrivals, strict=True) if a < duration]
    out: list[Stream | None] = [None] * len(due)

    def one(i: int, body: dict[str, Any], at: float) -> None:
        out[i] = _client(port, json.dumps(body).encode(), t0 + at, deadline, sample_rate)

    threads = [threading.Thread(target=one, args=(i, b, a), daemon=True) for i, (b, a) in enumerate(due)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [s for s in out if s is not None]


def run_clients_process(port: int, bodies: list[dict[str, Any]], arrivals: list[float], duration: float,
                        sample_rate: int) -> list[Stream]:
    """run_clients in a process of its own (this file run as a script: no qtts import there)."""
    args = json.dumps(dict(port=port, bodies=bodies, arrivals=arrivals, duration=duration, sample_rate=sample_rate))
    p = subprocess.run([sys.executable, __file__], input=args, capture_output=True, text=True, timeout=duration + 60)
    if p.returncode != 0:
        raise RuntimeError(f"the benchmark's client process failed: {p.stderr[-2000:]}")
    return [Stream(**x) for x in json.loads(p.stdout)]


if __name__ == "__main__":
    print(json.dumps([asdict(x) for x in run_clients(**json.loads(sys.stdin.read()))]))
