"""Words for the forced aligner: the reference's word splitting, its timestamp repair, and the
`Word` results (docs/aligner.md, "The prompt" and "The repair").

Mirrors qwen-asr 0.0.6's Qwen3ForceAlignProcessor: space-separated text is split on whitespace,
each piece keeps its letters, digits and apostrophes, and every CJK ideograph is a word of its
own (inside mixed pieces too). Japanese and Korean need the reference's extra word splitters
(nagisa; soynlp with qwen-asr's dictionary), which qtts does not include: for them the caller
passes the words as a list.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# The reference's ranges of CJK ideographs: unified, extensions A-E, compatibility.
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF), (0xF900, 0xFAFF))
_NEEDS_SPLITTER = {
    "japanese": "the reference splits Japanese with nagisa (pip install nagisa; words = nagisa.tagging(text).words)",
    "korean": "the reference splits Korean with soynlp's LTokenizer over the dictionary qwen-asr ships "
              "(pip install soynlp qwen-asr)",
}


@dataclass(frozen=True)
class Word:
    """One aligned word (a CJK character is a word of its own) and its span in seconds."""

    text: str
    start: float
    end: float


def _kept(ch: str) -> bool:
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def _clean(token: str) -> str:
    return "".join(ch for ch in token if _kept(ch))


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _CJK)


def _split_cjk(piece: str) -> list[str]:
    """Runs of other characters, and each CJK ideograph alone."""
    out: list[str] = []
    run = ""
    for ch in piece:
        if _is_cjk(ch):
            if run:
                out.append(run)
                run = ""
            out.append(ch)
        else:
            run += ch
    if run:
        out.append(run)
    return out


def split_words(text: str | Sequence[str], language: str | None = None) -> list[str]:
    """The words the aligner times, as the reference splits `text`: whitespace-separated pieces
    cleaned to letters, digits and apostrophes, CJK ideographs one by one. A list of words is
    taken as split already: each is cleaned the same way and empty ones are dropped (what the
    reference does with its Japanese and Korean splitters' words). Japanese and Korean text must
    come as such a list."""
    if isinstance(text, str):
        lang = language.lower() if isinstance(language, str) else None
        if lang in _NEEDS_SPLITTER:
            raise ValueError(f"word timestamps for {lang.title()} need its own word splitter, which qtts does not "
                             f"include: pass the words as a list instead; {_NEEDS_SPLITTER[lang]}")
        words: list[str] = []
        for piece in text.split():
            cleaned = _clean(piece)
            if cleaned:
                words.extend(_split_cjk(cleaned))
        return words
    if not isinstance(text, Sequence) or not all(isinstance(w, str) for w in text):
        raise TypeError(f"text must be a str or a list of words (str), got {type(text).__name__}")
    return [c for c in (_clean(w) for w in text) if c]


def repair(times: Sequence[float]) -> list[int]:
    """The reference's fix_timestamp: the longest non-decreasing subsequence of `times` (ms) is
    kept; a run of at most 2 values outside it takes its nearer kept neighbour's value (the left
    one on a tie), a longer run is interpolated between its neighbours, or takes the one
    neighbour it has at an edge; every value is then truncated to whole ms."""
    data = [float(t) for t in times]
    n = len(data)
    if n == 0:
        return []
    values = np.asarray(data)
    dp = np.ones(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    for i in range(1, n):
        # the longest run ending at an earlier value <= this one, the first such on a tie
        cand = np.where(values[:i] <= values[i], dp[:i], 0)
        best = int(cand.max())
        if best > 0:
            dp[i] = best + 1
            parent[i] = int(np.argmax(cand == best))
    normal = [False] * n
    idx = int(np.argmax(dp == dp.max()))
    while idx != -1:
        normal[idx] = True
        idx = int(parent[idx])
    result = list(data)
    i = 0
    while i < n:
        if normal[i]:
            i += 1
            continue
        j = i
        while j < n and not normal[j]:
            j += 1
        left = next((result[k] for k in range(i - 1, -1, -1) if normal[k]), None)
        right = next((result[k] for k in range(j, n) if normal[k]), None)
        for k in range(i, j):
            if left is None or right is None:
                result[k] = right if left is None else left  # type: ignore[assignment]
            elif j - i <= 2:
                result[k] = left if k - (i - 1) <= j - k else right
            else:
                result[k] = left + (right - left) / (j - i + 1) * (k - i + 1)
        i = j
    return [int(r) for r in result]


def words_from_classes(words: Sequence[str], classes: Sequence[int], segment_ms: float) -> list[Word]:
    """Each word's start and end from the classes at its two timestamp slots (class x segment ms,
    in float32 as the reference multiplies them), repaired, in seconds rounded to ms."""
    if len(classes) != 2 * len(words):
        raise ValueError(f"{len(words)} words need {2 * len(words)} timestamp classes, got {len(classes)}")
    ms = (np.asarray(classes, dtype=np.int64) * np.float32(segment_ms)).astype(np.float32)
    fixed = repair(ms.tolist())
    return [Word(w, round(fixed[2 * i] / 1000.0, 3), round(fixed[2 * i + 1] / 1000.0, 3))
            for i, w in enumerate(words)]
