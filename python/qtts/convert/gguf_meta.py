"""Read qtts GGUF metadata from Python with the gguf package (the quantizer and tests)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import GGUFReader, GGUFValueType


def _text(path: str | Path, key: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: metadata key '{key}' holds a string that is not valid UTF-8") from None


def read_fields(path: str | Path) -> tuple[GGUFReader, dict[str, Any]]:
    """The reader and every metadata value (strings decoded); ValueError naming the file, and the
    key where there is one, for a file gguf cannot parse or a string that is not UTF-8."""
    try:
        reader = GGUFReader(str(path), "r")
    except UnicodeDecodeError:  # gguf decodes key and tensor names itself
        raise ValueError(f"{path}: a metadata key or tensor name is not valid UTF-8") from None
    except (ValueError, OSError, IndexError, KeyError, OverflowError, MemoryError) as e:
        raise ValueError(f"{path}: cannot read GGUF metadata: {e}") from None
    fields: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        types = field.types
        if types and types[0] == GGUFValueType.ARRAY and len(types) > 1 and types[1] == GGUFValueType.STRING:
            fields[key] = [_text(path, key, bytes(field.parts[i])) for i in field.data]
        elif types and types[0] == GGUFValueType.STRING:
            fields[key] = _text(path, key, bytes(field.parts[field.data[0]]))
        else:
            fields[key] = field.contents()
    return reader, fields

