"""Read qtts GGUF metadata from Python (tokenizer tables, info) with the gguf package."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import GGUFReader, GGUFValueType

from .names import KV
from .tokenizer import TokenizerData


def read_fields(path: str | Path) -> tuple[GGUFReader, dict[str, Any]]:
    try:
        reader = GGUFReader(str(path), "r")
    except (ValueError, OSError, IndexError) as e:
        raise ValueError(f"{path}: cannot read GGUF metadata: {e}") from None
    fields: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if field.types and field.types[0] == GGUFValueType.ARRAY and len(field.types) > 1 \
                and field.types[1] == GGUFValueType.STRING:
            fields[key] = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        else:
            fields[key] = field.contents()
    return reader, fields


def read_tokenizer(path: str | Path) -> TokenizerData:
    _, f = read_fields(path)
    for key in (KV.TOKENIZER_TOKENS, KV.TOKENIZER_TOKEN_TYPE, KV.TOKENIZER_MERGES):
        if key not in f:
            raise ValueError(f"{path}: metadata key {key!r} is missing (no tokenizer in this file)")
    return TokenizerData(tokens=list(f[KV.TOKENIZER_TOKENS]), token_types=[int(t) for t in f[KV.TOKENIZER_TOKEN_TYPE]],
                         merges=list(f[KV.TOKENIZER_MERGES]))
