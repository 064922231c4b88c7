"""Talker and code-predictor speed on a full-size 0.6B model (ms per frame, fixed frame count).

The model is a stand-in with the released 0.6B-CustomVoice layout and all-zero weights (built
with the reference's classes on torch's meta device, so this needs the test dependencies):
matmul cost does not depend on values, and zero logits never sample EOS, so every run makes
exactly the requested frames. Each configuration runs in a fresh process.

usage: python benchmarks/bench_generate.py [--types q8_0 bf16 f32] [--threads 1 2] [--frames 30]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the official qwen-tts 0.1.1, fp32, 2 threads, on the development machine
REFERENCE_FP32 = {"talker_ms_per_frame": 116.0, "predictor_ms_per_frame": 242.0}

_CHILD = """
import json, sys, time, qtts
m = qtts.load(sys.argv[1], n_threads=int(sys.argv[2]))
m.generate_codes("Warm-up.", speaker="ryan", do_sample=False, subtalker_dosample=False, max_new_tokens=3)
r = m.generate_codes("Hello world, this is a speed test of the talker.", speaker="ryan", do_sample=False,
                     subtalker_dosample=False, max_new_tokens=int(sys.argv[3]) + 1, frame_budget=None)
print(json.dumps(r.timings))
"""


def build_model(work: Path, out_type: str) -> Path:
    sys.path.insert(0, str(ROOT))
    from qtts.convert.checkpoint import convert
    from tests.fixtures.build import ensure_fixtures
    from tests.fixtures.releases import write_release

    ckpt = work / "ckpt"
    if not ckpt.exists():
        write_release("0.6B-CustomVoice", ckpt, ensure_fixtures() / "tiny_base")
    return convert(ckpt, work / f"0.6B-CustomVoice-{out_type}.gguf", out_type)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", nargs="+", default=["q8_0", "bf16", "f32"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for t in args.types:
            path = build_model(Path(tmp), t)
            for n in args.threads:
                load0 = os.getloadavg()[0]
                t0 = time.perf_counter()
                out = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(n), str(args.frames)],
                                     capture_output=True, text=True, check=True)
                timings = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(dict(type=t, threads=n, wall_s=round(time.perf_counter() - t0, 2),
                                 load_avg_1m=round(load0, 2), **{k: round(v, 2) for k, v in timings.items()}))
                r = rows[-1]
                print(f"{t:>5} t={n}  prefill {r['prefill_ms']:7.1f} ms  talker {r['talker_ms_per_frame']:6.1f} "
                      f"ms/frame  predictor {r['predictor_ms_per_frame']:6.1f} ms/frame  "
                      f"(frames {r['frames']}, load {load0:.2f})", flush=True)
            path.unlink()
    ref = REFERENCE_FP32
    print(f"reference (qwen-tts fp32, 2 threads): talker {ref['talker_ms_per_frame']:.0f} ms/frame, "
          f"predictor {ref['predictor_ms_per_frame']:.0f} ms/frame")
    if args.json:
        args.json.write_text(json.dumps(dict(machine=platform.processor() or platform.machine(), cpus=os.cpu_count(),
                                             frames=args.frames, reference_fp32_2t=ref, results=rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
