"""The results table of a bulk run, DIR/results.jsonl, and the resume state read back from it.

One JSON line per finished item, appended (flushed and fsynced) only after the item's audio file
(and its words file, for an item with word timestamps) is in place, so a line without error
always names complete files. A rerun takes an id as done when its latest line has no error, its
file still holds that many samples and, where the item asks for words, its words file in the
run's format is there; a line cut short by a kill is ignored, and a partial file (atomic.py's
`<name>.<pid>.partial`) is never read as output and is removed."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from ..atomic import remove_stale
from .manifest import Item

RESULTS = "results.jsonl"
FORMATS = ("wav", "flac")
WORDS_FORMATS = ("json", "srt", "vtt")  # an item's words file (runtime/aligner/subtitles.py)


@dataclass
class Result:
    id: str
    file: str | None  # relative to the output folder
    seconds: float
    frames: int
    samples: int
    sample_rate: int
    stop_reason: str | None
    seed: int | None
    timings: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    timestamps: str | None = None  # the words file, relative to the output folder


@dataclass
class Plan:
    """What a run has to do: the pending items, and those it skips (done, or failed earlier)."""
    pending: list[Item]
    done: list[Item]
    failed_earlier: list[Item]


def read_results(out_dir: Path) -> dict[str, dict[str, Any]]:
    """The latest line per id (lines that are not whole JSON objects are skipped)."""
    latest: dict[str, dict[str, Any]] = {}
    path = out_dir / RESULTS
    if not path.exists():
        return latest
    with open(path, "rb") as f:
        for raw in f:
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("id"), str):
                latest[rec["id"]] = rec
    return latest


def audio_complete(out_dir: Path, rec: dict[str, Any]) -> bool:
    """A success line whose file exists and holds its recorded sample count (read from the header)."""
    import soundfile as sf

    if rec.get("error") is not None or not isinstance(rec.get("file"), str):
        return False
    path = out_dir / rec["file"]
    try:
        return bool(path.is_file() and sf.info(str(path)).frames == rec.get("samples"))
    except (RuntimeError, OSError):  # soundfile's error for an unreadable file is a RuntimeError
        return False


def words_complete(out_dir: Path, rec: dict[str, Any], item: Item, words_fmt: str) -> bool:
    """An item that asks for no words, or a line naming its words file in the run's format, there."""
    name = f"{item.id}.{words_fmt}"
    return not item.word_timestamps or (rec.get("timestamps") == name and (out_dir / name).is_file())


def plan(items: Iterable[Item], out_dir: Path, fmt: str, retry_failed: bool, words_fmt: str = "json") -> Plan:
    state = read_results(out_dir)
    p = Plan([], [], [])
    for item in items:
        rec = state.get(item.id)
        if (rec is not None and rec.get("file") == f"{item.id}.{fmt}" and audio_complete(out_dir, rec)
                and words_complete(out_dir, rec, item, words_fmt)):
            p.done.append(item)
        elif rec is not None and rec.get("error") is not None and not retry_failed:
            p.failed_earlier.append(item)
        else:
            p.pending.append(item)
    return p


def clean_partials(out_dir: Path) -> list[Path]:
    """Remove the partial audio files that killed runs left (those of live writers stay)."""
    removed: list[Path] = []
    for p in out_dir.glob("*.partial"):
        final_name, _, _ = p.name[: -len(".partial")].rpartition(".")
        if final_name:
            removed += remove_stale(out_dir / final_name)
    return removed


class ResultsLog:
    """Appends result lines; each is on disk (fsync) before append() returns."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / RESULTS
        self._f: IO[bytes] = open(self.path, "ab")
        if self._f.tell() > 0:  # a kill may have cut the last line short: start on a line of our own
            with open(self.path, "rb") as r:
                r.seek(-1, os.SEEK_END)
                if r.read(1) != b"\n":
                    self._f.write(b"\n")

    def append(self, result: Result) -> None:
        self._f.write(json.dumps(asdict(result), ensure_ascii=False).encode("utf-8") + b"\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ResultsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
