"""The Scheduler's decode streams (docs/serving.md, "Batched vocoder"): each job's codec stream and
the one batched push of the chunks a step completed. Serial: on the engine's session, in the
Scheduler's worker, between steps. Pipelined (the default off the CPU): on a session of the
Scheduler's own, the push in a thread of its own while the worker goes on with the next step;
every other stream operation first waits for the push in flight (barrier), so a job's chunks,
its stream's resets and its end keep their order, and at most one push is in flight."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..engine.engine import Engine, SessionHandle
from .job import Job


@dataclass
class Emit:
    """A job's chunk whose codes are gathered, waiting for the step's batched decode."""
    job: Job
    codes: np.ndarray
    reason: str | None
    final: bool
    piece_text: str | None = None  # the chunk ends this piece (word timestamps)


Failures = list[tuple[Job, BaseException]]
SessionOf = Callable[[], contextlib.AbstractContextManager[SessionHandle]]


class StreamVocoder:
    def __init__(self, engine: Engine, pipelined: bool) -> None:
        self._engine = engine
        self._own: SessionHandle | None = None  # made at the first stream operation
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="qtts-scheduler-vocoder") if pipelined else None
        self._flight: Future[Failures] | None = None

    @property
    def pipelined(self) -> bool:
        return self._pool is not None

    @contextlib.contextmanager
    def _session(self) -> Iterator[SessionHandle]:
        if self._pool is None:
            with self._engine.session() as s:
                yield s
        else:
            if self._own is None:
                self._own = self._engine.own_session()
            yield self._own

    def barrier(self) -> Failures:
        """Wait for the push in flight; the jobs it failed, for the worker to fail."""
        f, self._flight = self._flight, None
        return [] if f is None else f.result()

    def reset(self, job: Job) -> None:
        """Start the job's stream (anew): an ICL voice's reference frames first, as context whose
        audio is not emitted."""
        if job._stream is None:
            job._stream = self._engine.new_stream_id()
        ref = job._asm.ref
        t0 = time.perf_counter()
        with self._session() as s:
            s.decode_stream_reset(silent_frames=0 if ref is None else len(ref), stream=job._stream)
            if ref is not None:
                s.decode_stream_push(ref, stream=job._stream)
        job._asm.vocoder_ms += (time.perf_counter() - t0) * 1e3

    def close(self, job: Job) -> None:
        if job._stream is not None:
            with self._session() as s:
                s.decode_stream_close(job._stream)
            job._stream = None

    def deliver(self, emits: list[Emit], wait: bool) -> Failures:
        """Decode the emits' codes in one batched call (each on its job's stream) and hand each
        job its chunk. wait=False on the pipelined path: in the thread, after this call returns
        (the caller holds no push in flight: barrier first); the failures come from barrier()."""
        if self._pool is None or wait:
            return _deliver(self._session, emits)
        self._flight = self._pool.submit(_deliver, self._session, emits)
        return []

    def shutdown(self) -> Failures:
        failures = self.barrier()
        if self._pool is not None:
            self._pool.shutdown()
        if self._own is not None:
            self._own._close()
        return failures


def _deliver(session: SessionOf, emits: list[Emit]) -> Failures:
    decoded = [e for e in emits if len(e.codes)]
    try:
        waves = _push(session, decoded)
    except Exception as err:
        return [(e.job, err) for e in emits]
    wav_of = {id(e): w for e, w in zip(decoded, waves, strict=True)}
    failures: Failures = []
    for e in emits:  # one job's failure here is its own (the worker's guard, docs/serving.md)
        wav = wav_of.get(id(e), np.zeros(0, dtype=np.float32))
        try:
            e.job._put(e.job._asm.chunk(wav, e.codes, e.reason, final=e.final, piece_text=e.piece_text))
        except Exception as err:
            failures.append((e.job, err))
    return failures


def _push(session: SessionOf, emits: list[Emit]) -> list[np.ndarray]:
    """Each emit's codes pushed on its job's stream, all in one batched call; each job's
    vocoder_ms gets its frames' share of the call."""
    if not emits:
        return []
    t0 = time.perf_counter()
    with session() as s:
        waves = s.decode_streams_push([(e.job._stream, e.codes) for e in emits])
    ms = (time.perf_counter() - t0) * 1e3
    frames = sum(len(e.codes) for e in emits)
    for e in emits:
        e.job._asm.vocoder_ms += ms * len(e.codes) / frames
    return waves
