"""Qwen3-TTS text tokenizer, rebuilt from the arrays our GGUF carries.

Ids equal the reference's `Qwen2TokenizerFast` as transformers converts it from vocab.json +
merges.txt, with the original Qwen2 regex (the hub-id load path; docs/model.md, "Reference
quirks"). We deliberately do
not reproduce the Mistral-style regex a local >100k-vocab load with fix_mistral_regex gets.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The chat templates of the reference's wrapper (`_build_assistant_text`, `_build_ref_text`,
# `_build_instruct_text`); its generate slices the encoded ids positionally (docs/model.md, "Prompt layouts").
_ASSISTANT_HEAD = "<|im_start|>assistant\n"
_ASSISTANT_TAIL = "<|im_end|>\n<|im_start|>assistant\n"
_REF_TAIL = "<|im_end|>\n"


class TokenType(IntEnum):
    """gguf / llama.cpp token types (only the ones a Qwen2 vocabulary produces)."""
    NORMAL = 1
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5


@dataclass(frozen=True)
class TokenizerData:
    """What the GGUF stores: dense `tokens`/`token_types` by id and "a b" merge strings."""
    tokens: list[str]
    token_types: list[int]
    merges: list[str]


def assistant_text(text: str) -> str:
    return f"{_ASSISTANT_HEAD}{text}{_ASSISTANT_TAIL}"


def ref_text(text: str) -> str:
    return f"{_ASSISTANT_HEAD}{text}{_REF_TAIL}"


def instruct_text(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n"


def _load_json(path: Path) -> Any:
    if not path.is_file():
        raise ValueError(f"{path.name} not found in {path.parent}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path.name} is malformed: {e}") from e


def _read_merges_txt(path: Path) -> list[str]:
    if not path.is_file():
        raise ValueError(f"{path.name} not found in {path.parent}")
    merges = []
    # Same parsing as transformers' slow Qwen2Tokenizer, which the fast one is converted from.
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        line = line.strip()
        if (i == 0 and line.startswith("#version:")) or not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path.name} is malformed: line {i + 1} is not a pair: {line!r}")
        merges.append(" ".join(parts))
    return merges


def _assemble(vocab: Mapping[str, int], merges: list[str],
              added: Mapping[int, Mapping[str, Any]], source: str) -> TokenizerData:
    if not isinstance(vocab, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in vocab.items()):
        raise ValueError(f"{source}: vocabulary is not a mapping of token -> non-negative id")
    by_id: dict[int, tuple[str, int]] = {}
    for tok, i in vocab.items():
        if i in by_id:
            raise ValueError(f"{source}: id {i} is used by {by_id[i][0]!r} and {tok!r}")
        by_id[i] = (tok, TokenType.NORMAL)
    for i, info in added.items():
        content = info.get("content")
        if not isinstance(content, str):
            raise ValueError(f"{source}: added token {i} has no content")
        # The three GGUF arrays cannot carry these flags; Qwen never sets them, so refuse
        # rather than tokenize differently from the reference.
        flags = [f for f in ("lstrip", "rstrip", "normalized", "single_word") if info.get(f)]
        if flags:
            raise ValueError(f"{source}: added token {content!r} sets {', '.join(flags)}, "
                             "which is unsupported")
        if i in by_id and by_id[i][0] != content:
            raise ValueError(f"{source}: added token {content!r} reuses id {i} of {by_id[i][0]!r}")
        by_id[i] = (content, TokenType.CONTROL if info.get("special") else TokenType.USER_DEFINED)
    n = max(by_id, default=-1) + 1
    tokens = [by_id[i][0] if i in by_id else f"[PAD{i}]" for i in range(n)]
    types = [int(by_id[i][1]) if i in by_id else int(TokenType.UNUSED) for i in range(n)]
    return TokenizerData(tokens=tokens, token_types=types, merges=merges)


def _from_tokenizer_json(path: Path) -> TokenizerData:
    doc = _load_json(path)
    try:
        model = doc["model"]
        if model.get("type", "BPE") != "BPE":
            raise ValueError(f"{path.name}: model type {model.get('type')!r} is not BPE")
        # Newer `tokenizers` serialise merges as pairs, older ones as "a b" strings.
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        added = {int(t["id"]): t for t in doc.get("added_tokens", [])}
        return _assemble(model["vocab"], merges, added, path.name)
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path.name} is malformed: {e!r}") from e


def tokenizer_metadata(hf_dir: str | os.PathLike[str]) -> TokenizerData:
    """Read a checkpoint's tokenizer files into the dense arrays we store in the GGUF."""
    d = Path(hf_dir)
    if not (d / "vocab.json").exists() and (d / "tokenizer.json").is_file():
        return _from_tokenizer_json(d / "tokenizer.json")
    vocab = _load_json(d / "vocab.json")
    merges = _read_merges_txt(d / "merges.txt")
    config = _load_json(d / "tokenizer_config.json")
    decoder = config.get("added_tokens_decoder") if isinstance(config, dict) else None
    if not isinstance(decoder, dict):
        raise ValueError("tokenizer_config.json is malformed: no added_tokens_decoder")
    try:
        added = {int(k): v for k, v in decoder.items()}
    except ValueError as e:
        raise ValueError(f"tokenizer_config.json is malformed: {e}") from e
    if not all(isinstance(v, dict) for v in added.values()):
        raise ValueError("tokenizer_config.json is malformed: added token is not an object")
    return _assemble(vocab, merges, added, "vocab.json/tokenizer_config.json")


