"""Bulk-synthesis manifests (docs/bulk.md, "How it runs"): JSONL, one object per item,
or plain text, one item per non-empty line. Every line is validated into an Item before any
synthesis; a bad line becomes a LineError (its number and the reason) instead of an exception."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runtime.settings import config
from ..runtime.settings.config import check_setting, parse_frame_budget
from ..runtime.settings.generation import check_text
from ..runtime.settings.options import RequestOptions, specs_of

# The fields an item may carry: qwen-tts's names for the request options declared as manifest
# fields (runtime/settings/options.py) and the sampling settings. Text fields are checked as text, path
# fields name files (voice files, reference clips), value fields by the option's own check.
REQUEST_FIELDS = {name: spec.manifest for name, spec in specs_of(RequestOptions).items() if spec.manifest}
TEXT_FIELDS = tuple(k for k, kind in REQUEST_FIELDS.items() if kind == "text")
PATH_FIELDS = tuple(k for k, kind in REQUEST_FIELDS.items() if kind == "path")


def fields() -> tuple[str, ...]:
    """Every manifest field: the request's, then every declared generation setting
    (config.SETTING_SPECS, read when called)."""
    return ("id", "text", *REQUEST_FIELDS, *config.SETTING_SPECS)


FIELDS = fields()
# An id names its output file: no separators, no leading dot, and short enough for any file system.
ID_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


@dataclass(frozen=True)
class Item:
    """One validated manifest entry. Paths are absolute; `sampling` holds only the settings given
    (the model's generation defaults fill the rest, as in Model.synthesize)."""
    id: str
    text: str
    line: int
    speaker: str | None = None
    language: str = "auto"
    instruct: str | None = None
    voice: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool = False
    seed: int | None = None
    frame_budget: int | str | None = "auto"
    word_timestamps: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)

    @property
    def reference(self) -> tuple[str, str | None, bool] | None:
        """The clip to clone (path, transcript, x-vector only), encoded once per distinct value."""
        if self.ref_audio is None:
            return None
        return self.ref_audio, self.ref_text, self.x_vector_only_mode

    def request(self) -> dict[str, Any]:
        """Model.synthesize's keyword arguments, the voice (voice / ref_audio and its clip's
        ref_text and mode: Synth encodes each clip once) excepted."""
        voice = (*PATH_FIELDS, "ref_text", "x_vector_only_mode")
        return {**{k: getattr(self, k) for k in REQUEST_FIELDS if k not in voice}, **self.sampling}

    def row(self) -> dict[str, Any]:
        """Every manifest field, flat (None where not given): a Ray Data row with one schema for all
        items. frame_budget is a string ("auto", "none" or a number) so that its column has one type."""
        row = dict(id=self.id, text=self.text, **{k: getattr(self, k) for k in REQUEST_FIELDS},
                   **{k: self.sampling.get(k) for k in config.SETTING_SPECS})
        row["frame_budget"] = "none" if self.frame_budget is None else str(self.frame_budget)
        return row


@dataclass(frozen=True)
class LineError:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class Manifest:
    path: Path
    format: str  # "jsonl" or "text"
    items: list[Item]
    errors: list[LineError]


