"""Streamed-text jobs of the Scheduler (docs/serving.md, "Streamed text in a batch").

A job whose text arrives later keeps its text in a TextFeed and, for the worker, what the text
received so far settles, by the rules of Model.stream_text (text_stream.py): a piece is admitted
once its first tokens are final, newly final tokens (EOS once the piece is complete) are appended
to its batch slot between steps, and the native batch lets a slot that waits for its next text
token sit the frame out. Nothing here blocks: the worker looks, appends what it can, and steps
the other slots.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import numpy as np

from ..audio.audio import Timings
from ..engine.context import ModelContext
from ..engine.engine import Batch, Engine, SessionHandle
from ..settings.config import GenerationConfig
from ..synthesis.prompt import build_prompt
from ..synthesis.request import Request
from ..synthesis.speech_text import _Text
from ..synthesis.text_stream import TextFeed, final_text_ids
from ..text.text import SplitSentences

# A piece's text tokens settled so far, whether they are all of it, its config (frame budget).
Settled = tuple[list[int], bool, GenerationConfig]


class StreamedText:
    """One job's streamed text and the piece being generated from it (worker thread only, but
    `feed`, which any thread fills)."""

    def __init__(self, ctx: ModelContext, req: Request, split_sentences: SplitSentences) -> None:
        self.ctx, self.req = ctx, req
        self.feed = TextFeed()
        self._text = _Text(self.feed, split_sentences)
        self._seen: tuple[int, bool] = (-1, False)
        self._not_ready = -1  # the piece ready() last found not ready, for the text seen
        clone = req.cond.clone
        # an ICL prompt holds as many text tokens as the reference has frames (plus one), its
        # transcript's first (docs/model.md, "Prompt layouts"): as speech_text._Piece
        self.need = 1
        if clone is not None and not clone.x_vector_only_mode and clone.ref_codes is not None:
            self.need = max(1, len(clone.ref_codes) + 1 - len(ctx.tokenizer.ref_prompt_ids(clone.ref_text or "")))
        self.index = 0
        self.fed = 0
        self.complete = False
        self.config: GenerationConfig | None = None

    def _refresh(self) -> bool:
        """Take the text arrived so far (raising its source's error); True when it changed."""
        text, ended = self.feed.wait(-1)  # a text of -1 characters is always exceeded: no wait
        changed = (len(text), ended) != self._seen
        self._seen = (len(text), ended)
        self._text.text, self._text.ended = text, ended
        return changed

    def _settled(self, index: int) -> Settled | None:
        got = self._text.piece(index)
        if got is None:
            return None
        piece, complete = got
        return final_text_ids(self.ctx.tokenizer, piece, complete), complete, self.req.config.for_piece(index, piece)

    def ready(self, index: int) -> bool:
        """Piece `index` can be admitted: its first tokens are final, or the text ended (the
        admission then ends the job), or its source failed (the admission raises it). The worker
        asks every frame: the text is looked at again only when more came. Never raises: a text
        that cannot be read or tokenized is ready, and its admission raises for this job alone."""
        try:
            if not self._refresh() and self._not_ready == index:
                return False
            got = self._settled(index)
        except Exception:
            return True
        ready = self._text.ended or (got is not None and (got[1] or len(got[0]) >= self.need))
        self._not_ready = -1 if ready else index
        return ready

    def begin(self, index: int) -> Settled | None:
        """Piece `index`'s tokens so far, which its prompt holds; None when the text ended
        before it. Call once ready(index)."""
        self._refresh()
        got = self._settled(index)
        if got is None:
            return None
        self.index, (ids, self.complete, self.config) = index, got
        self.fed = len(ids)
        return got

    def more(self) -> Settled | None:
        """The running piece's tokens settled since the last look (its EOS last once complete)
        and its config, or None when nothing changed."""
        if self.complete or not self._refresh():
            return None
        got = self._settled(self.index)
        assert got is not None and self.config is not None  # a started piece stays known
        ids, complete, config = got
        if len(ids) <= self.fed and not complete and config.frame_budget == self.config.frame_budget:
            return None
        new = ids[self.fed:] + ([self.ctx.text_ids["tts_eos"]] if complete else [])
        self.fed, self.complete, self.config = len(ids), complete, config
        return new, complete, config

    def piece_text(self, index: int) -> str:
        """Piece `index`'s text as far as it came (the worker's, when the piece ends)."""
        return self._text.piece_text(index)

    def is_last(self, index: int) -> bool | None:
        """Whether piece `index` is the last one: None while the text does not tell."""
        self._refresh()
        return self._text.is_last(index)

    def add(self, s: SessionHandle, batch: Batch, got: Settled, timings: Timings) -> int:
        """Prefill the piece begun (begin's tokens) into a free slot of `batch`, text-open unless
        complete; its slot id. The prompt's time is added to `timings`."""
        ids, complete, config = got
        t0 = time.perf_counter()
        prompt = build_prompt(self.ctx, s, "", self.req.cond, non_streaming_mode=False, text_ids=ids,
                              text_open=not complete)
        timings.prompt_ms += (time.perf_counter() - t0) * 1e3
        return s.batch_add(batch, prompt.embeddings, prompt.trailing, config, text_open=not complete)

    def feed_slot(self, engine: Engine, batch: Batch, slot: int) -> bool:
        """Append the tokens settled since the last look (more()) to the piece's slot; whether
        there were any."""
        more = self.more()
        if more is None:
            return False
        ids, complete, config = more
        with engine.session() as s:
            rows = s.text_embed(ids) if ids else np.zeros((0, self.ctx.hidden_size), dtype=np.float32)
            s.batch_append(batch, slot, rows, complete, config)
        return True


class TextInput:
    """A Job's streamed-text side: the text written in as it comes (submit_text jobs only)."""
    _text: StreamedText | None
    _wake: Callable[[], None]  # tells the scheduler's worker

    def write(self, fragment: str) -> None:
        """The next fragment of the text (any size; TypeError if not a str)."""
        self._streamed().feed.put(fragment)
        self._wake()

    def end_text(self, error: BaseException | None = None) -> None:
        """The text is complete (with `error`: its source failed, and so does the job)."""
        self._streamed().feed.end(error)
        self._wake()

    def _streamed(self) -> StreamedText:
        if self._text is None:
            raise TypeError("this job's text was given whole: only a submit_text job takes text")
        return self._text


class Writable(Protocol):
    """What pump writes into: a Job (typed here so that this module does not import scheduler.py)."""

    @property
    def done(self) -> bool: ...

    @property
    def cancelled(self) -> bool: ...

    def write(self, fragment: str) -> None: ...

    def end_text(self, error: BaseException | None = None) -> None: ...


def pump(job: Writable, chunks: Iterable[str]) -> threading.Thread:
    """A daemon thread that writes `chunks` into the job as the iterator gives them, then ends
    its text (with the iterator's exception, which fails the job); it stops once the job is
    cancelled or done."""
    it = iter(chunks)

    def run() -> None:
        try:
            for fragment in it:
                if job.done or job.cancelled:
                    return
                job.write(fragment)
        except BaseException as e:  # the job fails with it
            job.end_text(e)
        else:
            job.end_text()

    thread = threading.Thread(target=run, name="qtts-job-text", daemon=True)
    thread.start()
    return thread
