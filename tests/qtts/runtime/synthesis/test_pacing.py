"""Chunk pacing (runtime/synthesis/pacing.py): the doubling schedule as the most a chunk takes, cut short
where the listener would run out of audio. On a simulated clock throughout, so that no outcome
depends on the machine's speed or load: alone, then on the tiny model whose generation takes
50 ms of that clock a frame (faster than the 80 ms a frame plays for, slower than the 40 ms the
doubling alone needs) and everything else none, through Model.stream and the Scheduler."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qtts
from qtts.runtime.engine.engine import SessionHandle
from qtts.runtime.scheduling.job import Job
from qtts.runtime.synthesis import pacing
from qtts.runtime.synthesis.pacing import Pacer

FRAME_S = 0.08  # 12.5 frames a second
SLOW_FRAME_S = 0.05
TOLERANCE_S = 0.05  # as bench serve's underrun rule (a player's output buffer)
KW = dict(speaker="ryan", seed=3, min_new_tokens=24, max_new_tokens=24, frame_budget=None)


class Clock:
    """Simulated seconds, moved on by the test alone."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(pacing, "now", c)
    return c


def _doubling(first: int, most: int) -> Iterable[int]:
    n = first
    while True:
        yield n
        n = min(2 * n, most)


def _simulate(clock: Clock, per_frame_s: float, frames: int, pacer: Pacer | None = None) -> tuple[list[int], float]:
    """A stream made chunk by chunk at `per_frame_s` and heard as each chunk is made, its sizes
    paced by `pacer` (None: the plain doubling from 1 to 8): the chunk sizes and the listener's
    worst shortfall (seconds it waited with nothing to play)."""
    got: list[int] = []
    heard, worst, start = 0.0, -np.inf, None
    for n in pacer.sizes() if pacer is not None else _doubling(1, 8):
        n = min(n, frames - sum(got))
        clock.t += n * per_frame_s
        start = clock.t if start is None else start
        worst = max(worst, clock.t - start - heard)
        heard += n * FRAME_S
        got.append(n)
        if sum(got) == frames:
            return got, worst
        if pacer is not None:
            pacer.heard(n * FRAME_S)
    raise AssertionError("the sizes ended")


def test_fast_streams_keep_the_doubling(clock: Clock) -> None:
    sizes, worst = _simulate(clock, 0.01, 31, Pacer(1, 8))
    assert sizes == [1, 2, 4, 8, 8, 8] and worst <= 0


def test_slow_streams_are_cut_to_what_the_listener_holds(clock: Clock) -> None:
    _, plain = _simulate(clock, 0.06, 40)
    assert plain > TOLERANCE_S  # the doubling alone: the listener waits
    sizes, worst = _simulate(clock, 0.06, 40, Pacer(1, 8))
    assert worst <= 1e-9 and sizes[:3] == [1, 1, 1] and max(sizes) <= 8 and sum(sizes) == 40
    # slower than real time: one frame at a time, the shortfall no worse than one frame's lateness
    sizes, worst = _simulate(clock, 0.1, 12, Pacer(1, 8))
    assert set(sizes) == {1} and worst <= 12 * 0.02 + 1e-9


def test_due_and_pieces(clock: Clock) -> None:
    p = Pacer(1, 4)
    assert not p.due(0, 1.0) and p.due(1, 0.0)  # before any audio: the full first chunk
    p.heard(FRAME_S)
    p.cut()
    assert p.size == 2 and p.buffered_s() == pytest.approx(FRAME_S)
    assert not p.due(1, 0.05) and p.due(1, 0.1) and p.due(2, 0.0)
    clock.t += 0.07  # most of it played: the one frame made goes out now
    assert p.due(1, 0.05)
    p.cut()
    p.cut()
    assert p.size == 4
    p.start_piece()
    assert p.size == 1 and p.buffered_s() == pytest.approx(0.01)  # the listener's buffer carries over
    with pytest.raises(ValueError, match="first_chunk_frames"):
        Pacer(3, 2)


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2)


def _slowed(monkeypatch: pytest.MonkeyPatch, clock: Clock, name: str, frames: Callable[..., int]) -> None:
    """SessionHandle.<name> made to take SLOW_FRAME_S of the simulated clock per frame it
    generates; everything else takes none of it, however long it really takes."""
    real = getattr(SessionHandle, name)

    def slow(self: SessionHandle, *args: Any) -> Any:
        out = real(self, *args)
        clock.t += frames(*args) * SLOW_FRAME_S
        return out

    monkeypatch.setattr(SessionHandle, name, slow)


def _worst_lag(handed: list[tuple[float, qtts.AudioChunk]]) -> float:
    """The worst shortfall of a listener who plays from the first chunk on, each chunk handed
    over at its (simulated) time."""
    heard, worst, start = 0.0, 0.0, handed[0][0]
    for t, c in handed:
        worst = max(worst, t - start - heard)
        heard += len(c.samples) / c.sample_rate
    return worst


def _stream_twice(run: Callable[[], list[tuple[float, qtts.AudioChunk]]], monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` (one stream's chunks, each with the simulated time it was handed over at) with the
    pacing clock stopped (the plain doubling), then running: the paced stream keeps ahead of its
    listener where the plain one does not, and only where its chunks end differs."""
    with monkeypatch.context() as still:
        still.setattr(pacing, "now", lambda: 0.0)
        plain = run()
    paced = run()
    sizes = [len(c.codes) for _, c in paced]
    assert [len(c.codes) for _, c in plain][:4] == [1, 2, 4, 8] and _worst_lag(plain) > TOLERANCE_S
    assert _worst_lag(paced) < TOLERANCE_S, (sizes, _worst_lag(paced))
    assert sizes != [len(c.codes) for _, c in plain]
    # only where chunks end changes
    for field in ("codes", "samples"):
        np.testing.assert_array_equal(np.concatenate([getattr(c, field) for _, c in paced]),
                                      np.concatenate([getattr(c, field) for _, c in plain]))
    assert paced[-1][1].stop_reason == plain[-1][1].stop_reason == "max_new_tokens"


def test_model_stream_keeps_ahead_of_the_listener(cv: qtts.Model, clock: Clock,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _slowed(monkeypatch, clock, "generate_next", lambda n: n)

    def run() -> list[tuple[float, qtts.AudioChunk]]:  # the listener takes each chunk as it is yielded
        return [(clock.t, c) for c in cv.stream("Hello world, this is a tiny test.", **KW)]

    _stream_twice(run, monkeypatch)


def test_scheduler_keeps_ahead_of_the_listener(cv: qtts.Model, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    _slowed(monkeypatch, clock, "batch_step", lambda batch, n: n)
    handed: list[tuple[float, qtts.AudioChunk]] = []
    put = Job._put

    def stamped(self: Job, item: Any) -> None:  # in the worker, as the chunk goes to the consumer
        if isinstance(item, qtts.AudioChunk):
            handed.append((clock.t, item))
        put(self, item)

    monkeypatch.setattr(Job, "_put", stamped)

    def run() -> list[tuple[float, qtts.AudioChunk]]:
        handed.clear()
        with qtts.Scheduler(cv, max_batch=2) as sched:
            got = list(sched.submit("Hello world, this is a tiny test.", **KW))
        assert [c for _, c in handed] == got
        return list(handed)

    _stream_twice(run, monkeypatch)
