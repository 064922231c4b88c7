"""The Scheduler's worker as a fortress (docs/serving.md, "The worker's guard"): an exception
raised while one job is prepared, fed, stepped, decoded or finished fails that job alone, with
that exception; the job beside it yields exactly Model.stream's chunks, the worker goes on, and
what the failed job held is freed. Faults are injected into one job (picked by its seed) at each
of those places; an exception outside any job stops the worker, which the Scheduler reports."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qtts
from qtts.runtime.scheduling import scheduler as scheduler_module
from qtts.runtime.scheduling.scheduler import Scheduler, SchedulerClosed
from qtts.runtime.scheduling.scheduler_text import StreamedText
from qtts.runtime.synthesis.assembly import Assembly

VICTIM = 666  # the seed of the job the fault hits
TEXT = "Hello world, this is a tiny test."
OTHER = "A second request runs beside it, and is not disturbed."
ARGS = dict(speaker="ryan", max_new_tokens=12)


class Injected(RuntimeError):
    """A fault standing for any bug in one job's handling."""


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)


def _seed_of(obj: Any) -> int:
    return int(obj.req.config.seed)


def _fault(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, seed_of: Callable[..., int]) -> None:
    """owner.name raises Injected when called for the victim."""
    original = getattr(owner, name)

    def faulty(*args: Any, **kwargs: Any) -> Any:
        if seed_of(*args, **kwargs) == VICTIM:
            raise Injected(f"{name} failed")
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, faulty)


# where: (owner, method, the victim's seed from the call's arguments)
FAULTS: dict[str, tuple[Any, str, Callable[..., int]]] = {
    "prepare": (scheduler_module, "timed_prompt", lambda ctx, s, req, *a: int(req.config.seed)),
    "settle text": (StreamedText, "_settled", lambda self, *a: _seed_of(self)),  # admission's look at the text
    "feed text": (StreamedText, "more", lambda self, *a: _seed_of(self)),
    "step": (Assembly, "step", lambda self, *a: _seed_of(self)),
    "decode": (Assembly, "chunk", lambda self, *a, **k: _seed_of(self)),
    "finish": (Assembly, "end_piece", lambda self, *a: _seed_of(self)),
}


def _expected(cv: qtts.Model, text: str, seed: int, **kw: Any) -> np.ndarray:
    return np.concatenate([c.samples for c in cv.stream(text, seed=seed, **ARGS, **kw)])


# the pipelined vocoder's thread matters where chunks are made and decoded
CASES = [(where, False) for where in FAULTS] + [("step", True), ("decode", True)]


@pytest.mark.parametrize(("where", "pipelined"), CASES, ids=[f"{w}-{'pipelined' if p else 'serial'}" for w, p in CASES])
def test_a_fault_fails_its_job_alone(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch, where: str,
                                     pipelined: bool) -> None:
    want = _expected(cv, OTHER, 3)
    want_text = _expected(cv, TEXT, 4, non_streaming_mode=False)
    _fault(monkeypatch, *FAULTS[where])
    with Scheduler(cv, max_batch=2, max_queue=4, pipelined_vocoder=pipelined) as sched:
        streamed = where in ("settle text", "feed text")
        victim = sched.submit_text(iter([TEXT[:12], TEXT[12:]]), seed=VICTIM, **ARGS) if streamed \
            else sched.submit(TEXT, seed=VICTIM, **ARGS)
        other = sched.submit(OTHER, seed=3, **ARGS)
        with pytest.raises(Injected):
            list(victim)
        np.testing.assert_array_equal(np.concatenate([c.samples for c in other]), want)
        # the worker goes on: a streamed-text job after it is whole
        after = sched.submit_text(iter([TEXT[:9], TEXT[9:]]), seed=4, **ARGS)
        np.testing.assert_array_equal(np.concatenate([c.samples for c in after]), want_text)
        assert sched.failure is None
        stats = sched.stats
        assert (stats.running, stats.queued) == (0, 0)


def test_a_fault_finishing_a_cancelled_job(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job cancelled in the queue (waiting for its first word) whose end fails."""
    _fault(monkeypatch, Assembly, "end_chunk", lambda self, *a: _seed_of(self))
    with Scheduler(cv, max_batch=1, max_queue=4) as sched:
        victim = sched.submit_text(seed=VICTIM, **ARGS)  # no text yet: queued
        victim.cancel()
        with pytest.raises(Injected):
            list(victim)
        assert len(sched.submit(OTHER, seed=3, **ARGS).result(timeout=60).samples) > 0
        assert sched.failure is None


def test_a_fault_in_an_eager_piece(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """synthesize_batch's pieces are decoded whole at the end of a step: a failure adding one."""
    _fault(monkeypatch, Assembly, "add_piece", lambda self, *a: _seed_of(self))
    want = cv.synthesize(OTHER, seed=3, **ARGS).samples
    with Scheduler(cv, max_batch=2, max_queue=4) as sched:
        victim = sched.submit_eager(TEXT, seed=VICTIM, **ARGS)
        other = sched.submit_eager(OTHER, seed=3, **ARGS)
        with pytest.raises(Injected):
            victim.result(timeout=60)
        np.testing.assert_array_equal(other.result(timeout=60).samples, want)
        assert sched.failure is None


def test_a_lone_surrogate_is_refused_where_it_is_written(cv: qtts.Model) -> None:
    """The text a job is given is checked as every text the model takes, in the writer's thread:
    the worker never sees it, and the job goes on with valid text."""
    want = _expected(cv, TEXT, 4, non_streaming_mode=False)
    with Scheduler(cv, max_batch=1, max_queue=2) as sched:
        job = sched.submit_text(seed=4, **ARGS)
        with pytest.raises(ValueError, match="lone surrogate"):
            job.write("Hello \ud800 there.")
        with pytest.raises(TypeError, match="must be a str"):
            job.write(b"bytes")  # type: ignore[arg-type]
        job.write(TEXT)
        job.end_text()
        np.testing.assert_array_equal(np.concatenate([c.samples for c in job]), want)
        assert sched.failure is None


def test_a_dead_worker_is_reported(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug outside any one job stops the worker: its jobs fail with the error, `failure` holds
    it and submit says so, instead of jobs that wait forever."""
    def broken_loop(self: Scheduler) -> None:
        with self._lock:
            while not self._queue:
                self._lock.wait()
        raise Injected("the loop broke")

    monkeypatch.setattr(Scheduler, "_loop", broken_loop)
    sched = Scheduler(cv, max_batch=1, max_queue=2)
    job = sched.submit(TEXT, seed=1, **ARGS)
    with pytest.raises(Injected):
        job.result(timeout=60)
    sched.close(timeout=60)
    assert isinstance(sched.failure, Injected)
    with pytest.raises(SchedulerClosed, match="worker failed.*the loop broke"):
        sched.submit(TEXT, **ARGS)
