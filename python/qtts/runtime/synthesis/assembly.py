"""One request's result put together from its text pieces: the one piece assembler behind
synthesize (serial and pipelined), stream, stream_text and the Scheduler's jobs
(docs/architecture.md, "Request pipeline").

It owns what every path used to redo: the pause between pieces, merging the pieces' stop
reasons, the timings (native times per piece, vocoder time, time to first audio, the totals),
chunk numbering, and an ICL voice's reference frames, decoded as the decoder's context and cut
off again.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import numpy as np

from ..audio.audio import Audio, AudioChunk, Timings, peak_rss_mb
from ..audio.timestamps import Span
from ..engine.context import ModelContext
from ..engine.engine import Generated, SessionHandle
from ..engine.pipeline import Vocoder
from ..text.words import Word
from .cloning import CloneTimings
from .request import Request

PAUSE_SECONDS = 0.25  # silence between split sentences
_NATIVE_TIMES = ("prefill_ms", "talker_ms", "predictor_ms")


class Assembly:
    """The parts of one request as they come. Eager paths add whole pieces (add_piece, then
    audio()); streamed paths hand out chunks (chunk, pause_chunk) and finish on the last one.
    `vocoder`, when set, is the request's pipelined Vocoder, whose busy time is the vocoder's.
    Streamed text has no pieces up front: `last_piece(index)` tells whether piece `index` is the
    last one (None while its text does not tell yet)."""

    def __init__(self, ctx: ModelContext, req: Request, timings: Timings | None = None,
                 vocoder_threads: int = 0, last_piece: Callable[[int], bool | None] | None = None) -> None:
        self.t_start = time.perf_counter()
        self.sample_rate = ctx.sample_rate
        self.req = req
        self.last_piece = last_piece
        self.ref = None if req.cond.clone is None else req.cond.clone.ref_codes  # an ICL voice's frames
        self.timings = timings if timings is not None else Timings()
        self.timings.vocoder_threads = vocoder_threads
        clone_timings_into(self.timings, req.clone_timings)
        self.vocoder: Vocoder | None = None
        self.vocoder_ms = 0.0  # the serial decodes' time (decode)
        self.stop_reason: str | None = None  # the request's (end_piece)
        self.piece_reason: str | None = None  # the last piece's
        self.frames = self.samples = self.index = 0
        self.finished = False
        self._empty = ctx.empty_codes()
        self._pause = np.zeros(int(PAUSE_SECONDS * ctx.sample_rate), dtype=np.float32)
        self._native = dict.fromkeys(_NATIVE_TIMES, 0.0)  # of the pieces that ended
        self._raw: dict[str, float] = {}  # the piece in progress, as its last step reported them
        self._waves: list[np.ndarray] = []
        self._codes: list[np.ndarray] = []
        self.spans: list[Span] = []  # where each eager piece's audio lies, for its word timestamps
        self._added = 0  # eager pieces added
        self._words: list[Word] | None = None  # the eager result's, aligned once

    # -- pieces -----------------------------------------------------------------------------
    def step(self, raw: dict[str, float]) -> None:
        """The native times of the piece so far (each step reports the piece's totals)."""
        self._raw = raw

    def end_piece(self, reason: str, raw: dict[str, float] | None = None) -> None:
        """The piece in progress stopped with `reason`: its times are added, and the request's stop
        reason is the last piece's that is not "eos" (else "eos")."""
        raw = self._raw if raw is None else raw
        for k in _NATIVE_TIMES:
            self._native[k] += raw.get(k, 0.0)
        self._raw = {}
        self.piece_reason = reason
        if reason != "eos" or self.stop_reason in (None, "eos"):
            self.stop_reason = reason

    def is_last(self, index: int, reason: str | None) -> bool:
        """Whether piece `index`, stopped with `reason`, ends the request (its last, or cancelled);
        for streamed text, only once the text tells that no piece follows."""
        if reason == "cancelled":
            return True
        if reason is None:
            return False
        if self.last_piece is not None:
            return self.last_piece(index) is True
        return index + 1 == len(self.req.pieces)

    # -- eager ------------------------------------------------------------------------------
    def decode(self, s: SessionHandle, codes: np.ndarray) -> np.ndarray:
        """The waveform of a piece's codes, decoded whole and timed; an ICL voice decodes them
        after its reference codes and cuts the reference's share off (cut)."""
        t0 = time.perf_counter()
        wav = s.decode(codes if self.ref is None else np.concatenate([self.ref, codes]))
        self.vocoder_ms += (time.perf_counter() - t0) * 1e3
        return self.cut(wav, len(codes))

    def cut(self, wav: np.ndarray, frames: int) -> np.ndarray:
        """`wav`, decoded from an ICL voice's reference frames followed by `frames` generated ones,
        without the reference's share: the reference's own proportional formula, which can be one
        sample off the frame boundary (docs/model.md, "Reference quirks")."""
        if self.ref is None:
            return wav
        return wav[int(len(self.ref) / max(len(self.ref) + frames, 1) * len(wav)):]

    def add_piece(self, wav: np.ndarray | None, codes: np.ndarray, last: bool) -> None:
        """A whole piece's samples and codes, a pause after it unless it is the last. Its span is
        kept for word timestamps, unless it was cancelled (its audio cut short)."""
        self._codes.append(codes)
        self.frames += len(codes)
        self._added += 1
        if wav is not None and len(codes):
            if not (last and self.piece_reason == "cancelled"):
                self.spans.append((self.req.pieces[self._added - 1], self.samples, len(wav)))
            self._waves += [wav] if last else [wav, self._pause]
            self.samples += len(wav) + (0 if last else len(self._pause))

    def audio(self, finish: bool = True) -> Audio:
        """The eager result: the pieces joined, the timings finished (unless they already are)."""
        samples = np.concatenate(self._waves) if self._waves else np.zeros(0, dtype=np.float32)
        if finish:
            self.finish()
        if self.req.timestamps is not None and self._words is None:  # after the timings: not in total_ms
            self._words = self.req.timestamps.spans(samples, self.sample_rate, self.spans, self.timings)
        return Audio(samples, self.sample_rate, self.codes(), self.stop_reason or "cancelled", self.timings,
                     self._words)

    # -- streamed ---------------------------------------------------------------------------
    def chunk(self, wav: np.ndarray, codes: np.ndarray, reason: str | None = None, *,
              final: bool = False, piece_text: str | None = None) -> AudioChunk:
        """The next chunk; `final` finishes the timings (after counting this chunk); `piece_text`
        marks the chunk that ends a piece (the piece's text; word timestamps align it)."""
        self.frames += len(codes)
        self.samples += len(wav)
        if len(codes):
            self._codes.append(codes)
        if self.timings.time_to_first_audio_ms is None and len(wav):
            self.timings.time_to_first_audio_ms = (time.perf_counter() - self.t_start) * 1e3
        if final:
            self.finish()
        chunk = AudioChunk(wav, self.sample_rate, codes, self.index, reason, piece_text)
        self.index += 1
        return chunk

    def pause_chunk(self) -> AudioChunk:
        """The silence between two pieces, as a chunk of its own."""
        return self.chunk(self._pause, self._empty)

    def end_chunk(self, reason: str) -> AudioChunk:
        """An empty last chunk that carries the stop reason (and finishes the timings)."""
        return self.chunk(np.zeros(0, dtype=np.float32), self._empty, reason, final=True)

    def codes(self) -> np.ndarray:
        """Every frame handed out so far (or added), in order."""
        return np.concatenate(self._codes) if self._codes else self._empty

    def start_stream(self, voc: Vocoder) -> None:
        """A streamed piece's decode stream: an ICL voice's reference frames first, as context
        whose audio is not emitted."""
        voc.reset(silent_frames=0 if self.ref is None else len(self.ref))
        if self.ref is not None:
            voc.push(self.ref)
        voc.pace()

    def stream_piece(self, voc: Vocoder, steps: Iterator[Generated], ends_request: Callable[[str], bool],
                     text: Callable[[], str]) -> Iterator[AudioChunk]:
        """One piece's chunks from its native steps, vocoded through `voc`: the first at once
        (time to first audio), later ones once the next step is generated (pipelined) or before
        the generation waits for text. The piece's end is recorded (end_piece); the chunk that
        stops it carries its reason when ends_request(reason) says it is the request's last, and
        finishes the timings, and, unless cancelled, the piece's text(), as read when it ends."""
        pending: deque[tuple[Future[np.ndarray], np.ndarray, str | None]] = deque()
        for codes, reason, raw in steps:
            self.step(raw)
            if reason is not None:
                self.end_piece(reason)
            waiting = reason is None and bool(raw.get("needs_text"))
            if len(codes) or reason is not None:
                pending.append((voc.push(codes, alone=self.index == 0), codes, reason))
            while pending and (self.index == 0 or reason is not None or waiting or len(pending) > voc.lag):
                samples, chunk_codes, chunk_reason = pending.popleft()
                last = chunk_reason is not None and ends_request(chunk_reason)
                ended = chunk_reason is not None and chunk_reason != "cancelled"
                yield self.chunk(samples.result(), chunk_codes, chunk_reason if last else None, final=last,
                                 piece_text=text() if ended else None)

    # -- timings ----------------------------------------------------------------------------
    def finish(self) -> None:
        """Per-frame figures, totals, RTF and peak RSS, from what was counted so far (the piece in
        progress included)."""
        t = self.timings
        per = max(self.frames, 1)
        native = {k: self._native[k] + self._raw.get(k, 0.0) for k in _NATIVE_TIMES}
        vocoder_ms = self.vocoder.busy_ms if self.vocoder is not None else self.vocoder_ms
        t.prefill_ms = native["prefill_ms"]
        t.talker_ms_per_frame = native["talker_ms"] / per
        t.predictor_ms_per_frame = native["predictor_ms"] / per
        t.vocoder_ms_per_frame = vocoder_ms / per
        t.frames = self.frames
        t.audio_seconds = self.samples / self.sample_rate
        t.total_ms = (time.perf_counter() - self.t_start) * 1e3
        t.rtf = t.total_ms / 1e3 / t.audio_seconds if t.audio_seconds > 0 else 0.0
        t.peak_rss_mb = peak_rss_mb()
        self.finished = True


def clone_timings_into(t: Timings, clone: CloneTimings | None) -> None:
    """Copy the reference clip's encoding times into a request's Timings."""
    if clone is not None:
        t.speaker_encode_ms, t.codec_encode_ms, t.voice_cache = (clone.speaker_encode_ms, clone.codec_encode_ms,
                                                                 clone.cache)
