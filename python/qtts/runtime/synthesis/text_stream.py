"""Text that arrives in fragments (an LLM's deltas): which pieces and which text tokens are
already final, whatever comes next (docs/model.md, "Text streamed in").

Two rules decide it, each the batch rule's own:

* Splitting (text.py): a piece is complete once no continuation of the text can move its end,
  and a piece's text is known up to the first place where a continuation could still cut it or
  change its whitespace. In "auto" mode a text of at most SPLIT_ABOVE_CHARS characters stays
  whole while a longer one is split, so until the text ends or passes that length only what both
  readings agree on is known.
* Tokenizing (tokenizer.py): BPE never merges across the pre-tokenizer's boundaries, so a token
  is final once its pre-token is: the characters that decided where the pre-token ends are in,
  and no later character can change them under NFC normalization.
"""
from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass

from ..settings.generation import check_text
from ..text.text import (
    _CLAUSE_END,
    _SENTENCE_END,
    SPLIT_ABOVE_CHARS,
    SplitSentences,
    _split_long,
    cut_clause,
    merge_units,
    text_pieces,
)
from ..text.tokenizer import QWEN2_REGEX, Tokenizer


@dataclass(frozen=True)
class Known:
    """What a text received so far settles about its pieces."""
    complete: list[str]  # the first pieces, whole
    next_text: str       # the known start of the piece after them ("" when not known yet)


def known_pieces(text: str, ended: bool, split_sentences: SplitSentences) -> Known:
    """The pieces text_pieces(full text) will give, as far as `text`, a prefix of the full text,
    settles them; with `ended` the text is the full text."""
    if ended:
        return Known([p for p in text_pieces(text, split_sentences) if p.strip()], "")
    if split_sentences is False:
        return Known([], text if text.strip() else "")
    if split_sentences == "auto" and len(text) <= SPLIT_ABOVE_CHARS:
        # whole (if it ends here) or split (if it grows): only the common start is known
        split = _known_split(text, SPLIT_ABOVE_CHARS)
        first = split.complete[0] if split.complete else split.next_text
        return Known([], _common_prefix(text, first))
    text_pieces("", split_sentences)  # validates split_sentences
    limit = SPLIT_ABOVE_CHARS if split_sentences in ("auto", True) else int(split_sentences)
    return _known_split(text, limit)


def _known_split(text: str, limit: int) -> Known:
    """known_pieces of split_text(text, limit) for a text that goes on."""
    *done, last = _SENTENCE_END.split(text)  # the last sentence may grow; the others are final
    units: list[str] = []
    for sentence in (s.strip() for s in done):
        if sentence:
            units += _split_long(sentence, limit)
    rest = last.strip()
    if len(rest) > limit:  # a sentence known to be split: its clauses but the last are final
        *clauses, open_clause = (c.strip() for c in _CLAUSE_END.split(rest))
        for clause in clauses:
            units += _split_long(clause, limit) if clause else []
        cuts, rest = cut_clause(open_clause, limit)
        units += cuts
    pieces = merge_units(units, limit)
    if not pieces:
        return Known([], _settled_start(rest))
    # The last merged piece takes the next unit if it fits: complete once even the shortest
    # unit the open text can still become does not.
    if len(pieces[-1]) + 1 + _shortest_unit(rest) > limit:
        return Known(pieces, _settled_start(rest))
    return Known(pieces[:-1], pieces[-1])


def _settled_start(rest: str) -> str:
    """The part of an open unit (a sentence so far, or the rest of a long one) that every split
    of its continuation keeps at the start of a piece: up to its first clause mark, and not past
    its last space (where a clause that grows too long is cut, its whitespace normalized)."""
    mark = _CLAUSE_END.search(rest)
    if mark is not None:
        return rest[:mark.start()]
    space = rest.rfind(" ")
    return rest[:space].rstrip() if space > 0 else rest


def _shortest_unit(rest: str) -> int:
    """A lower bound on the length of the first unit an open unit becomes (1: nothing seen yet)."""
    if not rest:
        return 1
    mark = _CLAUSE_END.search(rest)
    if mark is not None:
        return len(rest[:mark.start()].strip())
    space = rest.rfind(" ")
    return len(rest[:space].rstrip()) if space > 0 else len(rest)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


