"""Requests queued for one model: submit text, iterate its chunks, cancel it.

A serial implementation of the scheduler interface: one worker thread runs Model.stream for each
job in submission order, so `batch_size` is at most 1. It keeps the interface's accounting (a job
counts against max_batch + max_queue from submit until its generation ends) so that callers see
the same QueueFull / SchedulerClosed behaviour as with a batching scheduler.
"""
from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .audio import Audio, AudioChunk, Timings
from .config import check_int

if TYPE_CHECKING:
    from .model import Model

MAX_SLOTS = 4096


class QueueFull(RuntimeError):
    """max_batch jobs are running and max_queue are waiting: try again later."""


class SchedulerClosed(RuntimeError):
    """The scheduler is closing or closed and admits no new job."""


@dataclass
class SchedulerStats:
    running: int
    queued: int
    max_batch: int
    max_queue: int
    requests_total: int
    frames_total: int
    cancelled_total: int
    batch_size: int  # sequences stepped together right now


_END = object()


class Job:
    """One submitted request: its chunks as they are generated (consumed once, by __iter__,
    __aiter__ or result)."""

    def __init__(self, scheduler: Scheduler, model: Model, text: str, kwargs: dict[str, Any]) -> None:
        self._scheduler = scheduler
        self.timings = Timings()
        self.stop_reason: str | None = None
        self._sample_rate = model.sample_rate
        self._empty_codes = model.engine.empty_codes()
        # Model.stream validates its arguments now, in the caller's thread; generation starts
        # when the worker first iterates it.
        self._stream = model.stream(text, timings=self.timings, **kwargs)
        self._items: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._cancel = threading.Event()
        self._finished = threading.Event()
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def _put(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_wake, fut)

    def _cancelled_chunk(self, index: int) -> AudioChunk:
        return AudioChunk(np.zeros(0, dtype=np.float32), self._sample_rate, self._empty_codes, index, "cancelled")

    def _take(self, item: Any) -> AudioChunk | None:
        if item is _END:
            if self._error is not None:
                raise self._error
            return None
        return item

    def __iter__(self) -> Iterator[AudioChunk]:
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                item = self._items.popleft()
            chunk = self._take(item)
            if chunk is None:
                return
            yield chunk

    async def __aiter__(self) -> AsyncIterator[AudioChunk]:
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                item = self._items.popleft() if self._items else None
                if item is None:
                    fut = loop.create_future()
                    self._waiters.append((loop, fut))
            if item is None:
                await fut
                continue
            chunk = self._take(item)
            if chunk is None:
                return
            yield chunk

    def cancel(self) -> None:
        """Stop within one frame (the last chunk then has stop_reason "cancelled")."""
        self._cancel.set()
        self._scheduler._cancel_running(self)

    def result(self, timeout: float | None = None) -> Audio:
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the job did not finish within {timeout} s")
        chunks = list(self)
        samples = [c.samples for c in chunks]
        codes = [c.codes for c in chunks]
        return Audio(np.concatenate(samples) if samples else np.zeros(0, dtype=np.float32), self._sample_rate,
                     np.concatenate(codes) if codes else self._empty_codes, self.stop_reason or "cancelled",
                     self.timings)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Scheduler:
    """Runs submitted jobs on a worker thread (see the module docstring)."""

    def __init__(self, model: Model, *, max_batch: int = 8, max_queue: int = 32, first_chunk_frames: int = 1,
                 max_chunk_frames: int = 8) -> None:
        check_int("max_batch", max_batch, 1, MAX_SLOTS)
        check_int("max_queue", max_queue, 0, MAX_SLOTS)
        check_int("first_chunk_frames", first_chunk_frames, 1, 4096)
        check_int("max_chunk_frames", max_chunk_frames, first_chunk_frames, 4096)
        self.model = model
        self._max_batch, self._max_queue = max_batch, max_queue
        self._chunking = dict(first_chunk_frames=first_chunk_frames, max_chunk_frames=max_chunk_frames)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: collections.deque[Job] = collections.deque()
        self._current: Job | None = None
        self._closing = False
        self._requests = self._frames = self._cancelled = 0
        self._worker = threading.Thread(target=self._run, name="qtts-scheduler", daemon=True)
        self._worker.start()

    def submit(self, text: str, **kwargs: Any) -> Job:
        for k in ("first_chunk_frames", "max_chunk_frames", "timings"):
            if k in kwargs:
                raise TypeError(f"unexpected argument {k}: the scheduler sets it")
        with self._lock:
            self._admit()
        job = Job(self, self.model, text, {**kwargs, **self._chunking})
        with self._lock:
            self._admit()  # again: validation ran outside the lock
            self._queue.append(job)
            self._requests += 1
            self._wake.notify()
        return job

    def _admit(self) -> None:
        if self._closing:
            raise SchedulerClosed("the scheduler is shutting down and admits no new request")
        if len(self._queue) + (self._current is not None) >= self._max_batch + self._max_queue:
            raise QueueFull(f"{self._max_batch} requests running and {self._max_queue} waiting; try again later")

    @property
    def stats(self) -> SchedulerStats:
        with self._lock:
            running = int(self._current is not None)
            return SchedulerStats(running, len(self._queue), self._max_batch, self._max_queue, self._requests,
                                  self._frames, self._cancelled, running)

    def _cancel_running(self, job: Job) -> None:
        with self._lock:  # the engine's flag is cleared when the next generation begins
            if self._current is job:
                self.model.cancel()

    def close(self, *, cancel: bool = False, timeout: float | None = None) -> None:
        with self._lock:
            self._closing = True
            doomed = [*self._queue, *([self._current] if self._current else [])] if cancel else []
            self._wake.notify()
        for job in doomed:
            job.cancel()  # takes the lock itself
        self._worker.join(timeout)

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._wake.wait()
                if not self._queue:
                    return
                job = self._current = self._queue.popleft()
            try:
                self._generate(job)
            finally:
                with self._lock:
                    self._current = None
                    self._cancelled += job.stop_reason == "cancelled"
                job._finished.set()
                job._put(_END)

    def _generate(self, job: Job) -> None:
        index = 0
        stream = job._stream
        try:
            if job.cancel_requested:
                chunk = job._cancelled_chunk(0)
                job.stop_reason = chunk.stop_reason
                job._put(chunk)
                return
            for chunk in stream:
                with self._lock:
                    self._frames += len(chunk.codes)
                job.stop_reason = chunk.stop_reason
                job._put(chunk)
                index = chunk.index + 1
                if chunk.stop_reason is None and job.cancel_requested:
                    # a cancel that fell between two pieces, where the engine clears its flag
                    job.stop_reason = "cancelled"
                    job._put(job._cancelled_chunk(index))
                    return
        except Exception as e:  # re-raised to the consumer
            job._error = e
        finally:
            stream.close()
