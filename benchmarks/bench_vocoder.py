"""Codec decoder (vocoder) speed on a full-size 0.6B stand-in checkpoint (zero weights: timing
depends on shapes only). Prints ms per frame for each thread count, each in a fresh process.

    python benchmarks/bench_vocoder.py [--frames 100] [--threads 1 2] [--repeat 3] [--gguf PATH]

The reference (qwen-tts 0.1.1, torch fp32, 2 threads) took 51 ms/frame on this project's 2-core
x86 machine (100 frames of the released codec's shapes); machines differ, so compare on one.
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

ROOT = Path(__file__).resolve().parents[1]


def build_gguf(out: Path, release: str = "0.6B-CustomVoice") -> Path:
    """A full-size zero-weight stand-in of `release`, converted to F32 (tests/fixtures/releases.py)."""
    sys.path.insert(0, str(ROOT))
    from qtts.convert.checkpoint import convert
    from tests.fixtures.build import ensure_fixtures
    from tests.fixtures.releases import write_release

    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "ck"
        write_release(release, ck, ensure_fixtures() / "tiny_base")
        convert(ck, out, "f32")
    return out


def measure(gguf: str, threads: int, frames: int, repeat: int) -> dict:
    import numpy as np

    from qtts.runtime.engine.engine import Engine

    engine = Engine(gguf, "cpu", threads)
    codes = np.random.default_rng(0).integers(0, 2048, (frames, engine.num_code_groups))
    times = []
    with engine.session() as s:
        s.decode(codes[:8])  # warm-up: page in the weights
        for _ in range(repeat):
            t = time.perf_counter()
            s.decode(codes)
            times.append(time.perf_counter() - t)
    return {"threads": threads, "best_ms_per_frame": 1e3 * min(times) / frames,
            "median_ms_per_frame": 1e3 * sorted(times)[len(times) // 2] / frames, "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gguf", help="an existing full-size GGUF (default: build the 0.6B stand-in)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(measure(a.gguf, a.worker, a.frames, a.repeat)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        gguf = a.gguf or str(build_gguf(Path(tmp) / "qwen3-tts-0.6b-f32.gguf"))
        print(f"codec decode of {a.frames} frames ({a.frames * 0.08:.1f} s of audio), full-size 0.6B shapes, F32")
        print(f"{'threads':>7} {'best ms/frame':>14} {'median ms/frame':>16} {'RTF':>6} {'load':>5}")
        for n in a.threads:
            cmd = [sys.executable, __file__, "--worker", str(n), "--gguf", gguf, "--frames", str(a.frames),
                   "--repeat", str(a.repeat)]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            print(f"{n:>7} {r['best_ms_per_frame']:>14.1f} {r['median_ms_per_frame']:>16.1f} "
                  f"{r['best_ms_per_frame'] / 80:>6.3f} {r['load']:>5.2f}")
        print("reference (torch fp32, 2 threads): 51 ms/frame; target <= 35")


if __name__ == "__main__":
    main()
