"""Continuous batching for many requests at once (docs/serving.md, "Batching").

A Scheduler owns a worker thread and an engine Batch of `max_batch` slots. Per iteration the
worker admits queued requests into free slots (prompt, prefill), steps every running request
one frame together (one talker step and one code-predictor pass for all of them), and hands each
request's chunk to its Job once the chunk is complete, decoded on the request's own codec stream
(the chunks completed in one step decoded together, docs/serving.md "Batched vocoder"; off the
CPU while the next step runs, scheduler_vocoder.py).
Chunks follow Model.stream's schedule: the first is `first_chunk_frames` frames, later ones
double up to `max_chunk_frames`, cut short where the listener would otherwise run out of
audio (pacing.py); a request's samples are those Model.stream gives for the same arguments
and seed, and so are its chunks while both keep well ahead of real time. The worker takes the
engine lock once per operation, so eager Model calls from other threads run in between. A
streamed-text job (submit_text) is fed its text between steps and sits out the frames whose text
has not come (scheduler_text.py).
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..engine.context import ModelContext
from ..engine.engine import Batch
from ..settings.config import check_int
from ..settings.options import RequestOptions, StreamOptions, batch_size
from ..synthesis import pacing
from ..synthesis.pacing import Pacer
from ..synthesis.request import STREAMED_TEXT, build_request
from ..synthesis.speech import timed_prompt
from .job import Job
from .scheduler_text import StreamedText, pump
from .scheduler_vocoder import Emit, Failures, StreamVocoder

log = logging.getLogger("qtts.scheduler")


class HasContext(Protocol):
    """A qtts.Model, as the Scheduler sees it: its ModelContext."""

    @property
    def context(self) -> ModelContext: ...

# Serving defaults (docs/serving.md, "Server"): on the CPU a frame's compute grows with B, so a few
# slots; on an accelerator the batched step costs about what one sequence's does up to dozens.
CPU_MAX_BATCH, DEVICE_MAX_BATCH, QUEUE_PER_SLOT = 8, 64, 4


class OnDevice(Protocol):
    @property
    def device(self) -> str: ...


def default_limits(model: OnDevice) -> tuple[int, int]:
    """(max_batch, max_queue) for a server of `model` when none is given: by the device the
    talker runs on."""
    max_batch = CPU_MAX_BATCH if model.device.upper().startswith("CPU") else DEVICE_MAX_BATCH
    return max_batch, QUEUE_PER_SLOT * max_batch
class QueueFull(RuntimeError):
    """max_batch requests are running and max_queue are waiting."""


class SchedulerClosed(RuntimeError):
    """The scheduler is closing or closed: it takes no new requests."""


@dataclass
class SchedulerStats:
    running: int
    queued: int
    max_batch: int
    max_queue: int
    requests_total: int
    frames_total: int
    cancelled_total: int
    batch_size: int  # sequences stepped together in the last step


@dataclass
class _Piece:
    """An eager job's whole piece, waiting for its decode at the end of the step."""
    job: Job
    codes: np.ndarray
    last: bool


