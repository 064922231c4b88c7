"""Word timestamps of synthesized speech (docs/aligner.md, "Word timestamps of synthesis").

A request asked with word_timestamps has each text piece aligned by the model's forced aligner
once the piece's audio is complete, its words offset to where the piece lies in the request's
audio (the pauses between pieces included). An eager result aligns the pieces the assembler
recorded (Assembly.spans). A stream marks the chunk that ends a piece with the piece's text
(AudioChunk.piece_text); `WordStream` follows the chunks and, after such a chunk, aligns the piece
and hands out a chunk of its own holding the words (AudioChunk.words) before anything that comes
later. The alignment runs in the thread that reads the result or the chunks, never in the
Scheduler's worker, and never before the piece's own audio is out.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..text.words import Word, split_words
from .audio import AudioChunk, Timings

NO_ALIGNER = ("word_timestamps needs a forced aligner: load the model with aligner= (a converted aligner .gguf or "
              "its repo id, e.g. qtts.load(path, aligner='Qwen/Qwen3-ForcedAligner-0.6B'); qtts-cli: --aligner MODEL)")


class Aligns(Protocol):
    """What word timestamps need of a qtts.Aligner (runtime/aligner/aligner.py)."""

    @property
    def languages(self) -> list[str]: ...

    def align(self, audio: Any, text: str | list[str], language: str | None = None) -> list[Word]: ...


def aligner_language(aligner: Aligns, language: str | None) -> str | None:
    """The aligner's language for a synthesis language: the same name where the aligner has it,
    else None ("auto", a dialect): the splitting every language but Japanese and Korean uses."""
    if not isinstance(language, str) or language.lower() not in aligner.languages:
        return None
    return language.lower()


# (the piece's text, its first sample in the request's audio, its samples)
Span = tuple[str, int, int]


@dataclass(frozen=True)
class WordTiming:
    """A request's word timing: the aligner, and the language its words are split by."""
    aligner: Aligns
    language: str | None

    @classmethod
    def of(cls, aligner: Aligns | None, language: str | None, pieces: Sequence[str] = ()) -> WordTiming:
        """Checked before any synthesis: an aligner is there, and the text can be split into words
        (Japanese and Korean cannot: runtime/text/words.py)."""
        if aligner is None:
            raise ValueError(NO_ALIGNER)
        lang = aligner_language(aligner, language)
        try:
            for piece in pieces or [""]:
                split_words(piece, lang)
        except ValueError as e:
            raise ValueError(f"word_timestamps: {e}") from None
        return cls(aligner, lang)

    def piece(self, text: str, samples: np.ndarray, sample_rate: int, offset: int,
              timings: Timings | None = None) -> list[Word]:
        """The words of one piece from its samples, in seconds from the request's start (the
        piece's first sample is sample `offset` there). A piece without audio has no words."""
        if not len(samples):
            return []
        t0 = time.perf_counter()
        words = self.aligner.align((np.asarray(samples, dtype=np.float32), sample_rate), text, self.language)
        if timings is not None:
            timings.align_ms += (time.perf_counter() - t0) * 1e3
        at = offset / sample_rate
        return [Word(w.text, round(w.start + at, 3), round(w.end + at, 3)) for w in words]

    def spans(self, samples: np.ndarray, sample_rate: int, spans: Sequence[Span],
              timings: Timings | None = None) -> list[Word]:
        """The words of an eager result: each span's piece aligned, in order."""
        return [w for text, start, n in spans
                for w in self.piece(text, samples[start:start + n], sample_rate, start, timings)]


# A piece a stream has ended: its text, samples and first sample.
Ended = tuple[str, np.ndarray, int]


class WordStream:
    """Follows one stream's chunks: where each piece lies, and its words once aligned. `take`
    renumbers a chunk and, for one that ends a piece, says which; `words_chunk` is the chunk that
    then follows it. The words of each piece are aligned once (`words_of`), by whichever reader
    asks first (the chunks' or the whole result's)."""

    def __init__(self, timing: WordTiming, timings: Timings) -> None:
        self.timing, self.timings = timing, timings
        self.index = 0
        self._tracker = PieceTracker()
        self._words: dict[int, list[Word]] = {}
        self._lock = threading.Lock()

    def take(self, chunk: AudioChunk) -> tuple[AudioChunk, tuple[int, Ended] | None]:
        """The chunk to hand out (renumbered; one that ends a piece leaves its stop reason to the
        words chunk after it) and the piece it ends (its ordinal and what align needs), if any."""
        ended = self._tracker.take(chunk)
        out = dataclasses.replace(chunk, index=self.index, stop_reason=None if ended else chunk.stop_reason)
        self.index += 1
        return out, None if ended is None else (self._tracker.pieces - 1, ended)

    def words_of(self, ordinal: int, piece: Ended, sample_rate: int) -> list[Word]:
        with self._lock:
            if ordinal not in self._words:
                text, samples, start = piece
                self._words[ordinal] = self.timing.piece(text, samples, sample_rate, start, self.timings)
            return self._words[ordinal]

    def words_chunk(self, ended_by: AudioChunk, words: list[Word]) -> AudioChunk:
        """A chunk without audio holding a piece's words, after the chunk that ended it; it
        carries that chunk's stop reason (the last chunk of a stream has it)."""
        chunk = AudioChunk(np.zeros(0, dtype=np.float32), ended_by.sample_rate, ended_by.codes[:0], self.index,
                           ended_by.stop_reason, words=words)
        self.index += 1
        return chunk

    def chunks(self, chunks: Iterator[AudioChunk]) -> Iterator[AudioChunk]:
        """`chunks` with each piece's words after its audio; closing this closes them."""
        try:
            for chunk in chunks:
                out, ended = self.take(chunk)
                yield out
                if ended is not None:
                    yield self.words_chunk(chunk, self.words_of(*ended, chunk.sample_rate))
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def all_words(self, chunks: Sequence[AudioChunk]) -> list[Word]:
        """The words of every piece that `chunks` (a whole stream's, in order) end."""
        tracker = PieceTracker()
        out: list[Word] = []
        for chunk in chunks:
            ended = tracker.take(chunk)
            if ended is not None:
                out += self.words_of(tracker.pieces - 1, ended, chunk.sample_rate)
        return out


class PieceTracker:
    """Where a stream's pieces lie as its chunks go by: a piece is the chunks up to one marked
    with its text (AudioChunk.piece_text), the pauses between pieces (and an empty last chunk)
    excepted, which hold no codes."""

    def __init__(self) -> None:
        self.pieces = 0  # pieces ended so far
        self._samples = 0  # samples of every chunk so far
        self._start: int | None = None  # the first sample of the piece in progress
        self._parts: list[np.ndarray] = []

    def take(self, chunk: AudioChunk) -> Ended | None:
        """Count a chunk in; when it ends a piece, that piece."""
        n = len(chunk.samples)
        if chunk.piece_text is None and not len(chunk.codes):  # a pause, or the empty last chunk
            self._samples += n
            return None
        if self._start is None:
            self._start = self._samples
        self._parts.append(chunk.samples)
        self._samples += n
        if chunk.piece_text is None:
            return None
        samples = np.concatenate(self._parts) if self._parts else np.zeros(0, dtype=np.float32)
        ended = (chunk.piece_text, samples, self._start)
        self._start, self._parts = None, []
        self.pieces += 1
        return ended
