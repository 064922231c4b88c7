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
    from ._native import core

    tokens, types, merges = core.read_tokenizer(str(path))
    return TokenizerData(tokens=tokens, token_types=types, merges=merges)
