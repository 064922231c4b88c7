"""Text to audio: eager synthesis and streaming, over the code generator and the codec decoder.

Streaming steps the C++ generation loop a few frames at a time (Python is called per chunk,
not per frame) and pushes each chunk through the causal streaming decoder; the first chunk is
one frame for a low time to first audio, later chunks double up to `max_chunk_frames`, cut
short where the listener would otherwise run out of audio (pacing.py). What a
request's pieces add up to (pauses, stop reason, timings, an ICL voice's cut) is assembly.py's.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from ..audio.audio import Audio, AudioChunk, Timings
from ..engine.context import ModelContext
from ..engine.engine import Generated, SessionHandle
from ..engine.pipeline import Vocoder
from ..settings.options import StreamOptions
from .assembly import Assembly
from .pacing import Pacer
from .prompt import Prompt, build_prompt
from .request import Request

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


def generate_piece(ctx: ModelContext, s: SessionHandle, req: Request, index: int, timings: Timings,
                   steps: Iterator[int] | None = None) -> Iterator[Generated]:
    """The generation of text piece `index`, the one path every API takes: its prompt, its config,
    then the native loop, in one call (steps None: one result) or stepped (`steps` gives each
    step's frame count). Stepped, it first yields an empty step once the prompt is prefilled;
    the stop reason is None until the last step."""
    piece = req.pieces[index]
    prompt = timed_prompt(ctx, s, req, piece, timings)
    config = req.config.for_piece(index, piece)
    if steps is None:
        yield s.generate(prompt.embeddings, prompt.trailing, config)
        return
    s.generate_begin(prompt.embeddings, prompt.trailing, config)
    reason: str | None = None
    yield ctx.empty_codes(), reason, {}
    while reason is None:
        codes, reason, raw = s.generate_next(next(steps))
        yield codes, reason, raw


def _frame_limit(req: Request) -> int:
    return sum(req.config.for_piece(i, p).frame_limit for i, p in enumerate(req.pieces))


def synthesize(ctx: ModelContext, s: SessionHandle, req: Request, progress: ProgressCallback | None = None,
               vocoder_threads: int = 0) -> Audio:
    """All of the request's audio; with `progress`, the generation runs a few frames at a time
    (the same codes) and reports after each step. With vocoder_threads, pipelined
    (synthesize_pipelined): the same samples."""
    if vocoder_threads:
        return synthesize_pipelined(ctx, s, req, progress, vocoder_threads)
    asm = Assembly(ctx, req)
    limit = _frame_limit(req)
    for i in range(len(req.pieces)):
        steps = None if progress is None else itertools.repeat(PROGRESS_FRAMES)
        parts: list[np.ndarray] = []
        for codes, reason, raw in generate_piece(ctx, s, req, i, asm.timings, steps):  # noqa: B007 (read after)
            parts.append(codes)
            if progress is not None:
                n = asm.frames + sum(len(c) for c in parts)
                progress(Progress(n, limit, i, len(req.pieces), n / ctx.frame_rate, time.perf_counter() - asm.t_start))
        codes = np.concatenate(parts)
        assert reason is not None
        asm.end_piece(reason, raw)
        last = asm.is_last(i, reason)
        asm.add_piece(asm.decode(s, codes) if len(codes) else None, codes, last)
        if last:
            break
    return asm.audio()


def synthesize_pipelined(ctx: ModelContext, s: SessionHandle, req: Request, progress: ProgressCallback | None,
                         vocoder_threads: int) -> Audio:
    """synthesize() with each piece generated PROGRESS_FRAMES frames at a time, every step's codes
    streamed through the decoder on the second session while the next step is generated. A stream
    gives decode()'s samples bit for bit; an ICL voice's reference frames are pushed audibly and
    cut off as Assembly.decode cuts them."""
    asm = Assembly(ctx, req, vocoder_threads=vocoder_threads)
    limit = _frame_limit(req)
    pieces: list[tuple[list[Future[np.ndarray]], list[np.ndarray], bool]] = []  # pushes, codes, last
    voc = asm.vocoder = Vocoder(s, vocoder_threads)
    done = 0
    try:
        for i in range(len(req.pieces)):
            voc.reset()
            pushed = [] if asm.ref is None else [voc.push(asm.ref)]
            voc.pace()
            parts: list[np.ndarray] = []
            for codes, reason, raw in generate_piece(ctx, s, req, i, asm.timings,  # noqa: B007 (read after)
                                                     voc.paced(itertools.repeat(PROGRESS_FRAMES))):
                pushed.append(voc.push(codes))
                parts.append(codes)
                if progress is not None:
                    n = done + sum(len(c) for c in parts)
                    progress(Progress(n, limit, i, len(req.pieces), n / ctx.frame_rate,
                                      time.perf_counter() - asm.t_start))
            assert reason is not None
            asm.end_piece(reason, raw)
            done += sum(len(c) for c in parts)
            pieces.append((pushed, parts, asm.is_last(i, reason)))
            if pieces[-1][2]:
                break
        for pushed, parts, last in pieces:
            codes = np.concatenate(parts)
            wav = asm.cut(np.concatenate([f.result() for f in pushed]), len(codes)) if len(codes) else None
            asm.add_piece(wav, codes, last)
    finally:
        voc.close()
    return asm.audio()


def stream(ctx: ModelContext, s: SessionHandle, req: Request, chunking: StreamOptions, *,
           timings: Timings | None = None, vocoder_threads: int = 0) -> Iterator[AudioChunk]:
    """Chunks as they are produced; closing the iterator stops the generation. With
    vocoder_threads, each chunk is vocoded on the second session while the next is generated
    (docs/serving.md, "Pipelined streaming"); the samples are the same."""
    pacer = Pacer(chunking.first_chunk_frames, chunking.max_chunk_frames)
    asm = Assembly(ctx, req, timings, vocoder_threads)
    voc = asm.vocoder = Vocoder(s, vocoder_threads)
    try:
        for i in range(len(req.pieces)):
            asm.start_stream(voc)
            pacer.start_piece()
            steps = generate_piece(ctx, s, req, i, asm.timings, voc.paced(pacer.sizes()))
            piece = req.pieces[i]
            yield from pacer.handing(asm.stream_piece(voc, steps, lambda reason: asm.is_last(i, reason),  # noqa: B023
                                                      lambda: piece))  # noqa: B023
            if asm.finished:
                return
            yield from pacer.handing([asm.pause_chunk()])
    finally:
        voc.close()


def timed_prompt(ctx: ModelContext, s: SessionHandle, req: Request, piece: str, timings: Timings) -> Prompt:
    """A piece's prompt, its tokenizing and building time added to `timings`."""
    t0 = time.perf_counter()
    prompt = build_prompt(ctx, s, piece, req.cond, non_streaming_mode=req.non_streaming_mode)
    timings.prompt_ms += (time.perf_counter() - t0) * 1e3 - prompt.tokenize_ms
    timings.tokenize_ms += prompt.tokenize_ms
    return prompt