def _text(name: str, value: Any, *, empty: bool = True) -> str:
    """A text field as the model checks its texts (a JSON "\\ud800" escape is a lone surrogate:
    refused on its line, before any synthesis)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    return str(check_text(value, name, allow_empty=empty))


def _integral(name: str, value: Any) -> Any:
    """JSON and Arrow hand integers over as floats at times (1.0): take those, refuse 1.5."""
    spec = config.SETTING_SPECS.get(name)
    integer = name == "seed" or (spec is not None and spec.kind is int)
    if integer and isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def parse_item(obj: Any, line: int, base: Path | None = None, defaults: dict[str, Any] | None = None) -> Item:
    """An Item from one manifest object; TypeError / ValueError / OSError naming the field.
    `defaults` (the command line's) fill fields the object leaves out or sets to null; relative
    voice and ref_audio paths are resolved against `base`, the manifest's folder."""
    if not isinstance(obj, dict):
        raise TypeError(f"expected a JSON object, got {type(obj).__name__}")
    known = fields()
    unknown = [k for k in obj if k not in known]
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(map(repr, unknown))} (fields: {', '.join(known)})")
    given = {k: v for k, v in obj.items() if v is not None}
    if defaults and not any(k in given for k in ("voice", "ref_audio")):
        given = {**{k: v for k, v in defaults.items() if v is not None}, **given}
    elif defaults:
        given = {**{k: v for k, v in defaults.items() if v is not None and k not in PATH_FIELDS}, **given}
    if "id" not in given:
        raise ValueError("missing field 'id'")
    ident = given["id"]
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = str(ident)
    ident = _text("id", ident)
    if not ID_PATTERN.fullmatch(ident):
        raise ValueError(f"id {ident!r} cannot name a file: use letters, digits, '_', '-' and '.' (not first), "
                         f"at most 200 characters")
    if "text" not in given:
        raise ValueError("missing field 'text'")
    kw: dict[str, Any] = dict(id=ident, text=_text("text", given["text"], empty=False), line=line)
    for name in TEXT_FIELDS:
        if name in given:
            kw[name] = _text(name, given[name])
    for name in PATH_FIELDS:
        if name in given:
            p = Path(_text(name, given[name], empty=False)).expanduser()
            p = p if p.is_absolute() or base is None else base / p
            if not p.is_file():
                raise FileNotFoundError(f"{name} {str(p)!r}: no such file")
            kw[name] = str(p)
    for name, kind in REQUEST_FIELDS.items():
        if kind == "value" and name in given:
            value = _integral(name, given[name])
            check = specs_of(RequestOptions)[name].check
            if check is not None:
                check(name, value)
            kw[name] = parse_frame_budget(value) if name == "frame_budget" else value
    kw["sampling"] = {k: check_setting(k, _integral(k, given[k])) for k in config.SETTING_SPECS if k in given}
    _check_voice_fields(kw)
    return Item(**kw)


def _check_voice_fields(kw: dict[str, Any]) -> None:
    if "voice" in kw and "ref_audio" in kw:
        raise ValueError("give either voice or ref_audio, not both")
    if "ref_audio" not in kw:
        for name in ("ref_text", "x_vector_only_mode"):
            if kw.get(name):
                raise ValueError(f"{name} goes with ref_audio")
    elif not kw.get("x_vector_only_mode") and not (kw.get("ref_text") or "").strip():
        raise ValueError("ref_audio needs ref_text (its transcript) for in-context cloning, or "
                         "x_vector_only_mode: true")


def detect_format(path: Path, data: bytes) -> str:
    if path.suffix.lower() in JSONL_SUFFIXES:
        return "jsonl"
    if path.suffix.lower() == ".txt":
        return "text"
    first = next((ln.strip() for ln in data.splitlines() if ln.strip()), b"")
    return "jsonl" if first.startswith(b"{") else "text"


def read_manifest(path: str | Path, defaults: dict[str, Any] | None = None) -> Manifest:
    """Every item of a manifest file, and the lines that could not be read (OSError if the file
    itself cannot be). Duplicate ids: the first is kept, each later one is an error."""
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{p}: is a directory, not a manifest")
    data = p.read_bytes().removeprefix(b"\xef\xbb\xbf")
    fmt = detect_format(p, data)
    base = p.resolve().parent
    items: list[Item] = []
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            errors.append(LineError(n, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})"))
            continue
        try:
            if fmt == "jsonl":
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as e:
                    raise ValueError(f"bad JSON ({e.msg} at column {e.colno})") from None
            else:
                obj = {"id": str(n), "text": text}
            item = parse_item(obj, n, base, defaults)
        except (TypeError, ValueError, OSError) as e:
            errors.append(LineError(n, str(e)))
            continue
        if item.id in seen:
            errors.append(LineError(n, f"duplicate id {item.id!r} (first on line {seen[item.id]})"))
            continue
        seen[item.id] = n
        items.append(item)
    return Manifest(p, fmt, items, errors)