class Scheduler:
    """Continuous batching over one Model: submit() requests from any thread, iterate their Jobs."""

    def __init__(self, model: HasContext, *, max_batch: int = 8, max_queue: int = 32, first_chunk_frames: int = 1,
                 max_chunk_frames: int = 8, pipelined_vocoder: bool | None = None) -> None:
        """pipelined_vocoder: vocode a step's chunks on a session of the Scheduler's own while the
        next step runs (None: where the model runs off the CPU; scheduler_vocoder.py)."""
        batch_size("max_batch", max_batch)
        if pipelined_vocoder is not None and not isinstance(pipelined_vocoder, bool):
            raise TypeError(f"pipelined_vocoder must be a bool or None, got {type(pipelined_vocoder).__name__}")
        check_int("max_queue", max_queue, 0, 2**31 - 1)
        self._chunking = StreamOptions.of(locals())
        self._ctx = model.context
        self._engine = self._ctx.engine
        self.max_batch, self.max_queue = max_batch, max_queue
        self._batch: Batch = self._engine.batch(max_batch)
        self._lock = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._running: dict[int, Job] = {}  # slot -> job
        self._parked: list[Job] = []  # streamed-text jobs between pieces, waiting for the next one's text
        self._events = 0  # counts submits, text and cancels: the worker sleeps until it moves
        self._admitting = 0  # taken off the queue, not yet in a slot (prompt and prefill under way)
        self._closing = False
        self._cancel_all = False
        self._failure: BaseException | None = None  # what stopped the worker, if anything did
        self._orphans: set[int] = set()  # slots a failed job left behind: removed before the next step
        self._requests = self._frames = self._cancelled = self._batch_size = 0
        if pipelined_vocoder is None:
            pipelined_vocoder = self._engine.ops == "portable" and not self._engine.device.upper().startswith("CPU")
        self._voc = StreamVocoder(self._engine, pipelined_vocoder)
        self._emits: list[Emit] = []  # chunks waiting for the step's batched decode (worker only)
        self._round_s = 0.0  # a round of the worker's loop that steps, recent ones weighing most
        self._pieces: list[_Piece] = []  # eager pieces waiting for it likewise
        self._worker = threading.Thread(target=self._run, name="qtts-scheduler", daemon=True)
        self._worker.start()

    # -- the API ----------------------------------------------------------------------------
    def submit(self, text: str, *, speaker: str | None = None, language: str = "auto", instruct: str | None = None,
               voice: Any = None, ref_audio: Any = None, ref_text: str | None = None, x_vector_only_mode: bool = False,
               seed: int | None = None, split_sentences: Any = "auto", frame_budget: int | str | None = "auto",
               non_streaming_mode: bool | None = None, word_timestamps: bool = False, **sampling: Any) -> Job:
        """Queue a request (Model.stream's arguments); validated here, in the caller's thread."""
        return self._submit(text, RequestOptions.of(locals()), sampling, eager=False)


    def submit_text(self, chunks: Iterable[str] | None = None, **kwargs: Any) -> Job:
        """Queue a request whose text arrives later (Model.stream_text's keyword arguments): read
        from `chunks` in a thread of its own, or given with Job.write and ended with Job.end_text.
        It is admitted once its first word is final, and its slot sits out the frames whose text
        has not come; its samples are those of Model.stream(full text, non_streaming_mode=False)
        with the same seed (docs/serving.md, "Streamed text in a batch")."""
        if chunks is not None and (isinstance(chunks, (str, bytes)) or not isinstance(chunks, Iterable)):
            raise TypeError(f"chunks must be an iterable of str fragments, got {type(chunks).__name__}")
        if kwargs.pop("non_streaming_mode", False) is not False:
            raise ValueError("streamed text needs non_streaming_mode=False (the text goes in with the frames)")
        opts = dataclasses.replace(RequestOptions.take(kwargs), non_streaming_mode=False)
        job = self._submit(STREAMED_TEXT, opts, kwargs, eager=False)
        if chunks is not None:
            pump(job, chunks)
        return job

    def submit_eager(self, text: str, **kwargs: Any) -> Job:
        """As submit, for Model.synthesize_batch: no chunks; each piece is decoded whole, with the
        other pieces that end in the same step, into the samples of Model.synthesize; Job.result()."""
        return self._submit(text, RequestOptions.take(kwargs), kwargs, eager=True)

    @property
    def pipelined_vocoder(self) -> bool:
        """Whether a step's chunks are vocoded while the next step runs (scheduler_vocoder.py)."""
        return self._voc.pipelined

    @property
    def failure(self) -> BaseException | None:
        """The exception that stopped the worker (a bug outside any one job), None while it runs
        or after it ended normally: then the Scheduler serves nothing more (SchedulerClosed)."""
        return self._failure

    @property
    def stats(self) -> SchedulerStats:
        with self._lock:
            return SchedulerStats(len(self._running) + len(self._parked), len(self._queue), self.max_batch,
                                  self.max_queue, self._requests, self._frames, self._cancelled, self._batch_size)

    def close(self, *, cancel: bool = False, timeout: float | None = None) -> None:
        """Stop taking requests; let running and queued ones finish (cancel=True: cancel them)
        and join the worker."""
        with self._lock:
            self._closing = True
            self._cancel_all = self._cancel_all or cancel
            self._lock.notify_all()
        if threading.current_thread() is not self._worker:
            self._worker.join(timeout)

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------
    def _closed(self) -> SchedulerClosed:
        if self._failure is not None:
            return SchedulerClosed(f"the scheduler stopped: its worker failed ({self._failure!r})")
        return SchedulerClosed("the scheduler is closed")

    def _submit(self, text: str | object, opts: RequestOptions, sampling: dict[str, Any], eager: bool) -> Job:
        if self._closing:
            raise self._closed()
        req = build_request(self._ctx, text, opts, sampling)
        streamed = StreamedText(self._ctx, req, opts.split_sentences) if text is STREAMED_TEXT else None
        job = Job(self._ctx, req, eager, streamed)
        job._wake = self._wake
        if not eager:
            job._pacer = Pacer(self._chunking.first_chunk_frames, self._chunking.max_chunk_frames)
        with self._lock:
            if self._closing:
                raise self._closed()
            running = len(self._running) + len(self._parked)  # as stats counts them
            if len(self._queue) >= self.max_queue + self.max_batch - running - self._admitting:
                raise QueueFull(f"the queue is full: {running} requests are running and {len(self._queue)} are "
                                f"waiting (max_batch {self.max_batch}, max_queue {self.max_queue})")
            self._queue.append(job)
            self._requests += 1
            self._events += 1
            self._lock.notify_all()
        return job

    def _wake(self) -> None:
        with self._lock:
            self._events += 1
            self._lock.notify_all()

    def _run(self) -> None:
        try:
            self._loop()
            self._apply(self._voc.shutdown())
        except BaseException as e:  # a bug outside any one job: no consumer may wait forever
            with self._lock:
                self._failure = e
                self._closing = True
                jobs = [*self._queue, *self._running.values(), *self._parked]
                self._queue.clear()
                self._parked.clear()
            try:
                self._voc.shutdown()  # the push in flight ends before its jobs fail
            except Exception:
                pass  # its jobs fail below
            for job in jobs:
                self._fail(job, e)
            log.error("the scheduler's worker stopped; every request fails from now on", exc_info=e)

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._running and not self._parked and not self._closing:
                    self._lock.wait()
                events = self._events
                if self._cancel_all:
                    for job in [*self._queue, *self._running.values(), *self._parked]:
                        job._cancel.set()
                if self._closing and not self._queue and not self._running and not self._parked:
                    return
                # parked jobs hold their slots; a streamed-text job waits in the queue, without
                # holding up those behind it, until its first word is final
                admit = [j for j in self._parked if self._ready(j)]
                self._parked = [j for j in self._parked if j not in admit]
                room = self.max_batch - len(self._running) - len(self._parked) - len(admit)
                for job in [j for j in self._queue if self._ready(j)][:max(room, 0)]:
                    self._queue.remove(job)
                    admit.append(job)
                self._admitting = len(admit)
            round_start = pacing.now()
            for job in admit:
                self._start(job)
            self._cancel_waiting()
            self._feed_text()
            with self._lock:
                running = dict(self._running)
            if any(not job._waiting for job in running.values()):
                self._step(running)
                # a round: admissions, the step and its chunks' decode (the latest weighs most)
                took = pacing.now() - round_start
                self._round_s = took if self._round_s == 0.0 else 0.5 * (self._round_s + took)
            else:
                self._drop({slot: job for slot, job in running.items() if self._is_cancelled(job)})
                self._barrier()  # the chunks so far out before the wait
                with self._lock:  # every slot waits for text, or none is running: until something moves
                    while not admit and self._events == events and not self._cancel_all:
                        self._lock.wait()

    def _ready(self, job: Job) -> bool:
        if job._text is None or job._cancel.is_set():
            return True
        ready = job._text.ready(job._piece)  # never raises
        job._wait_for_text(not ready)
        return ready

    def _guarded(self, job: Job, part: Callable[..., None], *args: Any) -> None:
        """One job's part of a round (admitting, feeding, stepping, finishing it): an exception
        fails that job alone and the loop goes on (docs/serving.md, "The worker's guard")."""
        try:
            part(*args)
        except Exception as e:
            self._fail(job, e)

    def _feed_text(self) -> None:
        """Append the text tokens settled since the last look to the running streamed-text jobs."""
        with self._lock:
            fed = [(slot, job, job._text) for slot, job in self._running.items() if job._text is not None]
        for slot, job, text in fed:  # the text's source failed, or its text is bad: this job only
            self._guarded(job, self._feed, job, text, slot)

    def _feed(self, job: Job, text: StreamedText, slot: int) -> None:
        if text.feed_slot(self._engine, self._batch, slot):
            job._wait_for_text(False)

    def _cancel_waiting(self) -> None:
        with self._lock:
            gone = [j for j in [*self._queue, *self._parked] if j._cancel.is_set()]
            self._queue = collections.deque(j for j in self._queue if j not in gone)
            self._parked = [j for j in self._parked if j not in gone]
        for j in gone:
            self._guarded(j, self.finish_timings, j, "cancelled")

    def _start(self, job: Job) -> None:
        """Admit a job (or its next piece) into a slot: prompt, prefill, decode stream."""
        try:
            self._guarded(job, self._admit, job)  # a bad prompt, or a failed text source: its own request only
        finally:
            with self._lock:
                self._admitting -= 1

    def _admit(self, job: Job) -> None:
        if self._is_cancelled(job):
            self.finish_timings(job, "cancelled")
            return
        req, i = job._req, job._piece
        got = job._text.begin(i) if job._text is not None else None
        if job._text is not None and got is None:  # the text ended: no piece i
            self._end_text(job)
            return
        if not job._eager:  # first: a failed reset leaves no slot behind
            self._barrier()
            self._voc.reset(job)
        with self._engine.session() as s:
            if job._text is not None and got is not None:
                if i:  # the pause after the piece before
                    job._put(job._asm.pause_chunk())
                slot = job._text.add(s, self._batch, got, job.timings)
            else:
                prompt = timed_prompt(self._ctx, s, req, req.pieces[i], job.timings)
                slot = s.batch_add(self._batch, prompt.embeddings, prompt.trailing,
                                   req.config.for_piece(i, req.pieces[i]))
        job._slot, job._pending = slot, []  # first: a failure from here on frees the slot
        job._wait_for_text(False)
        if job._pacer is not None:
            job._pacer.start_piece()
        with self._lock:
            self._running[slot] = job

    def _step(self, running: dict[int, Job]) -> None:
        cancelled = {slot: job for slot, job in running.items() if self._is_cancelled(job)}
        if cancelled:
            self._drop(cancelled)
            running = {slot: job for slot, job in running.items() if slot not in cancelled}
            if not running:
                return
        try:
            with self._engine.session() as s:
                for slot in self._orphans & set(s.batch_active(self._batch)):
                    s.batch_remove(self._batch, slot)
                self._orphans.clear()
                results = s.batch_step(self._batch, 1)
        except Exception as e:  # the engine failed: every running request gets the error
            for job in running.values():
                self._fail(job, e)
            return
        with self._lock:
            self._batch_size = len(results)
            self._frames += sum(len(codes) for _, codes, _, _ in results)
        late: dict[int, Job] = {}
        for slot, codes, reason, raw in results:
            job = running.get(slot)
            if job is None or job.done:  # failed during this round (its slot is being freed)
                continue
            job._wait_for_text(bool(raw.get("needs_text")))
            if reason is None and self._is_cancelled(job):
                # cancelled during the step, or while the jobs before it were vocoded: no more chunks
                self._guarded(job, job._asm.step, raw)
                late[slot] = job
                continue
            self._guarded(job, self._advance, job, codes, reason, raw)
        self._flush()
        self._decode_pieces()
        if late:
            self._drop(late)

    def _is_cancelled(self, job: Job) -> bool:
        """The job is cancelled, by itself or by close(cancel=True) (whose flags the loop sets on
        its next round: read here so that a shutdown skips the rest of the current round's work)."""
        return self._cancel_all or job._cancel.is_set()

    def _drop(self, cancelled: dict[int, Job]) -> None:
        """Cancelled jobs leave their slots at once rather than after one more batch step, which
        would still run their talker step: on busy cores a step can take seconds (docs/serving.md,
        "Server", shutdown)."""
        try:
            with self._engine.session() as s:
                for slot in cancelled:
                    s.batch_remove(self._batch, slot)
        except Exception as e:
            for job in cancelled.values():
                self._fail(job, e)
            return
        for job in cancelled.values():  # the native times as the job's last step reported them
            self._guarded(job, self._advance, job, self._ctx.empty_codes(), "cancelled", None)
        self._decode_pieces()

    def _advance(self, job: Job, codes: np.ndarray, reason: str | None, raw: dict[str, float] | None) -> None:
        """A job's frames of one step (raw: the piece's native times, None: as last reported):
        complete chunks go out; at a piece's end the next starts."""
        asm = job._asm
        if raw is not None:
            asm.step(raw)
        if len(codes):
            job._pending.append(codes)
        n = sum(len(c) for c in job._pending)
        if reason is None:
            # what waits for the next chance is heard a round from now, or two where the vocoder
            # is pipelined, plus a round to spare for one longer than most (a prefill; pacing.py)
            rounds = 3 if self._voc.pipelined else 2
            if job._pacer is not None and job._pacer.due(n, rounds * self._round_s):
                self._emit(job, None)
                job._pacer.cut()
            elif n and job._waiting:  # the audio so far goes out while the text is awaited
                self._emit(job, None)
            return
        with self._lock:
            self._running.pop(job._slot, None)
        job._slot = None
        asm.end_piece(reason)
        last = asm.is_last(job._piece, reason)  # a streamed-text job's: once its text tells
        if job._eager:  # decoded with the other pieces that end in this step, then _next_piece
            codes = np.concatenate(job._pending) if job._pending else self._ctx.empty_codes()
            job._pending = []
            self._pieces.append(_Piece(job, codes, last))
            return
        if reason == "cancelled":  # nobody hears them (a client gone, a shutdown): not vocoded, so
            job._pending = []  # that a cancel frees the engine now, not after decoding a chunk per slot
        self._emit(job, reason if last else None, final=last,
                   piece_text=None if reason == "cancelled" else job._piece_text())
        self._flush(wait=True)  # before the stream is closed, or reset for the next piece
        if not job.done:  # unless the decode failed it
            self._next_piece(job, last)

    def _next_piece(self, job: Job, last: bool) -> None:
        """After a piece's audio: the job ends, or its next piece is admitted."""
        if last:
            self.finish_timings(job, None)
            return
        job._piece += 1
        if job._text is not None:  # admitted again (the pause first) once the next piece's text is final
            with self._lock:
                self._parked.append(job)
            return
        if not job._eager:
            job._put(job._asm.pause_chunk())
        with self._lock:  # out of its slot until the next piece is admitted: still counted
            self._admitting += 1
        self._start(job)

    def _end_text(self, job: Job) -> None:
        """A streamed-text job whose text ended after its last piece's final chunk went out: an
        empty last chunk carries the stop reason (as Model.stream_text's)."""
        if job._piece == 0:
            self._fail(job, ValueError("text is empty"))
            return
        # the last piece's reason, as on the chunk that ends a known last piece (the request's
        # stop_reason stays the merged one); the empty chunk finishes the timings
        self.finish_timings(job, job._asm.piece_reason or "eos")

    def _emit(self, job: Job, reason: str | None, final: bool = False, piece_text: str | None = None) -> None:
        """Queue the job's chunk of gathered codes (piece_text: it ends that piece); _flush decodes
        the queued chunks of every job together and hands them out (docs/serving.md, "Batched vocoder")."""
        codes = np.concatenate(job._pending) if job._pending else self._ctx.empty_codes()
        job._pending = []
        self._emits.append(Emit(job, codes, reason, final, piece_text))

    def _flush(self, wait: bool = False) -> None:
        """Decode the queued chunks in one batched call (each on its job's own codec stream, the
        same samples as alone) and hand each to its job; pipelined, while the next step runs
        unless `wait`. A failure fails those jobs."""
        self._barrier()
        emits, self._emits = [e for e in self._emits if not e.job.done], []
        if emits:
            self._apply(self._voc.deliver(emits, wait))

    def _barrier(self) -> None:
        """Wait for the pipelined push in flight (scheduler_vocoder.py) and fail the jobs it failed."""
        self._apply(self._voc.barrier())

    def _apply(self, failures: Failures) -> None:
        for job, err in failures:
            if not job.done:
                self._fail(job, err)

    def _decode_pieces(self) -> None:
        """As Model.synthesize: each eager piece that ended in this step decoded whole, alone (an
        ICL voice's after its reference frames, then cut; docs/serving.md "Batched vocoder" on
        why not together). Then each job goes on. A failure fails that job."""
        pieces, self._pieces = [p for p in self._pieces if not p.job.done], []
        for p in pieces:
            asm = p.job._asm
            try:
                wav = None
                if len(p.codes):
                    with self._engine.session() as s:
                        wav = asm.decode(s, p.codes)
            except Exception as err:
                self._fail(p.job, err)
                continue
            self._guarded(p.job, self._piece_done, p, wav)

    def _piece_done(self, p: _Piece, wav: np.ndarray | None) -> None:
        p.job._asm.add_piece(wav, p.codes, p.last)
        if p.last:
            p.job._asm.finish()
        self._next_piece(p.job, p.last)

    def finish_timings(self, job: Job, reason: str | None) -> None:
        """The job ended; `reason` set: it ended before generating (cancelled while queued)."""
        if reason is not None:
            job._asm.end_piece(reason)
            if not job._eager:
                job._put(job._asm.end_chunk(reason))
        if job._asm.stop_reason == "cancelled":
            with self._lock:
                self._cancelled += 1
        self._close_stream(job)
        job._end()

    def _fail(self, job: Job, error: BaseException) -> None:
        """End the job with `error`, freeing what it holds; never raises (an engine that cannot
        free the slot now leaves it to the next step)."""
        slot, job._slot = job._slot, None
        with self._lock:
            if slot is not None:
                self._running.pop(slot, None)
            if job in self._parked:
                self._parked.remove(job)
        if slot is not None:
            try:
                with self._engine.session() as s:
                    if slot in s.batch_active(self._batch):
                        s.batch_remove(self._batch, slot)
            except Exception:
                self._orphans.add(slot)
        try:
            self._close_stream(job)
        except Exception:
            job._stream = None  # the engine failed: the stream goes with its session
        if not job.done:
            job._end(error)

    def _close_stream(self, job: Job) -> None:
        if job._stream is not None:
            self._barrier()
            self._voc.close(job)
