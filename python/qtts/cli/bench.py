"""`qtts-cli bench speed|memory|quality|micro|matmul|ops|serve|batch`: reproducible benchmarks (speed:
bench_speed.py, matmul: bench_matmul.py, ops: bench_ops.py, serve: bench_serve.py, batch: bench_batch.py).

speed, memory and quality run full-size random-weight models. The model is built from a released configuration with random weights (qtts.randmodel, numpy
only), converted with qtts's converter and quantizer, and cached under $QTTS_CACHE/bench. Every
configuration runs in a fresh process, so loading counts and peak RSS is that configuration's.
Generation runs a fixed frame count (EOS masked) with a pinned seed. `--compare-reference` runs
the official qwen-tts on the same weights in the same invocation (needs the test extras).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import bench_matmul, bench_ops
from .args import vocoder_threads as vocoder_threads_arg

TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet "
        "forest while the sun goes down behind the hills.")
REF_TEXT = "This is the reference clip, spoken slowly and clearly."
TYPES = ("f32", "bf16", "q8_0", "q4_k")


def machine() -> dict[str, Any]:
    from ..runtime.engine import build_info

    native = build_info()
    return {"machine": platform.machine(), "cpu": cpu_model(), "l3_mb": l3_cache_mb(), "cpu_count": os.cpu_count(),
            "load_avg": os.getloadavg()[0], "cpu_features": native["cpu_features"], "ggml": native["ggml"],
            "python": platform.python_version()}


def cpu_model() -> str:
    """The processor's name as the OS reports it ('' where it does not)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def l3_cache_mb() -> float | None:
    """The last-level cache in MB (Linux sysfs; None elsewhere): weights that fit in it are read
    from it, not from memory, when a network reads them again (the code predictor's, 15 times a
    frame), so the bandwidth fractions of bench speed depend on it."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size", encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    if not m:
        return None
    return int(m.group(1)) * {"": 1e-6, "K": 1024 / 1e6, "M": 1024 ** 2 / 1e6, "G": 1024 ** 3 / 1e6}[m.group(2)]


def prepare(release: str, qtype: str, seed: int, log: Any = None) -> Path:
    """The cached GGUF of a random-weight release at `qtype` (built on first use)."""
    from ..convert.checkpoint import convert
    from ..convert.randmodel import write_random_checkpoint
    from ..convert.registry import cache_dir

    root = cache_dir() / "bench" / f"{release}-seed{seed}"
    out = root / f"{qtype}.gguf"
    if out.exists():
        return out
    hf = root / "hf"
    if not (hf / "config.json").exists():
        if log:
            log(f"writing a random {release} checkpoint to {hf}")
        write_random_checkpoint(release, hf, seed=seed)
    convert(hf, out, qtype)  # K-quants too: in one step, the bytes `quantize` would write
    return out


def _clip(seconds: float, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(24000 * seconds)) / 24000
    return (0.3 * np.sin(2 * np.pi * 150 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
            + 0.03 * rng.standard_normal(len(t))).astype(np.float32)


def _settings(frames: int, seed: int) -> dict[str, Any]:
    # EOS is masked until `frames` tokens exist and max_new_tokens stops right there
    return dict(seed=seed, min_new_tokens=frames, max_new_tokens=frames + 1, frame_budget=None)


def reference_worker(hf_dir: str, threads: int, frames: int, seed: int) -> dict[str, Any]:
    """The official qwen-tts on the same checkpoint: fp32, x-vector voice, same frame count."""
    import torch

    from .._reference import install
    from ..runtime.audio import peak_rss_mb

    install()  # placeholders for the reference's optional audio imports
    from qwen_tts import Qwen3TTSModel

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    ref = Qwen3TTSModel.from_pretrained(hf_dir, dtype=torch.float32, device_map="cpu")
    r: dict[str, Any] = {}
    t0 = time.perf_counter()
    ref.model.extract_speaker_embedding(_clip(30.0), 24000)
    r["speaker_encode_30s_ms"] = (time.perf_counter() - t0) * 1e3
    items = ref.create_voice_clone_prompt(ref_audio=(_clip(10.0), 24000), x_vector_only_mode=True)
    prompt = ref._prompt_items_to_voice_clone_prompt(items)
    ids = ref._tokenize_texts([ref._build_assistant_text(TEXT)])
    with torch.inference_mode():
        t0 = time.perf_counter()
        codes, _ = ref.model.generate(input_ids=ids, ref_ids=[None], voice_clone_prompt=prompt, languages=["auto"],
                                      non_streaming_mode=False, min_new_tokens=frames, max_new_tokens=frames + 1)
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref.model.speech_tokenizer.decode([{"audio_codes": codes[0]}])
        voc_s = time.perf_counter() - t0
    n = int(codes[0].shape[0])
    r.update(frames=n, generation_ms_per_frame=gen_s * 1e3 / n, vocoder_ms_per_frame=voc_s * 1e3 / n,
             rtf=(gen_s + voc_s) / (n * 0.08), peak_rss_mb=peak_rss_mb())
    return r


def memory_worker(gguf: str, threads: int, mode: str, voice_file: str | None) -> dict[str, Any]:
    import qtts
    from ..runtime.audio import peak_rss_mb

    m = qtts.Model(gguf, n_threads=threads, device="cpu", voice_cache=False)
    r: dict[str, Any] = {"mode": mode}
    if mode == "synthesize":
        voice = qtts.Voice.load(voice_file) if voice_file else None
        kw = {"voice": voice} if voice else {"speaker": m.speakers[0]} if m.speakers else {"instruct": "Calm."}
        m.synthesize(TEXT, **kw, **_settings(100, 0))
    elif mode == "clone":
        m.synthesize(TEXT, ref_audio=(_clip(10.0), 24000), ref_text=REF_TEXT, **_settings(100, 0))
    memory = m.engine.memory()
    r.update(peak_rss_mb=peak_rss_mb(), file_mb=Path(gguf).stat().st_size / 1e6,
             weights_mb=m.engine.weight_bytes / 1e6, **{k + "_mb": v / 1e6 for k, v in memory.items()})
    return r


def quality_worker(ggufs: list[str], threads: int, frames: int) -> dict[str, Any]:
    """Each type against the first (F32) file, teacher-forced on the F32 file's greedy codes:
    prefill logits cosine, then at every frame the cosine of the talker's logits and whether its
    greedy cb0 matches F32's, and the predictor's codes given F32's hidden state and cb0."""
    import numpy as np

    import qtts
    from ..runtime.prompt import build_prompt, resolve_voice
    from ..runtime.speech import default_non_streaming_mode

    models = [qtts.Model(g, n_threads=threads, device="cpu", voice_cache=False) for g in ggufs]
    ref = models[0]
    voice = ref.create_voice((_clip(10.0), 24000), x_vector_only_mode=True) if ref.variant == "base" else None
    kw = {"voice": voice} if voice else {"speaker": ref.speakers[0]} if ref.speakers else {"instruct": "Calm."}
    # no repetition penalty and EOS masked: greedy cb0 is then the argmax over the codebook ids
    greedy = dict(do_sample=False, subtalker_dosample=False, repetition_penalty=1.0, **_settings(frames, 0))
    greedy.pop("frame_budget")
    codes = ref.generate_codes(TEXT, frame_budget=None, **kw, **greedy).codes
    cond = resolve_voice(ref, language="auto", speaker=kw.get("speaker"), instruct=kw.get("instruct"), voice=voice)
    with ref.engine.session() as s:
        prompt = build_prompt(ref, s, TEXT, cond, non_streaming_mode=default_non_streaming_mode(ref.variant))
        pad = s.text_embed([ref.engine.text_ids["tts_pad"]])
    n = len(prompt.embeddings)

    def trace(m: Any) -> list[np.ndarray]:
        with m.engine.session() as s:
            out = [s.talker_prefill(prompt.embeddings, n + frames + 1)[0]]
            for f in range(frames - 1):
                text = prompt.trailing[f:f + 1] if f < len(prompt.trailing) else pad
                out.append(s.talker_step(codes[f].tolist(), text, n + f)[0])
        return out

    base = trace(ref)
    wav_ref = ref.decode(codes)
    rows: dict[str, Any] = {}
    for g, m in zip(ggufs, models):
        logits = trace(m)
        cos = [float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(logits, base)]
        agree = np.mean([int(np.argmax(a[:2048])) == int(c) for a, c in zip(logits, codes[:, 0])])
        wav = m.decode(codes)
        err = float(np.sum((wav - wav_ref) ** 2))
        snr = float("inf") if err == 0 else 10 * np.log10(float(np.sum(wav_ref ** 2)) / err)
        rows[Path(g).stem] = {"prefill_logits_cosine": cos[0], "min_step_logits_cosine": min(cos),
                              "cb0_agreement": float(agree), "vocoder_snr_db": snr,
                              "file_mb": Path(g).stat().st_size / 1e6}
    return {"frames": frames, "results": rows}


