"""Splitting long text into sentence-sized pieces that are synthesized one after another.

The talker was trained on utterances, not chapters: long inputs drift in pace and are more
likely to lose their EOS (docs/model.md, "Generation loop"), and a prompt's prefill time grows
with the square of its length. Sentence ends include CJK punctuation, which needs no following space.
"""
from __future__ import annotations

import re
from typing import Literal

# Texts longer than this are synthesized in pieces of at most this many characters, by default
# in the API (split_sentences="auto") and at the command line (unless --no-split).
SPLIT_ABOVE_CHARS = 200
MAX_PIECE_CHARS = 1 << 20  # an integer split_sentences is a piece length up to this

SplitSentences = bool | int | Literal["auto"]

_SENTENCE_END = re.compile(r"(?<=[.!?;…])\s+|(?<=[。！？；])|\n+")
_CLAUSE_END = re.compile(r"(?<=[,:，、：])\s*")


def text_pieces(text: str, split_sentences: SplitSentences) -> list[str]:
    """The pieces a request synthesizes: "auto" splits text over SPLIT_ABOVE_CHARS characters
    into pieces of at most that many, True splits any text so, an integer (1 to MAX_PIECE_CHARS)
    sets the piece length, False keeps the text whole however long."""
    if isinstance(split_sentences, str):
        if split_sentences != "auto":
            raise ValueError(f"split_sentences must be 'auto', a bool or an int, got {split_sentences!r}")
        return split_text(text) if len(text) > SPLIT_ABOVE_CHARS else [text]
    if isinstance(split_sentences, bool):
        return split_text(text) if split_sentences else [text]
    if not isinstance(split_sentences, int):
        raise TypeError(f"split_sentences must be 'auto', a bool or an int, got {split_sentences!r}")
    if not 1 <= split_sentences <= MAX_PIECE_CHARS:
        raise ValueError(f"split_sentences must be a piece length in [1, {MAX_PIECE_CHARS}], got {split_sentences}")
    return split_text(text, max_chars=split_sentences)


def split_text(text: str, max_chars: int = SPLIT_ABOVE_CHARS) -> list[str]:
    """Sentences merged greedily up to max_chars; longer sentences split at clause marks, then
    at spaces, and text without either at max_chars. Empty pieces are dropped; the text's
    characters are kept otherwise."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        if sentence:
            pieces.extend(_split_long(sentence, max_chars))
    return merge_units(pieces, max_chars)


def merge_units(units: list[str], max_chars: int) -> list[str]:
    """Sentences (and the parts of long ones) merged greedily into pieces of at most max_chars."""
    merged: list[str] = []
    for p in units:
        if merged and len(merged[-1]) + 1 + len(p) <= max_chars:
            joiner = "" if _is_cjk_end(merged[-1]) else " "
            merged[-1] = merged[-1] + joiner + p
        else:
            merged.append(p)
    return merged


def _split_long(sentence: str, max_chars: int) -> list[str]:
    if len(sentence) <= max_chars:
        return [sentence]
    out: list[str] = []
    for clause in (c.strip() for c in _CLAUSE_END.split(sentence)):
        cuts, clause = cut_clause(clause, max_chars)
        out += cuts
        if clause:
            out.append(clause)
    return out


def cut_clause(clause: str, max_chars: int) -> tuple[list[str], str]:
    """A clause over max_chars cut at its last space within the limit (anywhere without one),
    again while the rest is too long: (the cut parts, the rest)."""
    out: list[str] = []
    while len(clause) > max_chars:
        cut = clause.rfind(" ", 0, max_chars + 1)
        cut = cut if cut > 0 else max_chars
        out.append(clause[:cut].strip())
        clause = clause[cut:].strip()
    return out, clause


def _is_cjk_end(s: str) -> bool:
    return bool(s) and (0x3000 <= ord(s[-1]) <= 0x9FFF or 0xFF00 <= ord(s[-1]) <= 0xFFEF)
