"""The hygiene gate: `ruff check python tests scripts benchmarks` (pyflakes, bugbear, import order, line length;
configured in pyproject.toml) finds nothing, and `clang-format --dry-run -Werror` (configured in
.clang-format) would change no line of csrc/ (docs/developing.md, "Hygiene")."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import clang_format

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    # ruff comes with the test extra, into this interpreter's environment
    cmd = [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
           "python", "tests", "scripts", "benchmarks"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, f"ruff findings (fix them, or `# noqa: CODE` with the reason):\n{p.stdout}{p.stderr}"


def test_clang_format_changes_nothing() -> None:
    # the pinned clang-format of the test extra (its wheel carries the binary), not one on PATH
    exe = clang_format.get_executable("clang-format")
    sources = sorted(str(p.relative_to(ROOT)) for ext in ("h", "cpp") for p in (ROOT / "csrc").rglob(f"*.{ext}"))
    assert len(sources) > 50, sources
    p = subprocess.run([exe, "--dry-run", "-Werror", "--style=file", *sources], cwd=ROOT, capture_output=True,
                       text=True)
    assert p.returncode == 0, (
        "clang-format would reformat these lines (run `clang-format -i` over them, docs/developing.md, "
        f"\"Hygiene\"):\n{p.stderr[-6000:]}")
