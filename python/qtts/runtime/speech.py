"""Text to audio: eager synthesis and streaming, over the code generator and the codec decoder.

Streaming steps the C++ generation loop a few frames at a time (Python is called per chunk,
not per frame) and pushes each chunk through the causal streaming decoder; the first chunk is
one frame for a low time to first audio, later chunks double up to `max_chunk_frames`.
"""
from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .audio import Audio, AudioChunk, Timings
from .cloning import CloneTimings
from .config import GenerationConfig
from .engine import Generated, SessionHandle
from .generation import check_text
from .pipeline import Vocoder
from .prompt import Conditioning, Prompt, build_prompt, resolve_voice
from .text import SplitSentences, text_pieces
from .voice import Voice

if TYPE_CHECKING:
    from .model import Model

PAUSE_SECONDS = 0.25  # silence between split sentences
PROGRESS_FRAMES = 4  # frames per generation step when reporting progress (a third of a second of audio)


@dataclass(frozen=True)
class Progress:
    """Where an eager synthesis stands, passed to synthesize(progress=...) every few frames."""
    frames: int        # frames generated so far, all pieces
    frame_limit: int   # the most frames the request may take (frame budget and max_new_tokens, summed)
    piece: int         # the text piece being generated (0-based)
    pieces: int
    audio_seconds: float  # audio of the frames so far (the model's frame rate: 12.5 frames per second)
    elapsed_s: float


ProgressCallback = Callable[[Progress], None]


@dataclass
class Request:
    """One synthesis request, validated once and reused for every text piece."""
    pieces: list[str]
    cond: Conditioning
    config: GenerationConfig  # the request's; each piece runs config.for_piece(index, text)
    non_streaming_mode: bool
    clone_timings: CloneTimings | None = None  # set when the request encoded a reference clip


def make_request(model: Model, text: str | None, *, language: str, speaker: str | None, instruct: str | None,
                 seed: int | None, non_streaming_mode: bool | None, frame_budget: int | str | None,
                 split_sentences: SplitSentences, settings: dict[str, Any], voice: Voice | None = None) -> Request:
    """A validated request; text None: streamed in (the pieces come as it arrives)."""
    if text is not None:
        check_text(text)
    cond = resolve_voice(model, language=language, speaker=speaker, instruct=instruct, voice=voice)
    config = GenerationConfig.resolve(model.generation_defaults, settings, seed, frame_budget)
    pieces = text_pieces("x" if text is None else text, split_sentences)  # validates split_sentences too
    if text is None:
        pieces = []
    if non_streaming_mode is None:
        non_streaming_mode = default_non_streaming_mode(model.variant)
    return Request(pieces, cond, config, non_streaming_mode)


def default_non_streaming_mode(variant: str) -> bool:
    """The reference's defaults: generate_custom_voice and generate_voice_design prefill the whole
    text (True), generate_voice_clone streams it in with the frames (False)."""
    return variant != "base"


def generate_piece(model: Model, s: SessionHandle, req: Request, index: int, timings: Timings,
                   steps: Iterator[int] | None = None) -> Iterator[Generated]:
    """The generation of text piece `index`, the one path every API takes: its prompt, its config,
    then the native loop, in one call (steps None: one result) or stepped (`steps` gives each
    step's frame count). Stepped, it first yields an empty step once the prompt is prefilled;
    the stop reason is None until the last step."""
    piece = req.pieces[index]
    prompt = timed_prompt(model, s, req, piece, timings)
    config = req.config.for_piece(index, piece)
    if steps is None:
        yield s.generate(prompt.embeddings, prompt.trailing, config)
        return
    s.generate_begin(prompt.embeddings, prompt.trailing, config)
    reason: str | None = None
    yield model.engine.empty_codes(), reason, {}
    while reason is None:
        codes, reason, raw = s.generate_next(next(steps))
        yield codes, reason, raw