_PRE_TOKENIZER = None


def _pre_tokens(text: str) -> list[tuple[int, int]]:
    """(start, end) of each pre-token of NFC-normalized text (the tokenizer's own regex)."""
    global _PRE_TOKENIZER
    if _PRE_TOKENIZER is None:
        from tokenizers import Regex, pre_tokenizers

        _PRE_TOKENIZER = pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False)
    return [span for _, span in _PRE_TOKENIZER.pre_tokenize_str(text)]


def _stable_length(text: str) -> int:
    """Characters of NFC-normalized `text` that no appended text can change: those before its
    last character that is a starter no combining mark or jamo composes into a previous one, and
    that character too when nothing composes with it (docs/model.md, "Text streamed in")."""
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if unicodedata.combining(ch) == 0 and not unicodedata.category(ch).startswith("M") \
                and not 0x1100 <= ord(ch) <= 0x11FF:
            return i + 1 if _closed(ch) else i
    return 0


def _closed(ch: str) -> bool:
    """No canonical composition starts with `ch`: ASCII other than letters and < = > (which take
    U+0338), CJK ideographs and punctuation, fullwidth forms. Kana take voicing marks, Hangul
    syllables trailing jamo, Latin letters accents: they are not."""
    o = ord(ch)
    if o < 0x80:
        return not ch.isalpha() and ch not in "<=>"
    return 0x4E00 <= o <= 0x9FFF or 0x3000 <= o <= 0x303F or 0xFF00 <= o <= 0xFFEF


def final_text_ids(tok: Tokenizer, text: str, complete: bool) -> list[int]:
    """The text tokens t0, t1, ... of a piece that `text` (its known start) already settles; all
    of them when the piece is complete. Raises ValueError as prompt_text_ids does."""
    if complete:
        return tok.prompt_text_ids(text)
    norm = unicodedata.normalize("NFC", text)
    stable = _stable_length(norm)
    end = 0
    for start, stop in _pre_tokens(norm):
        # the characters the regex looked at to end this pre-token: one past it, up to two more
        # for a contraction ('ll), and the whole run of a whitespace pre-token and one past it
        seen = stop + 1
        if norm[start] == "'":
            seen = max(seen, start + 3)
        if norm[start].isspace():
            run = start
            while run < len(norm) and norm[run].isspace():
                run += 1
            seen = max(seen, run + 1)
        if seen > stable:
            break
        end = stop
    if not norm[:end].strip():
        return []
    return tok.prompt_text_ids(norm[:end])


class TextFeed:
    """Fragments put by one side (a thread reading an iterator, an event loop), waited for by the
    generation without spinning; `cancel` wakes the waiter."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._parts: list[str] = []
        self._length = 0
        self._ended = False
        self._cancelled = False
        self._error: BaseException | None = None

    def put(self, fragment: str) -> None:
        """Append a fragment: TypeError if not a str, ValueError if it holds a lone surrogate (as
        every text the model takes, generation.check_text), in the writer's thread."""
        check_text(fragment, "text fragment", allow_empty=True)
        with self._cond:
            if fragment:
                self._parts.append(fragment)
                self._length += len(fragment)
                self._cond.notify_all()

    def end(self, error: BaseException | None = None) -> None:
        """The text is complete (or its source failed with `error`, raised to the waiter)."""
        with self._cond:
            self._ended = True
            self._error = error
            self._cond.notify_all()

    def cancel(self) -> None:
        with self._cond:
            self._cancelled = True
            self._cond.notify_all()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def wait(self, seen: int) -> tuple[str, bool]:
        """(text so far, whether it ended) once it is longer than `seen` characters or ended;
        returns at once when cancelled."""
        with self._cond:
            while self._length <= seen and not self._ended and not self._cancelled:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            if len(self._parts) > 1:
                self._parts = ["".join(self._parts)]
            return (self._parts[0] if self._parts else ""), self._ended