class Tokenizer:
    """Byte-level BPE identical in ids to the reference Qwen2TokenizerFast."""

    def __init__(self, tok: Any, size: int) -> None:
        self._tok = tok
        self._size = size
        self._head = self.encode(_ASSISTANT_HEAD)
        self._tail = self.encode(_ASSISTANT_TAIL)
        self._ref_tail = self.encode(_REF_TAIL)

    @classmethod
    def from_data(cls, data: TokenizerData) -> Tokenizer:
        # Imported here so that tokenizer_metadata (used by the GGUF writer) needs no tokenizers.
        from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
        from tokenizers import Tokenizer as HFTokenizer

        if len(data.tokens) != len(data.token_types):
            raise ValueError("tokens and token_types differ in length")
        vocab: dict[str, int] = {}
        for i, (tok, ty) in enumerate(zip(data.tokens, data.token_types, strict=True)):
            if ty == TokenType.UNUSED:
                continue
            if tok in vocab:
                raise ValueError(f"token {tok!r} appears twice (ids {vocab[tok]} and {i})")
            vocab[tok] = i
        pairs = [tuple(m.split(" ")) for m in data.merges]
        if any(len(p) != 2 for p in pairs):
            raise ValueError("a merge is not of the form 'a b'")
        # Added tokens sit in the BPE vocab too: `add_tokens` reuses a model id for known
        # content, otherwise it would number them itself and gaps would shift every id.
        # No merge produces them, so BPE output is unaffected.
        try:
            bpe = models.BPE(vocab, pairs, dropout=None, unk_token=None, continuing_subword_prefix="",
                             end_of_word_suffix="", fuse_unk=False, byte_fallback=False,
                             ignore_merges=False)
        except Exception as e:  # tokenizers raises a bare Exception for a bad merge
            raise ValueError(f"invalid BPE data: {e}") from e
        tok = HFTokenizer(bpe)
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()

        def added(ty: TokenType) -> list[Any]:
            return [AddedToken(t, special=ty == TokenType.CONTROL, normalized=False,
                               lstrip=False, rstrip=False, single_word=False)
                    for t, y in zip(data.tokens, data.token_types, strict=True) if y == ty]

        tok.add_special_tokens(added(TokenType.CONTROL))
        tok.add_tokens(added(TokenType.USER_DEFINED))
        return cls(tok, len(data.tokens))

    @classmethod
    def from_dir(cls, hf_dir: str | os.PathLike[str]) -> Tokenizer:
        return cls.from_data(tokenizer_metadata(hf_dir))

    @property
    def vocab_size(self) -> int:
        """Number of ids (max id + 1, gaps included)."""
        return self._size

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Iterable[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=False))

    def token_to_id(self, tok: str) -> int:
        i = self._tok.token_to_id(tok)
        if i is None:
            raise KeyError(tok)
        return int(i)

    def assistant_ids(self, text: str) -> list[int]:
        return self.encode(assistant_text(text))

    def ref_ids(self, text: str) -> list[int]:
        return self.encode(ref_text(text))

    def instruct_ids(self, text: str) -> list[int]:
        return self.encode(instruct_text(text))

    def prompt_text_ids(self, text: str) -> list[int]:
        """Text tokens t0..t_{m-1} = assistant_ids(text)[3:-5], as the reference slices them."""
        return self._sliced(self.assistant_ids(text), text, "text", self._tail, 5)

    def ref_prompt_ids(self, text: str) -> list[int]:
        """Reference-text tokens = ref_ids(text)[3:-2] (ICL)."""
        return self._sliced(self.ref_ids(text), text, "ref_text", self._ref_tail, 2)

    def _sliced(self, ids: list[int], text: str, what: str, tail: list[int], n_tail: int
                ) -> list[int]:
        if not text.strip():
            raise ValueError(f"{what} is empty")
        # The reference's generate slices by position (docs/model.md, "Prompt layouts"): a vocabulary that splits the
        # template differently would make it cut into the text, so refuse it.
        if len(self._head) != 3 or len(tail) != n_tail:
            raise ValueError("this vocabulary does not encode the chat template as the "
                             "reference's slicing assumes (3 head / 5 or 2 tail tokens)")
        if ids[:3] != self._head:
            raise ValueError(f"{what} begins with whitespace that merges with the template's "
                             f"trailing newline; strip leading newlines: {text[:16]!r}")
        if len(ids) < 3 + len(tail) or ids[-len(tail):] != tail:
            raise ValueError(f"{what} ends in a way that merges with the template's "
                             f"<|im_end|> suffix: {text[-16:]!r}")
        return ids[3:-len(tail)]