def run_quality(a: argparse.Namespace) -> dict[str, Any]:
    log = None if a.quiet else (lambda s: print(s, file=sys.stderr))
    types = ["f32", *[t for t in a.types if t != "f32"]]
    ggufs = [str(prepare(a.release, t, a.seed, log)) for t in types]
    r = _worker("quality", str(a.threads), str(a.frames), *ggufs)
    return {"benchmark": "quality", "release": a.release, "threads": a.threads, **machine(), **r}


def format_quality(r: dict[str, Any]) -> str:
    rows = [f"{'type':<8}{'file MB':>9}{'prefill cos':>13}{'min step cos':>14}{'cb0 agree':>11}{'vocoder SNR':>13}"]
    for name, x in r["results"].items():
        rows.append(f"{name:<8}{x['file_mb']:>9.0f}{x['prefill_logits_cosine']:>13.6f}"
                    f"{x['min_step_logits_cosine']:>14.6f}{x['cb0_agreement']:>11.2f}{x['vocoder_snr_db']:>13.1f}")
    return (f"{r['release']} random weights, teacher-forced on {r['frames']} greedy F32 frames\n" + "\n".join(rows))


def run_micro(a: argparse.Namespace) -> dict[str, Any]:
    """Weight-free stages, best of `repeat`: the sampler, the mel front end, resampling, PCM packing."""
    import numpy as np

    from ..runtime.audio import pcm16
    from ..runtime.engine import sample_tokens
    from ..runtime.mel import log_mel_spectrogram
    from ..runtime.refaudio import load_reference_audio

    rng = np.random.default_rng(a.seed)
    logits = rng.standard_normal((1000, 3072)).astype(np.float32) * 3
    wav44 = (0.1 * rng.standard_normal(44100 * 30)).astype(np.float32)
    wav24 = (0.1 * rng.standard_normal(24000 * 30)).astype(np.float32)
    cases = {
        "sample greedy, 3072 logits (us/token)": (lambda: sample_tokens(logits, False, 1.0, 0, 1.0, 0), 1e6 / 1000),
        "sample top-k 50, T 0.9 (us/token)": (lambda: sample_tokens(logits, True, 0.9, 50, 1.0, 0), 1e6 / 1000),
        "sample top-p 0.8, T 0.9 (us/token)": (lambda: sample_tokens(logits, True, 0.9, 0, 0.8, 0), 1e6 / 1000),
        "log-mel of 30 s (ms)": (lambda: log_mel_spectrogram(wav24), 1e3),
        "resample 30 s 44.1 -> 24 kHz (ms)": (lambda: load_reference_audio((wav44, 44100)), 1e3),
        "PCM16 packing of 30 s (ms)": (lambda: pcm16(wav24), 1e3),
    }
    results = {}
    for name, (fn, scale) in cases.items():
        fn()
        best = min(_timed(fn) for _ in range(a.repeat))
        results[name] = best * scale
    return {"benchmark": "micro", **machine(), "results": results}


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def format_micro(r: dict[str, Any]) -> str:
    return "\n".join(f"{k:<42}{v:>10.2f}" for k, v in r["results"].items())


