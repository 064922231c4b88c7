"""Splitting long text into sentence-sized pieces that are synthesized one after another.

The talker was trained on utterances, not chapters: long inputs drift in pace and are more
likely to lose their EOS (peers.md §6). Sentence ends include CJK punctuation, which needs no
following space.
"""
from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?;…])\s+|(?<=[。！？；])|\n+")
_CLAUSE_END = re.compile(r"(?<=[,:，、：])\s*")


def split_text(text: str, max_chars: int = 200) -> list[str]:
    """Sentences merged greedily up to max_chars; longer sentences split at clause marks, then
    at spaces. Empty pieces are dropped; the text's characters are kept otherwise."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        if sentence:
            pieces.extend(_split_long(sentence, max_chars))
    merged: list[str] = []
    for p in pieces:
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
        while len(clause) > max_chars:
            cut = clause.rfind(" ", 0, max_chars + 1)
            cut = cut if cut > 0 else max_chars
            out.append(clause[:cut].strip())
            clause = clause[cut:].strip()
        if clause:
            out.append(clause)
    return out


def _is_cjk_end(s: str) -> bool:
    return bool(s) and (0x3000 <= ord(s[-1]) <= 0x9FFF or 0xFF00 <= ord(s[-1]) <= 0xFFEF)
