"""The C++ layers written in docs/architecture.md ("Layers") are the layers the code has: every
`#include "..."` under csrc/ is checked against the layer table and the exception table there."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
DOC = ROOT / "docs" / "architecture.md"
SOURCES = (".h", ".cpp")
# ggml's headers, below every layer; anything else quoted must be a file of csrc/
EXTERNAL = re.compile(r"^(ggml[-\w]*|gguf)\.h$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)

@dataclass(frozen=True)
class Layer:
    name: str
    patterns: tuple[str, ...]
    may_include: frozenset[str]


def _table(text: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the markdown table whose header row starts with `header`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    raise AssertionError(f"docs/architecture.md has no table starting {header!r}")


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _layers() -> list[Layer]:
    rows = _table(DOC.read_text(encoding="utf-8"), "| layer | files")
    names = [r[0] for r in rows]
    layers = []
    for name, files, may in rows:
        words = [w.strip() for w in re.sub(r"\(.*?\)", "", may).split(",") if w.strip()]
        unknown = [w for w in words if w not in names]
        assert not unknown, f"layer {name!r} may include unknown layers {unknown}"
        layers.append(Layer(name, tuple(_ticked(files)), frozenset(words)))
    return layers


def _exceptions() -> set[tuple[str, str]]:
    rows = _table(DOC.read_text(encoding="utf-8"), "| file | includes")
    return {(_ticked(f)[0], _ticked(inc)[0]) for f, inc, _ in rows}


def _sources() -> list[str]:
    return sorted(p.relative_to(CSRC).as_posix() for p in CSRC.rglob("*") if p.suffix in SOURCES)


def _layer_of(path: str, layers: list[Layer]) -> Layer:
    hits = [layer for layer in layers if any(fnmatch.fnmatchcase(path, pat) for pat in layer.patterns)]
    assert len(hits) == 1, (f"csrc/{path} matches {len(hits)} rows of the layer table in docs/architecture.md "
                            f"({[h.name for h in hits]}); give it exactly one")
    return hits[0]


def _includes() -> list[tuple[str, str]]:
    out = []
    for path in _sources():
        for target in INCLUDE.findall((CSRC / path).read_text(encoding="utf-8")):
            out.append((path, target))
    return out


def _own_header(path: str, target: str) -> bool:
    return Path(path).with_suffix("").as_posix() == Path(target).with_suffix("").as_posix()


def _violations(includes: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(file, included file, why) for every include that the tables do not allow."""
    layers = _layers()
    by_name = {layer.name: layer for layer in layers}
    allowed = _exceptions()
    out = []
    for path, target in includes:
        if not (CSRC / target).is_file():
            if not EXTERNAL.match(target):
                out.append((path, target, "neither a file of csrc/ nor a ggml header"))
            continue
        src, dst = _layer_of(path, layers), _layer_of(target, layers)
        if _own_header(path, target) or (path, target) in allowed:
            continue
        if dst.name not in by_name[src.name].may_include:
            out.append((path, target, f"{src.name} may not include {dst.name}"))
    return out


def test_every_source_file_has_one_layer() -> None:
    layers = _layers()
    assert _sources(), "no C++ sources found"
    for path in _sources():
        _layer_of(path, layers)


def test_every_row_names_files_that_exist() -> None:
    sources = _sources()
    for layer in _layers():
        for pat in layer.patterns:
            assert fnmatch.filter(sources, pat), f"layer {layer.name!r}: `{pat}` matches no file of csrc/"
    for path, target in _exceptions():
        assert (path, target) in _includes(), f"exception csrc/{path} -> {target}: no such include (remove it)"


def test_includes_follow_the_layer_table() -> None:
    found = _violations(_includes())
    assert not found, "includes against docs/architecture.md, \"Layers\":\n" + "\n".join(
        f"  csrc/{p} includes {t}: {why}" for p, t, why in found)


@pytest.mark.parametrize(("path", "target", "why"), [
    ("nets/speaker_encoder.cpp", "runtime/session.h", "nets may not include session"),
    ("nets/codec_encoder.cpp", "nets/vocoder.h", "nets may not include nets"),
    ("runtime/metadata.h", "runtime/model.h", "basics may not include model"),
    ("ops/attend.cpp", "runtime/graph.h", "ops may not include basics"),
    ("runtime/error.h", "ops/simd.h", "base may not include ops"),
    ("runtime/graph.cpp", "pybind11.h", "neither a file of csrc/ nor a ggml header"),
])
def test_checker_refuses_a_wrong_include(path: str, target: str, why: str) -> None:
    # the check itself, on includes the code no longer has (or never had)
    assert _violations([(path, target)]) == [(path, target, why)]
