"""`qtts-cli bench speed`: streaming speed per weight type, serial and pipelined, each in a fresh
process, with the figures that say how far each stage is from the machine's limits: the stream
bandwidth (1 and N threads) against the bytes a generated frame reads, and the vocoder's
GFLOP/s against one core's measured FP32 matrix-product rate (docs/serving.md, "Pipelined streaming")."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from typing import Any

from . import profile as bench_profile
from .common import REF_TEXT, TEXT, clip, logger, machine, prepare, settings, worker

BANDWIDTH_BYTES = 512 << 20
# Bytes per element of the weight types a talker or code predictor holds.
TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_K": 144 / 256, "q5_K": 176 / 256,
              "q6_K": 210 / 256}
KV_BYTES = 4  # the talker's KV cache entries (F32)
# The released codec decoder (docs/model.md, "Codec decoder"): two ×2 upsampling stages, then
# the vocoder's blocks at these rates.
UPSAMPLE = (2, 2)
VOCODER_RATES = (8, 5, 4, 3)


def stream_bandwidth(threads: int) -> dict[str, float]:
    """GB/s read by 1 and by `threads` threads."""
    from ..runtime.engine.engine import read_bandwidth

    out = {"1": read_bandwidth(BANDWIDTH_BYTES, 1)}
    if threads > 1:
        out[str(threads)] = read_bandwidth(BANDWIDTH_BYTES, threads)
    return out


def stage_bytes(tensors: list[tuple[str, str, int]], hparams: dict[str, dict], context: float) -> dict[str, float]:
    """Bytes one generated frame reads, per stage: the talker's layers and codec head once and its
    KV cache at `context` positions ("talker"); the code predictor's layers once per code group it
    predicts (15) and each of its LM heads once ("predictor"). Embedding rows and the predictor's
    16-position cache are left out (small). The talker's bytes come from memory every frame; the
    predictor reads its layers 15 times, from the last-level cache where they fit in it."""
    talker = cp = heads = 0.0
    for name, qtype, n in tensors:
        size = n * TYPE_BYTES.get(qtype, 4.0)
        if name.startswith("talker.blk.") or name in ("talker.codec_head.weight", "talker.output_norm.weight"):
            talker += size
        elif name.startswith("code_pred.lm_head."):
            heads += size
        elif name.startswith(("code_pred.blk.", "code_pred.output_norm", "code_pred.small_to_mtp")):
            cp += size
    t = hparams["talker"]
    kv = context * t["block_count"] * t["head_count_kv"] * t["head_dim"] * 2 * KV_BYTES
    return {"talker": talker + kv, "predictor": cp * (t["num_code_groups"] - 1) + heads}


def _rate(name: str) -> float | None:
    """Time steps per codec frame at which a codec decoder weight is applied (None: not a matmul)."""
    if not name.endswith(".weight") or "norm" in name:
        return None
    if m := re.match(r"codec_dec\.upsample\.(\d+)\.(\w+)\.", name):
        i, part = int(m.group(1)), m.group(2)
        steps = 1.0
        for r in UPSAMPLE[:i + (part != "conv")]:
            steps *= r
        return steps  # a transposed conv's MACs are per input step
    base = float(UPSAMPLE[0] * UPSAMPLE[1])
    if m := re.match(r"codec_dec\.voc\.blk\.(\d+)\.(\w+)\.", name):
        i, part = int(m.group(1)), m.group(2)
        for r in VOCODER_RATES[:i + (part != "up")]:
            base *= r
        return base
    if name.startswith("codec_dec.voc.out_conv"):
        for r in VOCODER_RATES:
            base *= r
        return base
    if name.startswith("codec_dec.voc."):
        return base
    if name.startswith(("codec_dec.pre_", "codec_dec.rvq_")):
        return 1.0
    return None


def vocoder_flop(tensors: list[tuple[str, str, int]]) -> float:
    """FLOP per frame of the codec decoder's convolutions, transposed convolutions and linears
    (2 per multiply-add; every weight element is one MAC per time step at its rate). Attention,
    SnakeBeta and norms are left out."""
    return sum(2.0 * n * r for name, _, n in tensors if (r := _rate(name)) is not None)


def sgemm_gflops() -> float:
    """The FP32 compute limit of one core, measured: the best of five 2048^3 single-precision
    matrix products through numpy's BLAS on one thread (tuned BLAS reaches 90-95% of the FMA
    peak; a nominal clock times FLOP per cycle misjudges turbo and virtual CPUs)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    code = "from qtts.bench.speed import _sgemm_once; print(_sgemm_once())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(p.stdout.strip().splitlines()[-1])


