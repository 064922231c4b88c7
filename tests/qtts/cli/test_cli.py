"""qtts-cli convert and info, run as a user would."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.build import MODEL_NAMES


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qtts.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_convert_then_info(name: str, fixture_root: Path, tmp_path: Path) -> None:
    out = tmp_path / f"{name}.gguf"
    r = _cli("convert", str(fixture_root / name), "-o", str(out), "--type", "q8_0")
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and out.exists()
    r = _cli("info", str(out))
    assert r.returncode == 0, r.stderr
    variant = {"tiny_base": "base", "tiny_custom_voice": "custom_voice", "tiny_voice_design": "voice_design"}[name]
    assert f"qwen3-tts {variant}" in r.stdout
    assert "Q8_0" in r.stdout and "languages" in r.stdout
    info = json.loads(_cli("info", str(out), "--json").stdout)
    assert info["variant"] == variant and info["tensor_count"] > 300
    assert info["tensors_by_type"]["Q8_0"] > 0 and "F16" not in info["tensors_by_type"]
    assert (info["speakers"] == ["dylan", "ryan", "vivian"]) == (name == "tiny_custom_voice")


def test_cli_errors(tmp_path: Path) -> None:
    r = _cli("convert", str(tmp_path), "-o", str(tmp_path / "x.gguf"))
    assert r.returncode == 1 and "qtts-cli: error:" in r.stderr and "config.json" in r.stderr
    assert "Traceback" not in r.stderr
    r = _cli("convert", str(tmp_path), "-o", str(tmp_path / "x.gguf"), "--type", "f16")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = _cli("info", str(tmp_path / "missing.gguf"))
    assert r.returncode == 1 and "missing.gguf" in r.stderr
