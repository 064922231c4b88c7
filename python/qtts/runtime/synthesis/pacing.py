"""Chunk pacing (docs/serving.md, "Chunk pacing"): how many frames a stream's next chunk takes.

A stream's chunks double from `first_chunk_frames` up to `max_chunk_frames`: small at first for
an early first audio, larger later because each decode has a fixed cost. A listener who starts
playing at the first chunk has heard t seconds of audio t seconds later, and a doubled chunk
takes twice the frames to make, so once a frame takes more than about half its own duration to
make (40 of the 80 ms of a 12.5 Hz frame), the doubling alone lets the listener run dry while
the generation is still faster than real time. The pacer keeps the doubling as the most a chunk
may take and cuts a chunk short, with the frames made so far, where waiting for the rest would
leave the listener without audio. The samples do not change: only where chunks end (the codec
decoder gives the same samples for any split of a stream, docs/serving.md "Batched vocoder").
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator

from ..audio.audio import AudioChunk


def now() -> float:
    """The pacing clock, seconds (the Scheduler times its rounds with it too; a test that needs
    the plain doubling stops it)."""
    return time.perf_counter()


class Pacer:
    """One stream's chunk sizes and what its listener holds. `heard` is told of every chunk
    handed to the listener; the full size of the next chunk doubles with each chunk cut."""

    def __init__(self, first: int, most: int) -> None:
        if not 1 <= first <= most:
            raise ValueError("need 1 <= first_chunk_frames <= max_chunk_frames")
        self.first, self.most = first, most
        self.size = first  # the full size of the next chunk
        self._started: float | None = None  # when the listener got its first audio
        self._heard_s = 0.0  # seconds of audio handed to the listener

    def start_piece(self) -> None:
        """A new text piece starts its chunks at the first size again (Model.stream's schedule);
        the listener's buffer carries over."""
        self.size = self.first

    def heard(self, seconds: float) -> None:
        """`seconds` of audio were handed to the listener (a chunk, or a pause between pieces)."""
        if self._started is None:
            self._started = now()
        self._heard_s += seconds

    def buffered_s(self) -> float:
        """Seconds of audio the listener holds and has not played (infinite before any audio)."""
        if self._started is None:
            return math.inf
        return self._heard_s - (now() - self._started)

    def cut(self) -> None:
        """A chunk was cut: the next one's full size doubles, up to `most`."""
        self.size = min(2 * self.size, self.most)

    def due(self, pending: int, wait_s: float) -> bool:
        """Whether `pending` gathered frames go out now (the Scheduler asks after each step): the
        chunk is full, or the next chance, `wait_s` from now, would find the listener's audio
        played out before that chunk's audio reaches it."""
        return pending >= self.size or (pending > 0 and self.buffered_s() < wait_s)

    def sizes(self) -> Iterator[int]:
        """The frame counts of a stream generated chunk by chunk (Model.stream), each asked for
        when the chunk before is out: the full size, cut to the frames that the listener's audio
        lasts for at the pace the chunk before was made (at least one)."""
        last: tuple[float, int] | None = None
        while True:
            t, n, buffered = now(), self.size, self.buffered_s()
            if last is not None and t > last[0] and math.isfinite(buffered):
                per_frame_s = (t - last[0]) / last[1]
                n = max(1, min(n, int(buffered / per_frame_s)))
            self.cut()
            last = (t, n)
            yield n

    def handing(self, chunks: Iterable[AudioChunk]) -> Iterator[AudioChunk]:
        """`chunks`, each counted as heard as it goes to the listener."""
        for chunk in chunks:
            self.heard(len(chunk.samples) / chunk.sample_rate)
            yield chunk