def _sgemm_once(n: int = 2048) -> float:
    import numpy as np

    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    a @ a
    best = min(_timed_matmul(a) for _ in range(5))
    return 2.0 * n ** 3 / best / 1e9


def _timed_matmul(a: Any) -> float:
    t0 = time.perf_counter()
    a @ a
    return time.perf_counter() - t0


def speed_worker(gguf: str, threads: int, frames: int, seed: int, matmul: str = "native",
                 vocoder_threads: int = 0, profile: bool = False, huge_pages: bool = True,
                 device: str = "cpu", precision: str = "auto") -> dict[str, Any]:
    import qtts

    from ..runtime.audio.audio import peak_rss_mb
    from ..runtime.engine.engine import set_matmul_path
    from ..runtime.synthesis.cloning import create_voice
    from ..runtime.synthesis.prompt import build_prompt, resolve_voice
    from ..runtime.synthesis.request import default_non_streaming_mode

    set_matmul_path(matmul)
    t0 = time.perf_counter()
    m = qtts.Model(gguf, n_threads=threads, device=device, voice_cache=False, vocoder_threads=vocoder_threads,
                   huge_pages=huge_pages, precision=precision)
    load_s = time.perf_counter() - t0
    r: dict[str, Any] = {"load_s": load_s, "devices": m.devices, "precision": m.precision,
                         "huge_page_mb": m.engine.huge_page_bytes / 1e6,
                         "packed_mb": m.engine.packed_bytes / 1e6}
    if m.variant == "base":
        create_voice(m.context, clip(2.0), None, True)  # warm-up: page in the encoders
        voice, ct = create_voice(m.context, clip(30.0), None, True)
        r["speaker_encode_30s_ms"] = ct.speaker_encode_ms
        _, ct = create_voice(m.context, clip(10.0), REF_TEXT, False)
        r["icl_encode_10s_ms"] = {"speaker": ct.speaker_encode_ms, "codec": ct.codec_encode_ms}
        kw: dict[str, Any] = {"voice": voice}
    else:
        kw = {"speaker": m.speakers[0]} if m.variant == "custom_voice" else {"instruct": "A calm voice."}
    m.synthesize("Warm up.", **kw, **settings(4, seed))
    t = qtts.Timings()
    n = sum(len(c.samples) for c in m.stream(TEXT, timings=t, **kw, **settings(frames, seed)))
    assert t.frames == frames and n == frames * m.engine.samples_per_frame
    gen = t.talker_ms_per_frame + t.predictor_ms_per_frame
    cond = resolve_voice(m.context, language="auto", speaker=kw.get("speaker"), instruct=kw.get("instruct"),
                         voice=kw.get("voice"))
    with m.engine.session() as s:
        prompt = build_prompt(m.context, s, TEXT, cond, non_streaming_mode=default_non_streaming_mode(m.variant))
    n_prompt = len(prompt.embeddings)
    tensors = m.engine.tensor_info()
    stages = stage_bytes(tensors, m.hparams, n_prompt + frames / 2)
    r.update(prefill_ms=t.prefill_ms, talker_ms_per_frame=t.talker_ms_per_frame,
             predictor_ms_per_frame=t.predictor_ms_per_frame, generation_ms_per_frame=gen,
             vocoder_ms_per_frame=t.vocoder_ms_per_frame, time_to_first_audio_ms=t.time_to_first_audio_ms,
             total_ms=t.total_ms, rtf=t.rtf, frames_per_s=frames / (t.total_ms / 1e3), frames=frames,
             vocoder_threads=t.vocoder_threads, prompt_positions=n_prompt,
             bytes_per_frame=sum(stages.values()), stage_bytes_per_frame=stages,
             vocoder_flop_per_frame=vocoder_flop(tensors), peak_rss_mb=peak_rss_mb(), **m.engine.memory())
    if profile:
        r["profile"] = bench_profile.collect(m, TEXT, {**kw, **settings(frames, seed)}, frames, r)
    return r


