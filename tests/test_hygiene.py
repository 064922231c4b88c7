"""The hygiene gate's Python part: `ruff check python tests scripts` (pyflakes, bugbear, import order,
line length; configured in pyproject.toml) finds nothing (docs/developing.md, "Hygiene")."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    # ruff comes with the test extra, into this interpreter's environment
    cmd = [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
           "python", "tests", "scripts"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, f"ruff findings (fix them, or `# noqa: CODE` with the reason):\n{p.stdout}{p.stderr}"
