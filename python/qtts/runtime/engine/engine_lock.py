"""The engine's lock (runtime/engine/engine.py): one operation at a time per engine, a stream holding
it between chunks (docs/architecture.md, "Layers", rule 2)."""
from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator


def _no_other_caller() -> bool:
    """True when no thread but this one could advance or close a stream: every other live
    thread is qtts's own (named "qtts-...": the pipelined vocoder, the scheduler), none of
    which runs user code."""
    me = threading.current_thread()
    return not any(t is not me and not t.name.startswith("qtts-") for t in threading.enumerate())


class EngineLock:
    """One operation at a time per engine; every other caller waits (docs/architecture.md,
    "Layers", rule 2). A stream holds it between chunks; while the stream is suspended at a chunk
    the lock belongs to the stream, not to a thread, so any thread may advance it (thread pools,
    Starlette's iterate_in_threadpool) and every other caller, on any thread, waits.

    Two cases would wait forever, and raise instead: a nested call from the thread running an
    operation (a progress callback calling the model), and a wait for a suspended stream when no
    other thread is alive that could advance or close it (a script that keeps a stream open and
    calls the model again)."""

    POLL_S = 0.5  # how often a waiter looks again whether it is the only thread left

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: int | None = None  # the thread executing under the lock; None while a stream is suspended
        self._suspended = False

    def __enter__(self) -> None:
        if self._running == threading.get_ident():  # only the holder sets it to its own id
            raise RuntimeError("this qtts.Model is busy with an operation in this thread (a nested call)")
        if not self._lock.acquire(blocking=False):
            while not self._wait():
                pass
        self._running = threading.get_ident()

    def _wait(self) -> bool:
        """One round of waiting: True once the lock is taken."""
        if self._suspended and _no_other_caller():
            gc.collect()  # a stream dropped inside a reference cycle is closed (and unlocks) here
            if self._lock.acquire(blocking=False):
                return True
            raise RuntimeError("this qtts.Model is busy with an unfinished stream and no other thread can finish "
                               "it: exhaust or close the stream (stream.close()) first, or load a second Model")
        return self._lock.acquire(timeout=self.POLL_S)

    def __exit__(self, *exc: object) -> None:
        self._running = None
        self._suspended = False
        self._lock.release()  # a stream may end on another thread than the one that began it

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Around a stream's yield: the lock stays taken, owned by the stream until a thread resumes it."""
        self._running = None
        self._suspended = True
        try:
            yield
        finally:
            self._suspended = False
            self._running = threading.get_ident()  # whichever thread resumed (or closed) the stream
