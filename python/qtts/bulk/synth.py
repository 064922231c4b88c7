"""Items through one model's continuous batching: the part every bulk runner shares (the
single process, each --jobs worker and each Ray actor).

Pending items go to a Scheduler, up to `max_batch` stepped together and as many queued behind
them so that a slot never waits for the caller; each item's audio is what Model.synthesize gives
for the same arguments and seed (docs/serving.md, "Batching"). A reference clip is encoded
once per distinct (clip, transcript, mode) through the model's voice cache, and a voice file is
read once. A bad item (an unknown speaker, an unreadable clip, an engine error) is that item's
error; the others go on."""
from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .manifest import Item

if TYPE_CHECKING:
    from ..runtime.audio.audio import Audio
    from ..runtime.audio.voice import Voice
    from ..runtime.model.model import Model
    from ..runtime.text.words import Word

POLL_S = 0.005  # how often finished jobs are collected: far below a frame's time


@dataclass
class Finished:
    """One item's result as every runner hands it to the writer (picklable, Arrow-friendly)."""
    id: str
    seed: int | None
    sample_rate: int
    samples: np.ndarray | None = None  # float32, None on error
    frames: int = 0
    stop_reason: str | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    words: list[Word] | None = None  # the item asked for word timestamps

    def set_audio(self, audio: Audio) -> None:
        self.samples = np.asarray(audio.samples, dtype=np.float32)
        self.frames, self.stop_reason = int(audio.timings.frames), audio.stop_reason
        self.timings = asdict(audio.timings)
        self.words = audio.words


def describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class Synth:
    def __init__(self, model: Model, max_batch: int = 8) -> None:
        self.model = model
        self.max_batch = max_batch
        self._voices: dict[Any, Voice | Exception] = {}

    def voice(self, item: Item) -> Voice | None:
        """The item's voice, made or read once per distinct source (its error, likewise once)."""
        from ..runtime.audio.voice import Voice

        key: Any = item.reference or (item.voice and ("file", item.voice))
        if not key:
            return None
        if key not in self._voices:
            try:
                if item.voice is not None:
                    self._voices[key] = Voice.load(item.voice)
                else:
                    self._voices[key] = self.model.create_voice(item.ref_audio, item.ref_text,
                                                                x_vector_only_mode=item.x_vector_only_mode)
            except Exception as e:  # noqa: BLE001  (the items using this voice fail with it; others go on)
                self._voices[key] = e
        v = self._voices[key]
        if isinstance(v, Exception):
            raise v
        return v

    def run(self, items: Iterable[Item]) -> Iterator[Finished]:
        """Each item's Finished, in the order they finish."""
        from ..runtime.scheduling.scheduler import Scheduler

        pending = iter(items)
        window = 2 * self.max_batch
        inflight: list[tuple[Finished, Any]] = []
        sched = Scheduler(self.model, max_batch=self.max_batch, max_queue=self.max_batch)
        try:
            exhausted = False
            while True:
                while not exhausted and len(inflight) < window:
                    item = next(pending, None)
                    if item is None:
                        exhausted = True
                        break
                    seed = secrets.randbits(63) if item.seed is None else item.seed
                    out = Finished(item.id, seed, self.model.sample_rate)
                    try:
                        kw = {**item.request(), "seed": seed}
                        inflight.append((out, sched.submit_eager(item.text, voice=self.voice(item), **kw)))
                    except Exception as e:  # noqa: BLE001  (a bad item is its own error)
                        out.error = describe(e)
                        yield out
                if not inflight:
                    return
                finished = [x for x in inflight if x[1].done]
                if not finished:
                    time.sleep(POLL_S)
                    continue
                for x in finished:
                    inflight.remove(x)
                    out, job = x
                    try:
                        out.set_audio(job.result())
                    except Exception as e:  # noqa: BLE001
                        out.error = describe(e)
                    yield out
        finally:
            sched.close(cancel=True)
