"""Word timestamps as files: SRT, WebVTT and JSON (docs/aligner.md, "Files"). One cue per word,
since a word is what the aligner times; the JSON carries the words for any other layout."""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...atomic import atomic_output
from ..text.words import Word

FORMATS = ("srt", "vtt", "json")


def _clock(seconds: float, sep: str) -> str:
    ms = int(round(seconds * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def to_srt(words: Sequence[Word]) -> str:
    cues = [f"{i}\n{_clock(w.start, ',')} --> {_clock(w.end, ',')}\n{w.text}\n" for i, w in enumerate(words, 1)]
    return "\n".join(cues)


def to_vtt(words: Sequence[Word]) -> str:
    cues = [f"{_clock(w.start, '.')} --> {_clock(w.end, '.')}\n{w.text}\n" for w in words]
    return "\n".join(["WEBVTT\n", *cues])


def word_list(words: Sequence[Word]) -> list[dict[str, object]]:
    """[{"word", "start", "end"}], seconds: the one shape of words in JSON (files, the server)."""
    return [{"word": w.text, "start": w.start, "end": w.end} for w in words]


def from_word_list(rows: Sequence[dict[str, Any]]) -> list[Word]:
    """word_list's inverse (a Ray row's words column)."""
    return [Word(str(r["word"]), float(r["start"]), float(r["end"])) for r in rows]


def to_json(words: Sequence[Word]) -> str:
    """{"words": [{"word", "start", "end"}]}, seconds: the server's field names (docs/aligner.md)."""
    return json.dumps({"words": word_list(words)}, ensure_ascii=False, indent=2) + "\n"


def format_of(path: str | os.PathLike[str]) -> str:
    """The format a file name asks for, by its extension; ValueError for any other."""
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in FORMATS:
        raise ValueError(f"{os.fspath(path)}: word timestamps are written as .srt, .vtt or .json, not {ext or 'no'} "
                         "extension")
    return ext


def write_words(path: str | os.PathLike[str], words: Sequence[Word]) -> Path:
    """Write `words` to `path` in the format its extension names, atomically."""
    text = {"srt": to_srt, "vtt": to_vtt, "json": to_json}[format_of(path)](words)
    out = Path(path)
    with atomic_output(out) as partial:
        Path(partial).write_text(text, encoding="utf-8")
    return out