def synthesize(model: Model, s: SessionHandle, req: Request, progress: ProgressCallback | None = None,
               vocoder_threads: int = 0) -> Audio:
    """All of the request's audio; with `progress`, the generation runs a few frames at a time
    (the same codes) and reports after each step. With vocoder_threads, pipelined
    (synthesize_pipelined): the same samples."""
    if vocoder_threads:
        return synthesize_pipelined(model, s, req, progress, vocoder_threads)
    t_start = time.perf_counter()
    timings = Timings()
    pause = np.zeros(int(PAUSE_SECONDS * model.sample_rate), dtype=np.float32)
    waves: list[np.ndarray] = []
    all_codes: list[np.ndarray] = []
    stop_reason = "eos"
    gen = dict(prefill_ms=0.0, talker_ms=0.0, predictor_ms=0.0, vocoder_ms=0.0)
    clone_timings_into(timings, req.clone_timings)
    limit = sum(req.config.for_piece(i, p).frame_limit for i, p in enumerate(req.pieces))
    done = 0
    for i in range(len(req.pieces)):
        steps = None if progress is None else itertools.repeat(PROGRESS_FRAMES)
        parts: list[np.ndarray] = []
        for codes, reason, raw in generate_piece(model, s, req, i, timings, steps):  # noqa: B007 (read after)
            parts.append(codes)
            if progress is not None:
                n = done + sum(len(c) for c in parts)
                progress(Progress(n, limit, i, len(req.pieces), n / model.engine.frame_rate,
                                  time.perf_counter() - t_start))
        codes = np.concatenate(parts)
        assert reason is not None
        done += len(codes)
        for k in ("prefill_ms", "talker_ms", "predictor_ms"):
            gen[k] += raw[k]
        if len(codes):
            t0 = time.perf_counter()
            waves.append(decode_codes(s, codes, ref_codes(req)))
            gen["vocoder_ms"] += (time.perf_counter() - t0) * 1e3
            if i + 1 < len(req.pieces):
                waves.append(pause)
        all_codes.append(codes)
        if reason != "eos" or stop_reason == "eos":
            stop_reason = reason
        if reason == "cancelled":
            break
    samples = np.concatenate(waves) if waves else np.zeros(0, dtype=np.float32)
    codes = np.concatenate(all_codes) if all_codes else model.engine.empty_codes()
    finish_timings(timings, gen, len(codes), len(samples) / model.sample_rate, t_start)
    return Audio(samples, model.sample_rate, codes, stop_reason, timings)


def synthesize_pipelined(model: Model, s: SessionHandle, req: Request, progress: ProgressCallback | None,
                         vocoder_threads: int) -> Audio:
    """synthesize() with each piece generated PROGRESS_FRAMES frames at a time, every step's codes
    streamed through the decoder on the second session while the next step is generated. A stream
    gives decode()'s samples bit for bit; an ICL voice's reference frames are pushed audibly and
    cut off as decode_codes cuts them."""
    t_start = time.perf_counter()
    timings = Timings(vocoder_threads=vocoder_threads)
    clone_timings_into(timings, req.clone_timings)
    gen = dict(prefill_ms=0.0, talker_ms=0.0, predictor_ms=0.0)
    limit = sum(req.config.for_piece(i, p).frame_limit for i, p in enumerate(req.pieces))
    ref = ref_codes(req)
    pieces: list[tuple[list[Future[np.ndarray]], int]] = []  # per piece: its pushes' samples, its frames
    all_codes: list[np.ndarray] = []
    stop_reason, done = "eos", 0
    voc = Vocoder(s, vocoder_threads)
    try:
        for i in range(len(req.pieces)):
            voc.reset()
            pushed = [] if ref is None else [voc.push(ref)]
            voc.pace()
            raw: dict[str, float] = {}
            n = 0
            for codes, reason, raw in generate_piece(model, s, req, i, timings,  # noqa: B007 (read after)
                                                     voc.paced(itertools.repeat(PROGRESS_FRAMES))):
                pushed.append(voc.push(codes))
                all_codes.append(codes)
                n += len(codes)
                if progress is not None:
                    progress(Progress(done + n, limit, i, len(req.pieces), (done + n) / model.engine.frame_rate,
                                      time.perf_counter() - t_start))
            assert reason is not None
            done += n
            for k in gen:
                gen[k] += raw[k]
            pieces.append((pushed, n))
            if reason != "eos" or stop_reason == "eos":
                stop_reason = reason
            if reason == "cancelled":
                break
        pause = np.zeros(int(PAUSE_SECONDS * model.sample_rate), dtype=np.float32)
        waves: list[np.ndarray] = []
        for k, (pushed, n) in enumerate(pieces):
            if not n:
                continue
            wav = np.concatenate([f.result() for f in pushed])
            if ref is not None:  # decode_codes's cut of the reference's share
                wav = wav[int(len(ref) / (len(ref) + n) * len(wav)):]
            waves += [wav, pause] if k + 1 < len(req.pieces) else [wav]
    finally:
        voc.close()
    samples = np.concatenate(waves) if waves else np.zeros(0, dtype=np.float32)
    codes = np.concatenate(all_codes) if all_codes else model.engine.empty_codes()
    finish_timings(timings, {**gen, "vocoder_ms": voc.busy_ms}, len(codes), len(samples) / model.sample_rate,
                   t_start)
    return Audio(samples, model.sample_rate, codes, stop_reason, timings)


def _chunk_sizes(first: int, most: int) -> Iterator[int]:
    """The stream's steps: `first` frames, then doubling up to `most`."""
    n = first
    while True:
        yield n
        n = min(2 * n, most)


