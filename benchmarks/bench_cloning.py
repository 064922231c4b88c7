"""Voice-cloning front end speed on the full-size 0.6B-Base shapes: the speaker embedding (mel +
ECAPA-TDNN) of 10 s and 30 s clips and the codec encode of a 10 s clip. qtts runs on a zero-weight
stand-in (timing depends on shapes only), each thread count in a fresh process; with
--compare-reference the reference (qwen-tts 0.1.1, torch fp32, randomly initialised at the real
config) runs in the same invocation with the same thread count.

    python benchmarks/bench_cloning.py [--threads 1 2] [--repeat 3] [--compare-reference]
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
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vocoder import build_gguf  # noqa: E402  (the same stand-in builder)

CLIPS = {"speaker embedding 10 s": ("spk", 10), "speaker embedding 30 s": ("spk", 30), "codec encode 10 s": ("enc", 10)}


def _clip(seconds: int):
    import numpy as np

    rng = np.random.default_rng(seconds)
    return (0.1 * rng.standard_normal(24000 * seconds)).astype(np.float32)


def _best(fn, repeat: int) -> float:
    fn()  # warm-up: page in the weights, size the buffers
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def measure(gguf: str, threads: int, repeat: int) -> dict:
    import qtts

    m = qtts.Model(gguf, n_threads=threads, device="cpu", voice_cache=False)
    out = {"threads": threads, "load": os.getloadavg()[0]}
    for name, (kind, seconds) in CLIPS.items():
        wav = _clip(seconds)
        fn = (lambda w=wav: m.speaker_embedding(w)) if kind == "spk" else (lambda w=wav: m.encode(w))
        out[name] = _best(fn, repeat)
    return out


def measure_reference(threads: int, repeat: int) -> dict:
    sys.path.insert(0, str(ROOT))
    # the stubs go in before the reference is imported
    from tests.fixtures import refmodels as rc  # noqa: I001  (installs the reference's import stubs)
    import torch
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSSpeakerEncoderConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSSpeakerEncoder, mel_spectrogram

    torch.set_num_threads(threads)
    spk_config = Qwen3TTSSpeakerEncoderConfig(**rc.real_0b6_base_config_dict()["speaker_encoder_config"])
    spk = Qwen3TTSSpeakerEncoder(spk_config)
    st = rc.Qwen3TTSTokenizerV2Model(rc.Qwen3TTSTokenizerV2Config(**rc.real_12hz_tokenizer_config_dict())).eval()

    def embed(wav):  # extract_speaker_embedding without the surrounding talker
        mel = mel_spectrogram(torch.from_numpy(wav).unsqueeze(0), n_fft=1024, num_mels=128, sampling_rate=24000,
                              hop_size=256, win_size=1024, fmin=0, fmax=12000).transpose(1, 2)
        return spk(mel)

    def encode(wav):
        x = torch.from_numpy(wav).unsqueeze(0)
        return st.encode(x, padding_mask=torch.ones_like(x, dtype=torch.long))

    out = {"threads": threads, "load": os.getloadavg()[0]}
    with torch.inference_mode():
        for name, (kind, seconds) in CLIPS.items():
            wav = _clip(seconds)
            run = embed if kind == "spk" else encode
            out[name] = _best(lambda w=wav, run=run: run(w), repeat)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gguf", help="an existing full-size Base GGUF (default: build the 0.6B stand-in)")
    ap.add_argument("--compare-reference", action="store_true")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, n = a.worker.split(":")
        r = measure_reference(int(n), a.repeat) if kind == "ref" else measure(a.gguf, int(n), a.repeat)
        print(json.dumps(r))
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        gguf = a.gguf or str(build_gguf(Path(tmp) / "qwen3-tts-0.6b-base-f32.gguf", "0.6B-Base"))
        print("voice-cloning front end, full-size 0.6B-Base shapes, F32; best of", a.repeat, "(seconds)")
        print(f"{'impl':<10}{'threads':>8}" + "".join(f"{n:>24}" for n in CLIPS) + f"{'load':>6}")
        for n in a.threads:
            for impl in ("qtts", "reference") if a.compare_reference else ("qtts",):
                cmd = [sys.executable, __file__, "--worker", f"{'ref' if impl == 'reference' else 'qtts'}:{n}",
                       "--repeat", str(a.repeat)] + (["--gguf", gguf] if impl == "qtts" else [])
                r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
                r["impl"] = impl
                results.append(r)
                print(f"{impl:<10}{n:>8}" + "".join(f"{r[k]:>24.3f}" for k in CLIPS) + f"{r['load']:>6.2f}")
    if a.compare_reference:
        for n in a.threads:
            q, ref = (next(r for r in results if r["impl"] == i and r["threads"] == n) for i in ("qtts", "reference"))
            print(f"speed-up at {n} thread(s): " + ", ".join(f"{k} {ref[k] / q[k]:.2f}x" for k in CLIPS))
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": os.uname().machine, "cpus": os.cpu_count(),
                                            "results": results}, indent=2))


if __name__ == "__main__":
    main()
