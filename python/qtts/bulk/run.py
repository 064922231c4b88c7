"""A bulk run end to end: plan (resume), synthesize through a runner, write each item's audio
and result line, report progress and a summary (docs/bulk.md, "How it runs")."""
from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .manifest import Item
from .results import Plan, Result, ResultsLog, clean_partials, plan
from .synth import Finished


class Runner(Protocol):
    memory: dict[int, dict[str, float]]

    def run(self, items: list[Item]) -> Iterator[Finished]: ...


@dataclass
class Summary:
    done: int = 0              # synthesized now
    skipped: int = 0           # done by an earlier run
    failed: int = 0            # failed now
    failed_earlier: int = 0    # failed by an earlier run and not retried (--retry-failed)
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0
    workers: list[dict[str, float]] = field(default_factory=list)  # memory per worker process (MB)

    @property
    def throughput(self) -> float:
        """Seconds of audio per second of wall time."""
        return self.audio_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.failed_earlier == 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "throughput": self.throughput}

    def format(self) -> str:
        earlier = f", {self.failed_earlier} failed before (--retry-failed retries them)" if self.failed_earlier else ""
        line = (f"{self.done} done, {self.skipped} skipped (done before), {self.failed} failed{earlier}; "
                f"{self.audio_seconds:.1f} s of audio in {self.wall_seconds:.1f} s "
                f"({self.throughput:.2f} s of audio per second)")
        for w in self.workers:
            line += (f"\n  worker {int(w['pid'])}: RSS {w.get('rss_mb', 0):.0f} MB, PSS {w.get('pss_mb', 0):.0f} MB, "
                     f"private {w.get('private_mb', 0):.0f} MB, anonymous {w.get('anonymous_mb', 0):.0f} MB")
        return line


class Progress:
    """A tqdm bar over the items: audio hours, audio seconds per wall second, and the ETA."""

    def __init__(self, total: int, show: bool) -> None:
        self._bar: Any = None
        self._t0 = time.perf_counter()
        self.audio = 0.0
        if show:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="item", file=sys.stderr, dynamic_ncols=True, desc="synthesizing")

    def update(self, seconds: float) -> None:
        self.audio += seconds
        if self._bar is not None:
            wall = time.perf_counter() - self._t0
            self._bar.set_postfix_str(f"{self.audio / 3600:.3f} h audio, {self.audio / wall:.2f} audio s/s",
                                      refresh=False)
            self._bar.update(1)

    def write(self, message: str) -> None:
        if self._bar is not None:
            self._bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def prepare(items: list[Item], out_dir: Path, fmt: str, retry_failed: bool, words_fmt: str = "json") -> Plan:
    out_dir.mkdir(parents=True, exist_ok=True)
    clean_partials(out_dir)
    return plan(items, out_dir, fmt, retry_failed, words_fmt)


def write_result(fin: Finished, out_dir: Path, fmt: str, words_fmt: str = "json") -> Result:
    """The item's words file where it has words (in `words_fmt`), then its audio file, each
    atomically, then its Result (an error if a file cannot be written)."""
    from ..runtime.aligner.subtitles import write_words
    from ..runtime.audio.audio import save_audio

    name = f"{fin.id}.{fmt}"
    res = Result(fin.id, None, 0.0, fin.frames, 0, fin.sample_rate, fin.stop_reason, fin.seed, fin.timings, fin.error)
    if fin.error is None and fin.samples is not None:
        words = None if fin.words is None else f"{fin.id}.{words_fmt}"
        try:
            if fin.words is not None and words is not None:
                write_words(out_dir / words, fin.words)
            save_audio(out_dir / name, fin.samples, fin.sample_rate)
        except OSError as e:
            res.error = f"{type(e).__name__}: {e}"
            return res
        res.file, res.samples, res.seconds = name, len(fin.samples), len(fin.samples) / fin.sample_rate
        res.timestamps = words
    return res


def run_batch(p: Plan, runner: Runner, out_dir: Path, fmt: str, show_progress: bool,
              words_fmt: str = "json") -> Summary:
    """Synthesize the plan's pending items; each result is on disk before the next is taken."""
    s = Summary(skipped=len(p.done), failed_earlier=len(p.failed_earlier))
    t0 = time.perf_counter()
    bar = Progress(len(p.pending), show_progress)
    try:
        with ResultsLog(out_dir) as log:
            for fin in runner.run(p.pending) if p.pending else iter(()):
                res = write_result(fin, out_dir, fmt, words_fmt)
                log.append(res)
                if res.error is None:
                    s.done += 1
                    s.audio_seconds += res.seconds
                else:
                    s.failed += 1
                    bar.write(f"{res.id}: {res.error}")
                bar.update(res.seconds)
    finally:
        bar.close()
    s.wall_seconds = time.perf_counter() - t0
    s.workers = sorted(runner.memory.values(), key=lambda w: w.get("pid", 0))
    return s