def stream(model: Model, s: SessionHandle, req: Request, *, first_chunk_frames: int = 1, max_chunk_frames: int = 8,
           timings: Timings | None = None, vocoder_threads: int = 0) -> Iterator[AudioChunk]:
    """Chunks as they are produced; closing the iterator stops the generation. With
    vocoder_threads, each chunk is vocoded on the second session while the next is generated
    (docs/serving.md, "Pipelined streaming"); the samples are the same."""
    if not 1 <= first_chunk_frames <= max_chunk_frames:
        raise ValueError("need 1 <= first_chunk_frames <= max_chunk_frames")
    t_start = time.perf_counter()
    timings = timings if timings is not None else Timings()
    timings.vocoder_threads = vocoder_threads
    gen = dict(prefill_ms=0.0, talker_ms=0.0, predictor_ms=0.0)
    frames, samples_out, index = 0, 0, 0
    ref = ref_codes(req)
    clone_timings_into(timings, req.clone_timings)
    voc = Vocoder(s, vocoder_threads)
    pending: deque[tuple[Future[np.ndarray], np.ndarray, str | None]] = deque()  # (samples, codes, stop reason)
    try:
        for i in range(len(req.pieces)):
            # an ICL voice's reference frames are the decoder's context; their audio is not emitted
            voc.reset(silent_frames=0 if ref is None else len(ref))
            if ref is not None:
                voc.push(ref)
            voc.pace()
            raw: dict[str, float] = {}
            for codes, reason, raw in generate_piece(model, s, req, i, timings,
                                                     voc.paced(_chunk_sizes(first_chunk_frames, max_chunk_frames))):
                if not len(codes) and reason is None:
                    continue
                pending.append((voc.push(codes, alone=index == 0), codes, reason))
                # the first chunk at once (time to first audio), later ones once the next is generated
                while pending and (index == 0 or reason is not None or len(pending) > voc.lag):
                    samples, chunk_codes, chunk_reason = pending.popleft()
                    wav = samples.result()
                    frames += len(chunk_codes)
                    samples_out += len(wav)
                    if timings.time_to_first_audio_ms is None and len(wav):
                        timings.time_to_first_audio_ms = (time.perf_counter() - t_start) * 1e3
                    last = chunk_reason is not None and (i + 1 == len(req.pieces) or chunk_reason == "cancelled")
                    if last:
                        totals = {k: gen[k] + raw[k] for k in gen}
                        finish_timings(timings, {**totals, "vocoder_ms": voc.busy_ms}, frames,
                                       samples_out / model.sample_rate, t_start)
                    yield AudioChunk(wav, model.sample_rate, chunk_codes, index, chunk_reason if last else None)
                    index += 1
            for k in gen:
                gen[k] += raw[k]
            if reason == "cancelled":
                return
            if i + 1 < len(req.pieces):
                pause = np.zeros(int(PAUSE_SECONDS * model.sample_rate), dtype=np.float32)
                samples_out += len(pause)
                yield AudioChunk(pause, model.sample_rate, model.engine.empty_codes(), index)
                index += 1
    finally:
        voc.close()


def timed_prompt(model: Model, s: SessionHandle, req: Request, piece: str, timings: Timings) -> Prompt:
    """A piece's prompt, its tokenizing and building time added to `timings`."""
    t0 = time.perf_counter()
    prompt = build_prompt(model, s, piece, req.cond, non_streaming_mode=req.non_streaming_mode)
    timings.prompt_ms += (time.perf_counter() - t0) * 1e3 - prompt.tokenize_ms
    timings.tokenize_ms += prompt.tokenize_ms
    return prompt


def ref_codes(req: Request) -> np.ndarray | None:
    """The reference clip's codes of an ICL voice (the decoder's silent context), else None."""
    clone = req.cond.clone
    return None if clone is None else clone.ref_codes


def decode_codes(s: SessionHandle, codes: np.ndarray, ref: np.ndarray | None) -> np.ndarray:
    """The waveform of generated codes; an ICL voice decodes them after its reference codes and
    cuts the reference's share off with the reference's own proportional formula, which can be
    one sample off the frame boundary (docs/model.md, "Reference quirks")."""
    if ref is None:
        return s.decode(codes)
    full = np.concatenate([ref, codes])
    wav = s.decode(full)
    cut = int(len(ref) / max(len(full), 1) * len(wav))
    return wav[cut:]


def clone_timings_into(t: Timings, clone: CloneTimings | None) -> None:
    """Copy the reference clip's encoding times into a request's Timings."""
    if clone is not None:
        t.speaker_encode_ms, t.codec_encode_ms, t.voice_cache = (clone.speaker_encode_ms, clone.codec_encode_ms,
                                                                 clone.cache)


def finish_timings(t: Timings, gen: dict[str, float], frames: int, audio_seconds: float, t_start: float) -> None:
    """Per-frame figures, totals, RTF and peak RSS of a finished request."""
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
