"""`qtts-cli bench quality`: each weight type against F32, teacher-forced on F32's greedy codes,
in a fresh process."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import TEXT, clip, logger, machine, prepare, settings, worker


def quality_worker(ggufs: list[str], threads: int, frames: int) -> dict[str, Any]:
    """Each type against the first (F32) file, teacher-forced on the F32 file's greedy codes:
    prefill logits cosine, then at every frame the cosine of the talker's logits and whether its
    greedy cb0 matches F32's, and the predictor's codes given F32's hidden state and cb0."""
    import numpy as np

    import qtts

    from ..runtime.synthesis.prompt import build_prompt, resolve_voice
    from ..runtime.synthesis.request import default_non_streaming_mode

    models = [qtts.Model(g, n_threads=threads, device="cpu", voice_cache=False) for g in ggufs]
    ref = models[0]
    voice = ref.create_voice((clip(10.0), 24000), x_vector_only_mode=True) if ref.variant == "base" else None
    kw = {"voice": voice} if voice else {"speaker": ref.speakers[0]} if ref.speakers else {"instruct": "Calm."}
    # no repetition penalty and EOS masked: greedy cb0 is then the argmax over the codebook ids
    greedy = dict(do_sample=False, subtalker_dosample=False, repetition_penalty=1.0, **settings(frames, 0))
    greedy.pop("frame_budget")
    codes = ref.generate_codes(TEXT, frame_budget=None, **kw, **greedy).codes
    cond = resolve_voice(ref.context, language="auto", speaker=kw.get("speaker"), instruct=kw.get("instruct"),
                         voice=voice)
    with ref.engine.session() as s:
        prompt = build_prompt(ref.context, s, TEXT, cond, non_streaming_mode=default_non_streaming_mode(ref.variant))
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
    for g, m in zip(ggufs, models, strict=True):
        logits = trace(m)
        cos = [float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(logits, base, strict=True)]
        agree = np.mean([int(np.argmax(a[:2048])) == int(c) for a, c in zip(logits, codes[:, 0], strict=True)])
        wav = m.decode(codes)
        err = float(np.sum((wav - wav_ref) ** 2))
        snr = float("inf") if err == 0 else 10 * np.log10(float(np.sum(wav_ref ** 2)) / err)
        rows[Path(g).stem] = {"prefill_logits_cosine": cos[0], "min_step_logits_cosine": min(cos),
                              "cb0_agreement": float(agree), "vocoder_snr_db": snr,
                              "file_mb": Path(g).stat().st_size / 1e6}
    return {"frames": frames, "results": rows}


def run_quality(a: argparse.Namespace) -> dict[str, Any]:
    log = logger(a.quiet)
    types = ["f32", *[t for t in a.types if t != "f32"]]
    ggufs = [str(prepare(a.release, t, a.seed, log)) for t in types]
    r = worker("quality", str(a.threads), str(a.frames), *ggufs)
    return {"benchmark": "quality", "release": a.release, "threads": a.threads, **machine(), **r}


def format_quality(r: dict[str, Any]) -> str:
    rows = [f"{'type':<8}{'file MB':>9}{'prefill cos':>13}{'min step cos':>14}{'cb0 agree':>11}{'vocoder SNR':>13}"]
    for name, x in r["results"].items():
        rows.append(f"{name:<8}{x['file_mb']:>9.0f}{x['prefill_logits_cosine']:>13.6f}"
                    f"{x['min_step_logits_cosine']:>14.6f}{x['cb0_agreement']:>11.2f}{x['vocoder_snr_db']:>13.1f}")
    return (f"{r['release']} random weights, teacher-forced on {r['frames']} greedy F32 frames\n" + "\n".join(rows))
