"""A request submitted to the Scheduler (runtime/scheduling/scheduler.py): its chunks as the worker hands
them over, to iterate, to await or to wait for whole, and the worker's state of it."""
from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import numpy as np

from ..audio.audio import Audio, AudioChunk
from ..audio.timestamps import WordStream
from ..engine.context import ModelContext
from ..synthesis.assembly import Assembly
from ..synthesis.pacing import Pacer
from ..synthesis.request import Request
from .scheduler_text import StreamedText, TextInput

_END = object()  # the queue's end marker


class Job(TextInput):
    """One submitted request: its chunks as they come (iterate, or `async for`), or all of it;
    a submit_text job's text with write and end_text. With word_timestamps, each piece's words
    come after its audio, aligned in the reading thread (`async for`: in a thread of its own),
    never in the Scheduler's worker (runtime/audio/timestamps.py)."""

    def __init__(self, ctx: ModelContext, req: Request, eager: bool = False, text: StreamedText | None = None) -> None:
        self._req = req
        self._sample_rate = ctx.sample_rate
        self._eager = eager  # synthesize_batch: pieces decoded whole, as Model.synthesize
        self._queue: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._chunks: list[AudioChunk] = []
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._cancel = threading.Event()
        # worker state; a streamed-text job's last piece is known only once its text tells
        self._asm = Assembly(ctx, req, last_piece=None if text is None else text.is_last)
        self.timings = self._asm.timings
        self._piece = 0
        self._slot: int | None = None
        self._stream: int | None = None
        self._pending: list[np.ndarray] = []  # codes of the chunk (eager: the piece) being gathered
        self._pacer: Pacer | None = None  # streamed: its chunk sizes, told of each chunk put
        self._text = text  # submit_text: the text as it arrives
        self._waiting = False  # it waits for text: its slot sits out, or it cannot be admitted yet
        self._waiting_since: float | None = None  # time.monotonic() when it began to
        self._wake: Callable[[], None] = lambda: None  # tells the worker something changed
        self._words = None if req.timestamps is None else WordStream(req.timestamps, self.timings)

    @property
    def stop_reason(self) -> str | None:
        """The request's stop reason so far: None until its first piece ends."""
        return self._asm.stop_reason

    @property
    def waiting_since(self) -> float | None:
        """A streamed-text job's time.monotonic() since which it has waited for text it was not
        given (all it was given is spoken, or its first words are not final yet); None while it
        has what it needs, and for other jobs (the server's idle timeout, docs/server.md)."""
        return None if self.done else self._waiting_since

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """Stop within one frame and free the slot; the last chunk has stop_reason "cancelled"."""
        self._cancel.set()
        self._wake()

    def __iter__(self) -> Iterator[AudioChunk]:
        return self._iter_chunks() if self._words is None else self._words.chunks(self._iter_chunks())

    def _iter_chunks(self) -> Iterator[AudioChunk]:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                item = self._queue.popleft()
            if item is _END:
                self._raise()
                return
            yield item

    async def __aiter__(self) -> AsyncIterator[AudioChunk]:
        chunks = self._aiter_chunks()
        try:
            async for chunk in chunks:
                if self._words is None:
                    yield chunk
                    continue
                out, ended = self._words.take(chunk)
                yield out
                if ended is not None:
                    words = await asyncio.to_thread(self._words.words_of, *ended, chunk.sample_rate)
                    yield self._words.words_chunk(chunk, words)
        finally:
            await chunks.aclose()

    async def _aiter_chunks(self) -> AsyncIterator[AudioChunk]:
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()
        with self._cond:
            self._waiters.append((loop, ready))
        try:
            while True:
                ready.clear()
                with self._cond:
                    item = self._queue.popleft() if self._queue else None
                if item is None:
                    await ready.wait()
                    continue
                if item is _END:
                    self._raise()
                    return
                yield item
        finally:
            with self._cond:
                self._waiters.remove((loop, ready))

    def result(self, timeout: float | None = None) -> Audio:
        """All of the request's audio once it ended (as Model.synthesize), with its words where
        asked (aligned here, those the chunks' reader aligned already excepted); TimeoutError if
        not done within `timeout` seconds."""
        if not self._done.wait(timeout):
            raise TimeoutError("the request has not finished")
        self._raise()
        if self._eager:
            return self._asm.audio(finish=False)
        samples = np.concatenate([c.samples for c in self._chunks]) if self._chunks else np.zeros(0, np.float32)
        words = None if self._words is None else self._words.all_words(self._chunks)
        return Audio(samples, self._sample_rate, self._asm.codes(), self.stop_reason or "cancelled", self.timings,
                     words)

    def _piece_text(self) -> str:
        """The text of the piece in progress (the worker's, at the piece's end)."""
        return self._req.pieces[self._piece] if self._text is None else self._text.piece_text(self._piece)

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _wait_for_text(self, waiting: bool) -> None:
        """The worker's view of whether the job waits for text (worker thread only)."""
        self._waiting = waiting
        if not waiting:
            self._waiting_since = None
        elif self._waiting_since is None:
            self._waiting_since = time.monotonic()

    def _put(self, item: Any) -> None:
        with self._cond:
            if isinstance(item, AudioChunk):
                self._chunks.append(item)
                if self._pacer is not None:
                    self._pacer.heard(len(item.samples) / item.sample_rate)
            self._queue.append(item)
            self._cond.notify_all()
            for loop, ready in self._waiters:
                try:
                    loop.call_soon_threadsafe(ready.set)
                except RuntimeError:  # that consumer's event loop is closed: nobody waits there
                    pass

    def _end(self, error: BaseException | None = None) -> None:
        self._error = error
        self._done.set()
        self._put(_END)