def _analysis(r: dict[str, Any], bandwidth: float, peak: float | None, threads: int) -> None:
    """Each generation figure as GB/s and a fraction of the N-thread bandwidth; the vocoder's
    GFLOP/s against the measured FP32 sgemm rate of the threads it ran on (above 1 where the fast
    precision runs its convs in BF16 tiles, docs/kernels.md "Precision on the CPU")."""
    r["generation_gb_per_s"] = r["bytes_per_frame"] / r["generation_ms_per_frame"] / 1e6
    r["bandwidth_fraction"] = r["generation_gb_per_s"] / bandwidth
    for stage in ("talker", "predictor"):
        rate = r["stage_bytes_per_frame"][stage] / r[f"{stage}_ms_per_frame"] / 1e6
        r[f"{stage}_gb_per_s"] = rate
        r[f"{stage}_bandwidth_fraction"] = rate / bandwidth
    r["vocoder_gflop_per_s"] = r["vocoder_flop_per_frame"] / r["vocoder_ms_per_frame"] / 1e6
    if peak:
        r["vocoder_peak_fraction"] = r["vocoder_gflop_per_s"] / (peak * (r["vocoder_threads"] or threads))


def run_speed(a: argparse.Namespace) -> dict[str, Any]:
    from ..runtime.engine.pipeline import candidate_split

    log = logger(a.quiet)
    peak = sgemm_gflops()
    out: dict[str, Any] = {"benchmark": "speed", "release": a.release, "frames": a.frames, "threads": a.threads,
                           "seed": a.seed, "matmul": a.matmul, "device": a.device, "precision": a.precision,
                           **machine(), "bandwidth_gb_per_s": stream_bandwidth(a.threads),
                           "sgemm_gflop_per_s_per_core": peak, "results": {}}
    bandwidth = out["bandwidth_gb_per_s"][str(a.threads) if a.threads > 1 else "1"]
    for qtype in a.types:
        gguf = a.model or str(prepare(a.release, qtype, a.seed, log))
        args = [gguf, str(a.threads), str(a.frames), str(a.seed), a.matmul]
        pages = str(int(not a.no_huge_pages))
        serial = worker("speed", *args, "0", str(int(a.profile)), pages, a.device, a.precision)
        _analysis(serial, bandwidth, peak, a.threads)
        v = a.vocoder_threads
        if v is None and a.threads > 1:
            v = candidate_split(a.threads, serial["generation_ms_per_frame"], serial["vocoder_ms_per_frame"])
        if v:
            piped = worker("speed", *args, str(v), "0", pages, a.device, a.precision)
            _analysis(piped, bandwidth, peak, a.threads)
            serial["pipelined"] = piped
        serial["split_chosen"] = v if v and serial["pipelined"]["rtf"] < serial["rtf"] else 0
        out["results"][qtype] = serial
        if log:
            log(f"{qtype}: {serial}")
    if a.compare_reference:
        from ..convert.registry import cache_dir

        hf = cache_dir() / "bench" / f"{a.release}-seed{a.seed}" / "hf"
        out["reference"] = worker("reference", str(hf), str(a.threads), str(a.frames), str(a.seed))
    out["load_avg_end"] = os.getloadavg()[0]
    return out


