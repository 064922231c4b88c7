"""Speech for text that is still being written (docs/model.md, "Text streamed in").

In streaming-text mode the talker's prompt holds the first text token and step k adds token
k + 1, then EOS, then PAD. So a piece's generation starts once its first token is final, and
steps the native loop until it needs a token that has not arrived: the loop returns early
(`needs_text`), the chunk loop hands out the audio made so far, and the driver waits on the
TextFeed for more text, appends the newly final tokens (EOS once the piece is complete) and
goes on. The codes, and so the samples, are those of Model.stream(full text,
non_streaming_mode=False) with the same seed.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ..audio.audio import AudioChunk, Timings
from ..engine.context import ModelContext
from ..engine.engine import Generated, SessionHandle
from ..engine.pipeline import Vocoder
from ..settings.config import GenerationConfig
from ..settings.options import StreamOptions
from ..text.text import SplitSentences
from .assembly import Assembly
from .pacing import Pacer
from .prompt import build_prompt
from .request import Request
from .text_stream import TextFeed, final_text_ids, known_pieces


class _Cancelled(Exception):
    """The feed was cancelled (Model.cancel) while the generation waited for text."""


def read_into(feed: TextFeed, chunks: Iterable[str]) -> threading.Thread:
    """A daemon thread that puts `chunks` into `feed` as the iterator gives them, then ends it
    (with the iterator's exception, if it raises); it stops early once the feed is cancelled."""
    it = iter(chunks)

    def run() -> None:
        try:
            for fragment in it:
                if feed.cancelled:
                    return
                feed.put(fragment)
        except BaseException as e:  # the generation re-raises it
            feed.end(e)
        else:
            feed.end()

    thread = threading.Thread(target=run, name="qtts-text", daemon=True)
    thread.start()
    return thread


@dataclass
class _Text:
    """The streamed text as far as it arrived, and what it settles about piece `index`."""
    feed: TextFeed
    split_sentences: SplitSentences
    text: str = ""
    ended: bool = False

    def more(self) -> None:
        """Wait for more text (returns at once if some came since the last look)."""
        self.text, self.ended = self.feed.wait(len(self.text))
        if self.feed.cancelled:
            raise _Cancelled

    def piece(self, index: int) -> tuple[str, bool] | None:
        """(the piece's known text, whether it is complete), None while it has not started (or,
        the text ended, does not exist)."""
        known = known_pieces(self.text, self.ended, self.split_sentences)
        if index < len(known.complete):
            return known.complete[index], True
        if index == len(known.complete) and known.next_text and not self.ended:
            return known.next_text, False
        return None

    def piece_text(self, index: int) -> str:
        """Piece `index`'s text as far as it is known ("" before it starts)."""
        got = self.piece(index)
        return "" if got is None else got[0]

    def is_last(self, index: int) -> bool | None:
        """Whether piece `index` is the last one: None while the text does not tell."""
        if self.ended:
            return len(known_pieces(self.text, True, self.split_sentences).complete) == index + 1
        known = known_pieces(self.text, False, self.split_sentences)
        return False if len(known.complete) > index + 1 or known.next_text and len(known.complete) > index else None


class _Piece:
    """One piece's generation over streamed text: the prompt once its first tokens are final,
    then native steps, text rows appended as they become final."""

    def __init__(self, ctx: ModelContext, s: SessionHandle, req: Request, text: _Text, index: int, timings: Timings):
        self.ctx, self.s, self.req, self.text, self.index = ctx, s, req, text, index
        clone = req.cond.clone
        icl = clone is not None and not clone.x_vector_only_mode
        # an ICL prompt holds as many text tokens as the reference has frames (plus one), its
        # transcript's first (docs/model.md, "Prompt layouts")
        self.need = 1
        if icl:
            assert clone is not None and clone.ref_codes is not None
            self.need = max(1, len(clone.ref_codes) + 1 - len(ctx.tokenizer.ref_prompt_ids(clone.ref_text or "")))
        self.timings = timings
        self.fed = 0
        self.complete = False
        self.config: GenerationConfig | None = None

    def _settled(self) -> tuple[list[int], bool, GenerationConfig] | None:
        got = self.text.piece(self.index)
        if got is None:
            return None
        piece, complete = got
        ids = final_text_ids(self.ctx.tokenizer, piece, complete)
        return ids, complete, self.req.config.for_piece(self.index, piece)

    def begin(self) -> bool:
        """Wait for the piece's first tokens and prefill; False when the text ended before it."""
        while True:
            got = self._settled()
            if got is not None and (got[1] or len(got[0]) >= self.need):
                break
            if got is None and self.text.ended:
                return False
            self.text.more()
        ids, self.complete, self.config = got
        t0 = time.perf_counter()
        prompt = build_prompt(self.ctx, self.s, "", self.req.cond, non_streaming_mode=False, text_ids=ids,
                              text_open=not self.complete)
        self.timings.prompt_ms += (time.perf_counter() - t0) * 1e3
        self.s.generate_begin(prompt.embeddings, prompt.trailing, self.config, text_open=not self.complete)
        self.fed = len(ids)
        return True

    def feed_more(self) -> None:
        """Wait until the text settles more tokens, the piece's end or a larger frame budget,
        and append it."""
        assert self.config is not None
        while True:
            self.text.more()
            got = self._settled()
            assert got is not None  # a started piece stays known
            ids, complete, config = got
            if len(ids) > self.fed or complete or config.frame_budget != self.config.frame_budget:
                break
        new = ids[self.fed:] + ([self.ctx.text_ids["tts_eos"]] if complete else [])
        rows = self.s.text_embed(new) if new else np.zeros((0, self.ctx.hidden_size), dtype=np.float32)
        self.s.generate_append(rows, complete, config)
        self.fed, self.complete, self.config = len(ids), complete, config

    def steps(self, sizes: Iterator[int]) -> Iterator[Generated]:
        """The native steps, as speech.generate_piece's; a step that stopped for text carries
        raw["needs_text"], and the next one waits for it."""
        reason: str | None = None
        while reason is None:
            codes, reason, raw = self.s.generate_next(next(sizes))
            yield codes, reason, raw
            if reason is None and raw.get("needs_text"):
                self.feed_more()


def stream_text(ctx: ModelContext, s: SessionHandle, req: Request, feed: TextFeed, split_sentences: SplitSentences,
                chunking: StreamOptions, *, timings: Timings | None = None,
                vocoder_threads: int = 0) -> Iterator[AudioChunk]:
    """speech.stream for text arriving through `feed`: chunks as they are produced, the pieces
    split as the text settles them; closing the iterator stops the generation. A chunk that ends
    a piece before the text tells whether another follows carries no stop reason; an empty last
    chunk then carries it."""
    pacer = Pacer(chunking.first_chunk_frames, chunking.max_chunk_frames)
    text = _Text(feed, split_sentences)
    asm = Assembly(ctx, req, timings, vocoder_threads, last_piece=text.is_last)
    voc = asm.vocoder = Vocoder(s, vocoder_threads)
    try:
        i = 0
        while True:
            piece = _Piece(ctx, s, req, text, i, asm.timings)
            try:
                started = piece.begin()
            except _Cancelled:
                asm.end_piece("cancelled")
                break
            if not started:
                if i == 0:
                    raise ValueError("text is empty")
                break
            if i:
                yield from pacer.handing([asm.pause_chunk()])
            asm.start_stream(voc)
            pacer.start_piece()
            steps = piece.steps(voc.paced(pacer.sizes()))
            try:
                yield from pacer.handing(asm.stream_piece(voc, steps, lambda r: asm.is_last(i, r),  # noqa: B023
                                                          lambda: text.piece_text(i)))  # noqa: B023
            except _Cancelled:
                asm.end_piece("cancelled")
                break
            if asm.finished:
                return
            i += 1
        # the text ended (or was cancelled) after the last piece's final chunk went out
        yield asm.end_chunk(asm.piece_reason or "eos")
    finally:
        voc.close()