def _worker(kind: str, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "qtts.cli.bench", kind, *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"benchmark worker {kind} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_memory(a: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    log = None if a.quiet else (lambda s: print(s, file=sys.stderr))
    out: dict[str, Any] = {"benchmark": "memory", "release": a.release, "threads": a.threads, **machine(),
                           "results": {}}
    for qtype in a.types:
        gguf = a.model or str(prepare(a.release, qtype, a.seed, log))
        rows = [_worker("memory", gguf, str(a.threads), "load", "")]
        with tempfile.TemporaryDirectory() as d:
            voice_file = ""
            if a.release.endswith("Base"):
                import qtts

                m = qtts.Model(gguf, n_threads=a.threads, device="cpu", voice_cache=False)
                voice_file = str(m.create_voice((_clip(10.0), 24000), x_vector_only_mode=True).save(Path(d) / "v.qvoice"))
                del m
            rows.append(_worker("memory", gguf, str(a.threads), "synthesize", voice_file))
            if voice_file:
                rows.append(_worker("memory", gguf, str(a.threads), "clone", ""))
        out["results"][qtype] = rows
        if log:
            log(f"{qtype}: " + json.dumps(rows))
    return out


def format_memory(r: dict[str, Any]) -> str:
    rows = [f"{'type':<6}{'mode':<12}{'file MB':>9}{'peak RSS MB':>13}{'KV MB':>8}{'compute MB':>12}"]
    for qtype, items in r["results"].items():
        for x in items:
            rows.append(f"{qtype:<6}{x['mode']:<12}{x['file_mb']:>9.0f}{x['peak_rss_mb']:>13.0f}"
                        f"{x['kv_cache_mb']:>8.1f}{x['compute_buffers_mb']:>12.1f}")
    return f"{r['release']} random weights, {r['threads']} threads\n" + "\n".join(rows)


def add_parser(sub: Any) -> None:
    b = sub.add_parser("bench", help="speed and memory benchmarks on full-size random-weight models")
    bs = b.add_subparsers(dest="bench_command", required=True)
    m = bs.add_parser("micro", help="weight-free micro-benchmarks: sampling, mel, resampling, PCM packing")
    m.add_argument("--repeat", type=int, default=5, help="timed repetitions per case, the best kept (default 5)")
    m.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    m.add_argument("--json", help="also write the results as JSON to this file")
    m.set_defaults(func=run)
    for name in ("speed", "memory", "quality"):
        p = bs.add_parser(name, help=f"{name} benchmark (each configuration in a fresh process)")
        p.add_argument("--release", default="0.6B-Base", help="released configuration to build (default 0.6B-Base)")
        p.add_argument("-m", "--model", help="benchmark this GGUF instead of a random-weight build")
        p.add_argument("--types", nargs="+", default=["q8_0", "q4_k"] if name == "speed" else list(TYPES),
                       choices=TYPES, help="weight types to measure, each in a fresh process (default: "
                                           f"{' '.join(['q8_0', 'q4_k'] if name == 'speed' else TYPES)})")
        if name == "quality":
            p.add_argument("--frames", type=int, default=50, help="greedy frames compared (teacher-forced)")
        p.add_argument("-t", "--threads", type=int, default=2, help="CPU threads (default 2)")
        p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default 0)")
        p.add_argument("--json", help="also write the results as JSON to this file")
        p.add_argument("-q", "--quiet", action="store_true", help="no per-configuration progress lines")
        if name == "speed":
            p.add_argument("--frames", type=int, default=100, help="frames generated (EOS masked; 12.5 per second)")
            p.add_argument("--compare-reference", action="store_true",
                           help="run the official qwen-tts (fp32) on the same weights in this run")
            p.add_argument("--matmul", choices=["native", "ggml"], default="native",
                           help="quantized weight kernels: the native quantized matmul (default) or ggml's mul_mat")
            p.add_argument("--profile", action="store_true",
                           help="stream once more with per-op timing: ops and overhead per phase (bench_profile)")
            p.add_argument("--vocoder-threads", type=vocoder_threads_arg, default=None, metavar="N|auto",
                           help="the pipelined run's vocoder threads (0: serial only; default auto: the split "
                                "the serial run's stage times suggest)")
            p.add_argument("--no-huge-pages", action="store_true",
                           help="keep the streamed weights mapped from the file (the model's huge_pages=False)")
        p.set_defaults(func=run)
    bench_matmul.add_parser(bs, run)
    bench_ops.add_parser(bs, TYPES)
    bs.choices["ops"].set_defaults(func=run)
    from .bench_serve import add_serve_parser  # it imports this module's helpers

    add_serve_parser(bs, run)
    from .bench_batch import add_batch_parser

    add_batch_parser(bs, run)