def format_speed(r: dict[str, Any]) -> str:
    keys = [("load_s", "load s", 2), ("huge_page_mb", "huge-page MB", 0), ("packed_mb", "packed MB", 0),
            ("prefill_ms", "prefill ms", 0), ("talker_ms_per_frame", "talker ms/f", 1),
            ("predictor_ms_per_frame", "predictor ms/f", 1), ("generation_ms_per_frame", "generation ms/f", 1),
            ("vocoder_ms_per_frame", "vocoder ms/f", 1), ("time_to_first_audio_ms", "first audio ms", 0),
            ("rtf", "RTF", 2), ("speaker_encode_30s_ms", "spk enc 30 s ms", 0), ("peak_rss_mb", "peak RSS MB", 0)]
    cols = list(r["results"]) + (["reference"] if "reference" in r else [])
    rows = [f"{'':<18}" + "".join(f"{c:>12}" for c in cols)]

    def row(label: str, vals: list[Any], digits: int) -> None:
        rows.append(f"{label:<18}" + "".join(f"{v:>12.{digits}f}" if isinstance(v, (int, float)) else f"{'-':>12}"
                                             for v in vals))

    for k, label, digits in keys:
        row(label, [(r["reference"] if c == "reference" else r["results"][c]).get(k) for c in cols], digits)
    res = [r["results"].get(c, {}) for c in cols]
    row("pipelined RTF", [x.get("pipelined", {}).get("rtf") for x in res], 2)
    row("pipe first aud ms", [x.get("pipelined", {}).get("time_to_first_audio_ms") for x in res], 0)
    row("vocoder threads", [x.get("pipelined", {}).get("vocoder_threads") for x in res], 0)
    row("split chosen", [x.get("split_chosen") for x in res], 0)
    row("GB per frame", [x["bytes_per_frame"] / 1e9 if "bytes_per_frame" in x else None for x in res], 2)
    row("generation GB/s", [x.get("generation_gb_per_s") for x in res], 1)
    row("of bandwidth", [x.get("bandwidth_fraction") for x in res], 2)
    for stage in ("talker", "predictor"):
        row(f"{stage} GB/s", [x.get(f"{stage}_gb_per_s") for x in res], 1)
        row("of bandwidth", [x.get(f"{stage}_bandwidth_fraction") for x in res], 2)
    row("vocoder GFLOP/s", [x.get("vocoder_gflop_per_s") for x in res], 1)
    row("of FP32 sgemm", [x.get("vocoder_peak_fraction") for x in res], 2)
    if "reference" in r:  # how many times faster than the reference, same run
        ref = r["reference"]
        for k, label in (("generation_ms_per_frame", "generation"), ("vocoder_ms_per_frame", "vocoder"),
                         ("rtf", "RTF"), ("speaker_encode_30s_ms", "spk enc 30 s")):
            rows.append(f"{'x ref ' + label:<18}" + "".join(
                f"{ref[k] / r['results'][c][k]:>12.2f}" if c != "reference" and r["results"][c].get(k) else f"{'':>12}"
                for c in cols))
    bw = ", ".join(f"{v:.1f} GB/s on {k}" for k, v in r["bandwidth_gb_per_s"].items())
    peak = r.get("sgemm_gflop_per_s_per_core")
    cpu = ", ".join(x for x in (r.get("cpu"), f"{r['l3_mb']:.0f} MB last-level cache" if r.get("l3_mb") else "") if x)
    head = (f"{r['release']} random weights, {r['frames']} frames, {r['threads']} threads, {r['matmul']} matmul, load "
            f"{r['load_avg']:.2f} -> {r['load_avg_end']:.2f}" + (f"\n{cpu}" if cpu else "") + f"\nstream bandwidth {bw}"
            + (f"; FP32 sgemm {peak:.0f} GFLOP/s per core (numpy's BLAS, 1 thread)" if peak else ""))
    profiles = [bench_profile.format_profile(q, x["profile"]) for q, x in r["results"].items() if "profile" in x]
    return "\n".join([head, *rows, *profiles])
