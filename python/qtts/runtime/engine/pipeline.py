"""Pipelined streaming: the vocoder on a second session in a worker thread while the generation
goes on, and the automatic split of a Model's threads between them (docs/serving.md,
"Pipelined streaming")."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .engine import SessionHandle

# A request measures the split it ran with once it has this many frames (shorter ones are noise).
MIN_MEASURED_FRAMES = 8


def check_vocoder_threads(value: Any, n_threads: int) -> None:
    """None (auto), 0 (serial) or 1 .. n_threads - 1 threads for the vocoder."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"vocoder_threads must be an int or None (auto), got {type(value).__name__}")
    if not 0 <= value < n_threads:
        raise ValueError(f"vocoder_threads must be between 0 (serial) and n_threads - 1 ({n_threads - 1}), "
                         f"got {value}")


def candidate_split(n_threads: int, generation_ms: float, vocoder_ms: float) -> int:
    """The vocoder's threads when the two stages' serial times are shared out in proportion (each
    stage assumed to scale with its threads), rounded and kept within 1 .. n_threads - 1."""
    share = round(n_threads * vocoder_ms / max(generation_ms + vocoder_ms, 1e-9))
    return min(max(share, 1), n_threads - 1)


@dataclass
class SplitMeasure:
    """What the automatic split has measured, in ms per frame (None: not yet)."""
    serial_ms: float | None = None     # generation + vocoder, both on all threads
    pipelined_ms: float | None = None  # the slower stage, generation and vocoder overlapped
    candidate: int | None = None       # the vocoder threads tried after the serial measure


class ThreadSplit:
    """How a Model's threads are split between generation and the vocoder: fixed by the user, or
    chosen once from the first requests' own stage timings. `vocoder_threads` is the choice (0:
    serial, None while undecided); `next()` is what the next request runs with."""

    def __init__(self, n_threads: int, vocoder_threads: int | None, cpu: bool) -> None:
        check_vocoder_threads(vocoder_threads, n_threads)
        self.n_threads = n_threads
        self.auto = vocoder_threads is None
        # one thread has nothing to split; another device runs the networks off these threads
        self.vocoder_threads = vocoder_threads if not self.auto else None if n_threads > 1 and cpu else 0
        self.measure = SplitMeasure()

    def next(self) -> int:
        if self.vocoder_threads is not None:
            return self.vocoder_threads
        return 0 if self.measure.candidate is None else self.measure.candidate

    def record(self, vocoder_threads: int, frames: int, generation_ms: float, vocoder_ms: float) -> None:
        """A finished request's stage totals: serial first, then the candidate split it suggests
        (each stage's serial time shared out in proportion, the vocoder's share rounded), then
        whichever of the two was faster per frame is kept."""
        if self.vocoder_threads is not None or frames < MIN_MEASURED_FRAMES:
            return
        m = self.measure
        if vocoder_threads == 0 and m.candidate is None:
            m.serial_ms = (generation_ms + vocoder_ms) / frames
            m.candidate = candidate_split(self.n_threads, generation_ms, vocoder_ms)
        elif vocoder_threads == m.candidate and m.serial_ms is not None:
            m.pipelined_ms = max(generation_ms, vocoder_ms) / frames
            self.vocoder_threads = vocoder_threads if m.pipelined_ms < m.serial_ms else 0


class Vocoder:
    """Where a request's codes become samples. Serial (threads 0): on the generating session, at
    once. Pipelined: on the engine's second session in one worker thread, in submission order,
    while the caller generates on the other threads; `push` returns a Future either way.
    busy_ms is the vocoder's own compute time. close() joins the worker (call it before the
    session block ends)."""

    def __init__(self, s: SessionHandle, threads: int) -> None:
        self.threads = threads
        self.busy_ms = 0.0
        self._s = s
        # the second session has a pool of all n threads and normally uses `threads` of them
        self._voc = s if threads == 0 else s.vocoder(s.n_threads)
        self._pool = None if threads == 0 else ThreadPoolExecutor(1, thread_name_prefix="qtts-vocoder")
        self._last: Future[np.ndarray] | None = None

    @property
    def lag(self) -> int:
        """Chunks a stream keeps in flight: the one being vocoded while the next is generated."""
        return 0 if self._pool is None else 1

    def _run(self, fn: Callable[[], np.ndarray]) -> Future[np.ndarray]:
        prev = self._last

        def timed() -> np.ndarray:
            if prev is not None and prev.exception() is not None:  # a failed reset spoils the stream
                raise prev.exception()  # type: ignore[misc]
            t0 = time.perf_counter()
            try:
                return fn()
            finally:
                self.busy_ms += (time.perf_counter() - t0) * 1e3

        if self._pool is None:
            f: Future[np.ndarray] = Future()
            f.set_result(timed())
        else:
            f = self._pool.submit(timed)
        self._last = f
        return f

    def reset(self, silent_frames: int = 0) -> None:
        voc = self._voc

        def reset() -> np.ndarray:
            voc.decode_stream_reset(silent_frames=silent_frames)
            return np.zeros(0, dtype=np.float32)

        self._run(reset)

    def push(self, codes: np.ndarray, alone: bool = False) -> Future[np.ndarray]:
        """The samples of the stream's next frames. alone: the caller waits for them and generates
        nothing meanwhile (a stream's first chunk), so the vocoder may take every thread."""
        if not len(codes):
            f: Future[np.ndarray] = Future()
            f.set_result(np.zeros(0, dtype=np.float32))
            return f
        voc, n = self._voc, self._s.n_threads if alone else self.threads

        def push() -> np.ndarray:
            if voc is not self._s:  # the worker sets its own session's threads, between graphs
                voc.threads = n
            return voc.decode_stream_push(codes)

        return self._run(push)

    def idle(self) -> bool:
        return self._last is None or self._last.done()

    def paced(self, steps: Iterator[int]) -> Iterator[int]:
        """`steps`, the generation's threads set before each: all of them while the vocoder is
        idle (nothing is submitted during a step, so it stays idle), the others' share otherwise."""
        for n in steps:
            self.pace()
            yield n

    def pace(self) -> None:
        if self._pool is not None:
            self._s.threads = self._s.n_threads if self.idle() else self._s.n_threads - self.threads

    def close(self) -> None:
        """Drop what is queued, wait for the chunk in progress, join the worker."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._s.threads = self._s.n_threads