def run(a: argparse.Namespace) -> int:
    from .bench_batch import format_bulk, run_bulk
    from .bench_serve import format_serve, run_serve
    from .bench_speed import format_speed, run_speed

    runner, fmt = {"speed": (run_speed, format_speed), "memory": (run_memory, format_memory),
                   "quality": (run_quality, format_quality), "micro": (run_micro, format_micro),
                   "matmul": (bench_matmul.run_matmul, bench_matmul.format_matmul),
                   "ops": (bench_ops.run_ops, bench_ops.format_ops),
                   "serve": (run_serve, format_serve), "batch": (run_bulk, format_bulk)}[a.bench_command]
    r = runner(a)
    print(fmt(r))
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2) + "\n")
    return 0


def _main(argv: list[str]) -> None:
    kind, *args = argv
    if kind == "speed":
        from .bench_speed import speed_worker

        r = speed_worker(args[0], int(args[1]), int(args[2]), int(args[3]), args[4], int(args[5]), args[6] == "1",
                         args[7] == "1")
    elif kind == "reference":
        r = reference_worker(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif kind == "quality":
        r = quality_worker(args[2:], int(args[0]), int(args[1]))
    elif kind == "serve":
        from .bench_serve import main_worker

        r = main_worker(args)
    else:
        r = memory_worker(args[0], int(args[1]), args[2], args[3] or None)
    print(json.dumps(r))


if __name__ == "__main__":
    _main(sys.argv[1:])
