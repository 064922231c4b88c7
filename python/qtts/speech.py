"""Text to audio: eager synthesis and streaming, over the code generator and the codec decoder.

Streaming steps the C++ generation loop a few frames at a time (Python is called per chunk,
not per frame) and pushes each chunk through the causal streaming decoder; the first chunk is
one frame for a low time to first audio, later chunks double up to `max_chunk_frames`.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .audio import Audio, AudioChunk, Timings
from .generation import frame_budget, resolve_settings
from .prompt import build_prompt, resolve_voice
from .text import split_text

if TYPE_CHECKING:
    from .model import Model

PAUSE_SECONDS = 0.25  # silence between split sentences


@dataclass
class Request:
    """One synthesis request, validated once and reused for every text piece."""
    pieces: list[str]
    voice: Any
    settings: dict[str, Any]
    non_streaming_mode: bool
    budget: int | str | None


def make_request(model: Model, text: str, *, language: str, speaker: str | None, instruct: str | None,
                 seed: int | None, non_streaming_mode: bool | None, frame_budget: int | str | None,
                 split_sentences: bool | int, settings: dict[str, Any]) -> Request:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text is empty")
    voice = resolve_voice(model, language=language, speaker=speaker, instruct=instruct)
    s = resolve_settings(model.generation_defaults, settings, seed)
    if split_sentences is True:
        pieces = split_text(text)
    elif split_sentences:
        pieces = split_text(text, max_chars=int(split_sentences))
    else:
        pieces = [text]
    return Request(pieces, voice, s, True if non_streaming_mode is None else non_streaming_mode, frame_budget)


def _piece_settings(req: Request, i: int, piece: str) -> dict[str, Any]:
    # each piece gets its own budget and a seed of its own, derived from the request's
    s = dict(req.settings, seed=(req.settings["seed"] + i) % 2**64)
    s["max_frames"] = frame_budget(piece, req.budget)
    return s


def synthesize(model: Model, req: Request) -> Audio:
    t_start = time.perf_counter()
    timings = Timings()
    pause = np.zeros(int(PAUSE_SECONDS * model.sample_rate), dtype=np.float32)
    waves: list[np.ndarray] = []
    all_codes: list[np.ndarray] = []
    stop_reason = "eos"
    gen = dict(prefill_ms=0.0, talker_ms=0.0, predictor_ms=0.0, vocoder_ms=0.0)
    for i, piece in enumerate(req.pieces):
        t0 = time.perf_counter()
        prompt = build_prompt(model, piece, req.voice, non_streaming_mode=req.non_streaming_mode)
        timings.prompt_ms += (time.perf_counter() - t0) * 1e3 - prompt.tokenize_ms
        timings.tokenize_ms += prompt.tokenize_ms
        codes, reason, raw = model._session.generate(prompt.embeddings, prompt.trailing, _piece_settings(req, i, piece))
        for k in ("prefill_ms", "talker_ms", "predictor_ms"):
            gen[k] += raw[k]
        if len(codes):
            t0 = time.perf_counter()
            waves.append(model._session.decode(codes))
            gen["vocoder_ms"] += (time.perf_counter() - t0) * 1e3
            if i + 1 < len(req.pieces):
                waves.append(pause)
        all_codes.append(codes)
        if reason != "eos" or stop_reason == "eos":
            stop_reason = reason
        if reason == "cancelled":
            break
    samples = np.concatenate(waves) if waves else np.zeros(0, dtype=np.float32)
    codes = np.concatenate(all_codes) if all_codes else np.zeros((0, 16), dtype=np.int32)
    _finish(timings, gen, len(codes), len(samples) / model.sample_rate, t_start)
    return Audio(samples, model.sample_rate, codes, stop_reason, timings)


def stream(model: Model, req: Request, *, first_chunk_frames: int = 1, max_chunk_frames: int = 8,
           timings: Timings | None = None) -> Iterator[AudioChunk]:
    """Chunks as they are produced; closing the iterator stops the generation."""
    if not 1 <= first_chunk_frames <= max_chunk_frames:
        raise ValueError("need 1 <= first_chunk_frames <= max_chunk_frames")
    t_start = time.perf_counter()
    timings = timings if timings is not None else Timings()
    gen = dict(prefill_ms=0.0, talker_ms=0.0, predictor_ms=0.0, vocoder_ms=0.0)
    frames, samples_out, index = 0, 0, 0
    session = model._session
    for i, piece in enumerate(req.pieces):
        t0 = time.perf_counter()
        prompt = build_prompt(model, piece, req.voice, non_streaming_mode=req.non_streaming_mode)
        timings.prompt_ms += (time.perf_counter() - t0) * 1e3 - prompt.tokenize_ms
        timings.tokenize_ms += prompt.tokenize_ms
        session.generate_begin(prompt.embeddings, prompt.trailing, _piece_settings(req, i, piece))
        session.decode_stream_reset()
        n, reason, raw = first_chunk_frames, None, {}
        while reason is None:
            codes, reason, raw = session.generate_next(n)
            n = min(2 * n, max_chunk_frames)
            if not len(codes) and reason is None:
                continue
            t0 = time.perf_counter()
            wav = session.decode_stream_push(codes) if len(codes) else np.zeros(0, dtype=np.float32)
            gen["vocoder_ms"] += (time.perf_counter() - t0) * 1e3
            frames += len(codes)
            samples_out += len(wav)
            if timings.time_to_first_audio_ms is None and len(wav):
                timings.time_to_first_audio_ms = (time.perf_counter() - t_start) * 1e3
            last = reason is not None and (i + 1 == len(req.pieces) or reason == "cancelled")
            if last:
                _finish(timings, {**gen, **{k: gen[k] + raw[k] for k in ("prefill_ms", "talker_ms", "predictor_ms")}},
                        frames, samples_out / model.sample_rate, t_start)
            yield AudioChunk(wav, model.sample_rate, codes, index, reason if last else None)
            index += 1
        for k in ("prefill_ms", "talker_ms", "predictor_ms"):
            gen[k] += raw[k]
        if reason == "cancelled":
            return
        if i + 1 < len(req.pieces):
            pause = np.zeros(int(PAUSE_SECONDS * model.sample_rate), dtype=np.float32)
            samples_out += len(pause)
            yield AudioChunk(pause, model.sample_rate, np.zeros((0, 16), dtype=np.int32), index)
            index += 1


def _finish(t: Timings, gen: dict[str, float], frames: int, audio_seconds: float, t_start: float) -> None:
    per = max(frames, 1)
    t.prefill_ms = gen["prefill_ms"]
    t.talker_ms_per_frame = gen["talker_ms"] / per
    t.predictor_ms_per_frame = gen["predictor_ms"] / per
    t.vocoder_ms_per_frame = gen["vocoder_ms"] / per
    t.frames = frames
    t.audio_seconds = audio_seconds
    t.total_ms = (time.perf_counter() - t_start) * 1e3
    t.rtf = t.total_ms / 1e3 / audio_seconds if audio_seconds > 0 else 0.0
    from .audio import peak_rss_mb

    t.peak_rss_mb = peak_rss_mb()
