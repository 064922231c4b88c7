"""Every Python example of README.md and docs/*.md runs as written, against the tiny models, so the
documentation cannot go stale (docs/developing.md, "The examples in the documentation").

Each ```python block runs in a fresh interpreter inside a scratch folder holding the files the
examples name (model.gguf, custom_voice.gguf, base.gguf, voice-design.gguf, aligner.gguf, me.wav).
The server examples talk to a live `qtts-cli serve` on a loopback port: their documented address and key are
replaced by that server's. A block whose info string says `norun` is not run.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.fixtures.server import LiveServer, start_server

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?!`)(\S*)[ \t]*(.*)$")  # an opening (or closing) fence and its info string
NORUN = "norun"
DOC_URL, DOC_KEY = "http://127.0.0.1:8000/v1", "the key given to --api-key"
KEY = "docs-key"
TIMEOUT_S = 600


@dataclass(frozen=True)
class Example:
    doc: str
    line: int  # of the opening fence
    info: str  # what follows the language in the info string
    code: str

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def python_blocks(path: Path) -> list[Example]:
    """The ```python blocks of one Markdown file, `norun` ones included."""
    out: list[Example] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang, info = i, m.group(1), m.group(2).strip()
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        if lang == "python":
            doc = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
            out.append(Example(doc, start + 1, info, "\n".join(lines[start + 1:i]) + "\n"))
        i += 1
    return out


ALL = [e for doc in DOCS for e in python_blocks(doc)]
RUN = [e for e in ALL if e.info != NORUN]


def test_examples_are_found_and_marked_only_with_norun() -> None:
    # an info string the test does not know would be neither run nor knowingly skipped
    assert {e.doc for e in RUN} >= {"README.md", "docs/python.md", "docs/server.md"}
    assert [e.name for e in ALL if e.info not in ("", NORUN)] == []


def test_blocks_are_read_with_their_info_string(tmp_path: Path) -> None:
    md = tmp_path / "page.md"
    md.write_text("Text with ```` ```python ```` inline.\n\n```python\nprint(1)\n```\n\n```bash\nls\n```\n\n"
                  "```python norun\nfragment(\n```\n", encoding="utf-8")
    assert python_blocks(md) == [Example("page.md", 3, "", "print(1)\n"), Example("page.md", 11, NORUN, "fragment(\n")]


@pytest.fixture(scope="module")
def workdir(fixture_root: Path, reference_aligner_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the examples name: tiny models at F32, the tiny forced aligner and a 3 s reference clip."""
    from qtts.convert.checkpoint import convert

    d = tmp_path_factory.mktemp("docs")
    convert(reference_aligner_dir, d / "aligner.gguf", "f32")
    for name, files in (("tiny_custom_voice", ("model.gguf", "custom_voice.gguf")), ("tiny_base", ("base.gguf",)),
                        ("tiny_voice_design", ("voice-design.gguf",))):
        convert(fixture_root / name, d / files[0], "f32")
        for alias in files[1:]:
            (d / alias).symlink_to(d / files[0])
    rng = np.random.default_rng(0)
    t = np.arange(3 * 24000) / 24000
    clip = 0.3 * np.sin(2 * np.pi * 150 * t) + 0.03 * rng.standard_normal(len(t))
    sf.write(d / "me.wav", clip.astype(np.float32), 24000)
    return d


@pytest.fixture(scope="module")
def server(workdir: Path) -> LiveServer:
    s = start_server(workdir / "model.gguf", workdir / "serve.log", "--api-key", KEY, "--aligner",
                     str(workdir / "aligner.gguf"))
    yield s
    assert s.stop() == 0, s.log.read_text()
    assert "Traceback" not in s.log.read_text(), s.log.read_text()


@pytest.mark.parametrize("example", RUN, ids=[e.name for e in RUN])
def test_example_runs(example: Example, workdir: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    code = example.code
    if DOC_URL in code:
        server: LiveServer = request.getfixturevalue("server")
        code = code.replace(DOC_URL, f"{server.url}/v1").replace(DOC_KEY, KEY)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for f in workdir.iterdir():
        if f.suffix in (".gguf", ".wav"):
            (run_dir / f.name).symlink_to(f)
    env = {**os.environ, "QTTS_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", code], cwd=run_dir, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT_S)
    assert p.returncode == 0, f"{example.name} failed:\n{code}\n{p.stderr[-4000:]}"
    # what the examples write lands where they say, complete
    for out in re.findall(r"""["']([\w.-]+\.(?:wav|mp3|raw|qvoice))["']""", code):
        if (workdir / out).exists():
            continue  # an input
        assert (run_dir / out).stat().st_size > 0, f"{example.name} wrote no {out}"
