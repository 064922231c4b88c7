"""Chunk pacing (runtime/pacing.py): the doubling schedule as the most a chunk takes, cut short
where the listener would run out of audio. On a simulated clock, then on the tiny model with
its generation slowed to 50 ms a frame (faster than the 80 ms a frame plays for, slower than
the 40 ms the doubling alone needs), through Model.stream and the Scheduler."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qtts
from qtts.runtime import pacing
from qtts.runtime.engine import SessionHandle
from qtts.runtime.pacing import Pacer

FRAME_S = 0.08  # 12.5 frames a second
SLOW_FRAME_S = 0.05
TOLERANCE_S = 0.05  # as bench serve's underrun rule (a player's output buffer)
KW = dict(speaker="ryan", seed=3, min_new_tokens=24, max_new_tokens=24, frame_budget=None)


class Clock:
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


def _slowed(monkeypatch: pytest.MonkeyPatch, name: str, frames: Callable[..., int]) -> None:
    """SessionHandle.<name> made to take SLOW_FRAME_S per frame it generates."""
    real = getattr(SessionHandle, name)

    def slow(self: SessionHandle, *args: Any) -> Any:
        t = time.perf_counter()
        out = real(self, *args)
        time.sleep(max(0.0, frames(*args) * SLOW_FRAME_S - (time.perf_counter() - t)))
        return out

    monkeypatch.setattr(SessionHandle, name, slow)


def _listen(chunks: Iterable[qtts.AudioChunk]) -> tuple[list[qtts.AudioChunk], float]:
    """The chunks and the worst shortfall of a listener who plays from the first one on."""
    got, heard, worst, start = [], 0.0, 0.0, None
    for c in chunks:
        t = time.perf_counter()
        start = t if start is None else start
        worst = max(worst, t - start - heard)
        heard += len(c.samples) / c.sample_rate
        got.append(c)
    return got, worst


def _stream_twice(run: Callable[[], Iterable[qtts.AudioChunk]], monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as still:
        still.setattr(pacing, "now", lambda: 0.0)  # the plain doubling
        plain, plain_worst = _listen(run())
    paced, worst = _listen(run())
    assert [len(c.codes) for c in plain][:4] == [1, 2, 4, 8] and plain_worst > TOLERANCE_S
    assert worst < TOLERANCE_S, ([len(c.codes) for c in paced], worst)
    assert [len(c.codes) for c in paced] != [len(c.codes) for c in plain]
    # only where chunks end changes
    np.testing.assert_array_equal(np.concatenate([c.codes for c in paced]), np.concatenate([c.codes for c in plain]))
    np.testing.assert_array_equal(np.concatenate([c.samples for c in paced]),
                                  np.concatenate([c.samples for c in plain]))
    assert paced[-1].stop_reason == plain[-1].stop_reason == "max_new_tokens"


def test_model_stream_keeps_ahead_of_the_listener(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    _slowed(monkeypatch, "generate_next", lambda n: n)
    _stream_twice(lambda: cv.stream("Hello world, this is a tiny test.", **KW), monkeypatch)


def test_scheduler_keeps_ahead_of_the_listener(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    _slowed(monkeypatch, "batch_step", lambda batch, n: n)

    def run() -> Iterable[qtts.AudioChunk]:
        with qtts.Scheduler(cv, max_batch=2) as sched:
            yield from sched.submit("Hello world, this is a tiny test.", **KW)

    _stream_twice(run, monkeypatch)
