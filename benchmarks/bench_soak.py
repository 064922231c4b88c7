"""Soak: resident memory and open file descriptors over many synthesize calls on one model.

Calls cycle through short and long texts (long ones split into sentences by default), eager and
streamed, a stream closed after its first chunk, and an unsplit long text whose one prompt
outgrows the steady buffers (which must be given back afterwards). Every piece makes a fixed
number of frames (EOS masked). RSS, descriptors and the session's buffers are printed every
--every calls, then the drift after the warm-up cycle. This is a benchmark that prints figures,
not a test: nothing is asserted.

usage: python benchmarks/bench_soak.py MODEL.gguf [--calls 200] [--threads 1] [--frames 4]
       python benchmarks/bench_soak.py --release 0.6B-CustomVoice --type q8_0   (random full-size weights,
       built once and cached as `qtts-cli bench` does)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SHORT = "Hello there, this is a short sentence."
LONG = " ".join(f"Sentence number {i} keeps the talker busy for a little while." for i in range(12))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def workload(m: Any, frames: int, unsplit_chars: int) -> list[tuple[str, Callable[[int], None]]]:
    """The call kinds, cycled; each takes the call index (its seed)."""
    if m.variant == "base":
        t = np.arange(24000 * 3) / 24000
        clip = (0.3 * np.sin(2 * np.pi * 150 * t)).astype(np.float32)
        voice_kw: dict[str, Any] = {"voice": m.create_voice((clip, 24000), x_vector_only_mode=True)}
    elif m.variant == "custom_voice":
        voice_kw = {"speaker": m.speakers[0]}
    else:
        voice_kw = {"instruct": "A calm voice."}
    kw = dict(voice_kw, min_new_tokens=frames, max_new_tokens=frames + 1, frame_budget=None)

    def eager(text: str, **extra: Any) -> Callable[[int], None]:
        def call(i: int) -> None:
            m.synthesize(text, seed=i, **kw, **extra)
        return call

    def streamed(text: str) -> Callable[[int], None]:
        def call(i: int) -> None:
            for _ in m.stream(text, seed=i, **kw):
                pass
        return call

    def abandoned(i: int) -> None:
        it = m.stream(LONG, seed=i, **kw)
        next(it)
        it.close()

    return [("short eager", eager(SHORT)), ("short stream", streamed(SHORT)), ("long eager", eager(LONG)),
            ("long stream", streamed(LONG)), ("abandoned stream", abandoned),
            ("unsplit long", eager("x" * unsplit_chars, split_sentences=False))]


def sample(i: int, m: Any, t0: float) -> dict[str, Any]:
    mem = m.engine.memory()
    return {"call": i, "rss_mb": round(rss_mb(), 1), "fds": open_fds(), "kv_mb": round(mem["kv_cache"] / 1e6, 2),
            "compute_mb": round(mem["compute_buffers"] / 1e6, 2), "elapsed_s": round(time.perf_counter() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="a qtts GGUF file (or use --release)")
    ap.add_argument("--release", help="a released configuration with random weights, e.g. 0.6B-CustomVoice")
    ap.add_argument("--type", default="q8_0", help="weight type of the --release model (default q8_0)")
    ap.add_argument("--calls", type=int, default=200, help="synthesize calls in all (default 200)")
    ap.add_argument("--every", type=int, default=20, help="print a line every this many calls (default 20)")
    ap.add_argument("--threads", type=int, default=1, help="compute threads (default 1)")
    ap.add_argument("--frames", type=int, default=4, help="frames per text piece (default 4)")
    ap.add_argument("--unsplit-chars", type=int, default=3000,
                    help="length of the unsplit text, no punctuation or space (default 3000: more positions than "
                         "a session keeps buffers for on the tiny test models)")
    ap.add_argument("--json", type=Path, help="also write the samples and the drift here")
    a = ap.parse_args()
    if (a.model is None) == (a.release is None):
        ap.error("give a model file or --release, not both")
    import qtts

    path = a.model
    if a.release:
        from qtts.bench.common import prepare

        path = prepare(a.release, a.type, seed=0, log=lambda s: print(s, file=sys.stderr))
    before = {"rss_mb": round(rss_mb(), 1), "fds": open_fds()}
    m = qtts.Model(path, n_threads=a.threads, voice_cache=False)
    kinds = workload(m, a.frames, a.unsplit_chars)
    t0 = time.perf_counter()
    print(f"{Path(path).name}: {a.calls} calls of {', '.join(k for k, _ in kinds)} in turn, "
          f"{a.frames} frames per piece, {a.threads} thread(s); before loading: RSS {before['rss_mb']} MB, "
          f"{before['fds']} fds")
    samples = [sample(0, m, t0)]
    warm: dict[str, Any] | None = None
    for i in range(1, a.calls + 1):
        kinds[(i - 1) % len(kinds)][1](i)
        if i == len(kinds):
            warm = sample(i, m, t0)
        if i % a.every == 0 or i == a.calls:
            samples.append(sample(i, m, t0))
            s = samples[-1]
            print(f"call {s['call']:4d}  RSS {s['rss_mb']:8.1f} MB  fds {s['fds']:3d}  KV {s['kv_mb']:7.2f} MB  "
                  f"compute {s['compute_mb']:7.2f} MB  {s['elapsed_s']:7.1f} s", flush=True)
    last = samples[-1]
    warm = warm or samples[0]
    drift = {"rss_mb_since_load": round(last["rss_mb"] - samples[0]["rss_mb"], 1),
             "rss_mb_since_warmup": round(last["rss_mb"] - warm["rss_mb"], 1),
             "rss_mb_second_half": round(last["rss_mb"] - samples[len(samples) // 2]["rss_mb"], 1),
             "fds_since_load": last["fds"] - samples[0]["fds"],
             "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    print(f"drift: RSS {drift['rss_mb_since_load']:+.1f} MB since loading, {drift['rss_mb_since_warmup']:+.1f} MB "
          f"since the warm-up cycle (call {warm['call']}), {drift['rss_mb_second_half']:+.1f} MB over the "
          f"second half (since call {samples[len(samples) // 2]['call']}); fds {drift['fds_since_load']:+d}; "
          f"peak RSS {drift['peak_rss_mb']} MB")
    if a.json:
        a.json.write_text(json.dumps({"model": str(path), "calls": a.calls, "threads": a.threads,
                                      "frames": a.frames, "before_load": before, "samples": samples,
                                      "warmup": warm, "drift": drift}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
