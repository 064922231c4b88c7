"""Runners on one machine: the items in this process, or spread over --jobs worker processes.

Each worker (a `spawn`ed process of a ProcessPoolExecutor) loads the same GGUF; its weights are
mmapped, so the workers share them through the page cache and each extra worker adds only its
private memory (KV caches, compute buffers, the tokenizer): see `memory()`. The parent hands out
chunks of up to `max_batch` items and receives each chunk's audio; it alone writes the files and the
results table (docs/bulk.md, "How it runs")."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import QttsError
from ..runtime.settings.options import LoadOptions
from .manifest import Item
from .synth import Finished, Synth

if TYPE_CHECKING:
    from ..runtime.model.model import Model


@dataclass(frozen=True)
class ModelSpec:
    """How every worker loads the model: a path (or a repo id, through qtts.load's cache) and the
    load options, carried whole (runtime/settings/options.py)."""
    model: str
    options: LoadOptions = field(default_factory=LoadOptions)

    def load(self) -> Model:
        from ..runtime.model.model import open_model

        return open_model(self.model, self.options)

    def with_threads(self, n_threads: int) -> ModelSpec:
        return replace(self, options=replace(self.options, n_threads=n_threads))


def split_threads(total: int | None, workers: int) -> int:
    """Threads per worker: the total (default: the physical cores) divided, at least 1 each."""
    from ..threads import resolve_threads

    return max(1, resolve_threads(total) // workers)


def memory(pid: int | None = None) -> dict[str, float]:
    """MB of a process from /proc/PID/smaps_rollup: rss; pss (shared pages divided among their
    users: the honest share of the mmapped weights); private (pages no other process maps: the
    weights too while it is the only worker) and anonymous (heap, KV caches, compute buffers:
    what every extra worker adds, as the weights' pages are shared). Empty where the file does
    not exist (not Linux)."""
    fields = {"Rss": "rss_mb", "Pss": "pss_mb", "Private_Clean": "private_mb", "Private_Dirty": "private_mb",
              "Anonymous": "anonymous_mb"}
    out: dict[str, float] = {"pid": pid or os.getpid()}
    try:
        with open(f"/proc/{pid or os.getpid()}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in fields:
                    out[fields[key]] = out.get(fields[key], 0.0) + int(rest.split()[0]) / 1024
    except OSError:
        return {}
    return out


class LocalRunner:
    """All items in this process, through one model's batching."""

    def __init__(self, spec: ModelSpec, max_batch: int) -> None:
        self.spec, self.max_batch = spec, max_batch
        self.memory: dict[int, dict[str, float]] = {}

    def run(self, items: list[Item]) -> Iterator[Finished]:
        synth = Synth(self.spec.load(), self.max_batch)
        for n, fin in enumerate(synth.run(items)):
            if n == 0:  # measured once the model is loaded and its buffers are in use
                self.memory[os.getpid()] = memory()
            yield fin
        self.memory[os.getpid()] = memory()


_SYNTH: Synth | Exception | None = None  # the worker process's model, or why it could not load
PARENT_POLL_S = 0.2  # how often a worker checks that its parent is alive
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent: int, pdeathsig: bool) -> None:
    """End this worker when its parent ends, however it ends (SIGKILL included): the parent
    alone writes files and results, so a worker left behind only holds memory and cores.

    On Linux the kernel sends SIGKILL (PR_SET_PDEATHSIG) when the thread that spawned this
    process ends, which is the parent's end when it was spawned from the main thread
    (`pdeathsig`); elsewhere, and as the fallback, a thread notices the parent is gone (this
    process re-parented) within PARENT_POLL_S. The GIL is free while native code computes, so it
    runs mid-generation."""
    if pdeathsig and sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # no cleanup to do: the parent alone owns the output

    if os.getppid() != parent:  # it ended before the signal was armed
        os._exit(1)
    threading.Thread(target=watch, name="qtts-parent-watch", daemon=True).start()


def _init_worker(spec: ModelSpec, max_batch: int, parent: int, pdeathsig: bool) -> None:
    global _SYNTH
    _die_with_parent(parent, pdeathsig)
    try:
        _SYNTH = Synth(spec.load(), max_batch)
    except Exception as e:  # noqa: BLE001  (raised from the first chunk, so the parent reports it once)
        _SYNTH = e


def _work(items: list[Item]) -> tuple[list[Finished], dict[str, float]]:
    if isinstance(_SYNTH, Exception):
        raise _SYNTH
    assert _SYNTH is not None, "the worker was not initialised"
    return list(_SYNTH.run(items)), memory()


def stop_pool(ex: ProcessPoolExecutor, workers: set[Any]) -> None:
    """Stop `ex`'s workers mid-chunk so that `ex.shutdown(wait=True)` returns. A worker killed
    while it sends a chunk's audio (hundreds of KB, several pipe writes) leaves part of a message
    in the result pipe, and the executor's manager thread then waits in recv() for the rest for
    ever: the workers' write ends close with them, but this process holds the pipe's other one.
    Closing it once the workers are gone ends that read (EOFError: the pool is broken, as it is).
    `_result_queue` is CPython's (3.9-3.13), hence the getattr."""
    for p in workers:
        p.terminate()
    for p in workers:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
    writer = getattr(getattr(ex, "_result_queue", None), "_writer", None)
    if writer is not None:
        writer.close()


class JobsRunner:
    """`jobs` worker processes, the threads split between them."""

    def __init__(self, spec: ModelSpec, jobs: int, max_batch: int) -> None:
        self.spec = spec.with_threads(split_threads(spec.options.n_threads, jobs))
        self.jobs, self.max_batch = jobs, max_batch
        self.memory: dict[int, dict[str, float]] = {}

    def run(self, items: list[Item]) -> Iterator[Finished]:
        import multiprocessing

        size = max(1, min(self.max_batch, -(-len(items) // self.jobs)))  # every worker busy, even on few items
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        # The pool spawns its workers from the thread that submits (this one).
        main = threading.current_thread() is threading.main_thread()
        before = set(multiprocessing.active_children())
        ex = ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_init_worker, initargs=(self.spec, self.max_batch, os.getpid(), main))
        finished, workers = False, set()
        try:
            todo: set[Future[Any]] = {ex.submit(_work, c) for c in chunks}
            workers = set(multiprocessing.active_children()) - before
            while todo:
                ready, todo = wait(todo, return_when=FIRST_COMPLETED)
                for f in ready:
                    try:
                        results, mem = f.result()
                    except BrokenProcessPool as e:
                        raise QttsError(f"a worker process died ({e}); is the model loadable with "
                                        f"`qtts-cli info {self.spec.model}`?") from None
                    if mem:
                        self.memory[int(mem["pid"])] = mem
                    yield from results
            finished = True
        finally:
            if not finished:  # an error, SIGTERM or a closed iterator: stop the workers mid-chunk
                stop_pool(ex, workers)
            ex.shutdown(wait=True, cancel_futures=True)
