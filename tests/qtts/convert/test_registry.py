"""Fetching a released checkpoint through a fake local Hugging Face cache (never the network)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import qtts
from qtts.convert.registry import MODELS, fetch


def _fake_cache(hf_home: Path, repo_id: str, checkpoint: Path) -> None:
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(checkpoint, repo / "snapshots" / "0123456789abcdef")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef")


def offline_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, repo_id: str, checkpoint: Path) -> None:
    """This process sees `checkpoint` as `repo_id` in an offline Hugging Face cache under
    tmp_path/hf, and a fresh qtts cache under tmp_path/qtts-cache."""
    import huggingface_hub.constants as c

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("QTTS_CACHE", str(tmp_path / "qtts-cache"))
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    _fake_cache(tmp_path / "hf", repo_id, checkpoint)


def test_fetch_offline_from_cache(fixture_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo_id = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
    offline_hub(monkeypatch, tmp_path, repo_id, fixture_root / "tiny_custom_voice")
    out = fetch(repo_id, tmp_path / "models", "q8_0")
    assert out.name == "Qwen3-TTS-12Hz-0.6B-CustomVoice-q8_0.gguf"
    info = qtts.inspect(out)
    assert info.variant == "custom_voice" and info.name == repo_id
    assert fetch(repo_id, tmp_path / "models", "q8_0").stat().st_mtime == out.stat().st_mtime


def test_registry_and_unknown_repo(tmp_path: Path) -> None:
    assert {r.variant for r in MODELS.values()} == {"base", "custom_voice", "voice_design", "forced_aligner"}
    with pytest.raises(ValueError, match="not a released Qwen3-TTS"):
        fetch("someone/else", tmp_path)


def test_load_by_repo_id(fixture_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo_id = "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign"
    offline_hub(monkeypatch, tmp_path, repo_id, fixture_root / "tiny_voice_design")
    m = qtts.load(repo_id, n_threads=1, convert_type="bf16")
    assert m.variant == "voice_design"
    assert m.path == tmp_path / "qtts-cache" / "Qwen3-TTS-12Hz-1.7B-VoiceDesign-bf16.gguf"
    with pytest.raises(FileNotFoundError):
        qtts.load(tmp_path / "missing.gguf")


def test_cli_speaks_from_a_repo_id(fixture_root: Path, tmp_path: Path) -> None:
    """The README's first command, offline against a fake Hugging Face cache: converted once to
    the default Q8_0 in $QTTS_CACHE, reused by the next run."""
    import os
    import subprocess
    import sys

    repo_id = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
    _fake_cache(tmp_path / "hf", repo_id, fixture_root / "tiny_custom_voice")
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", QTTS_CACHE=str(tmp_path / "qtts"))
    env.pop("HF_HUB_CACHE", None)
    cmd = [sys.executable, "-m", "qtts.cli", "-m", repo_id, "--speaker", "ryan", "-p", "Hello from qtts.",
           "--greedy", "--max-new-tokens", "4", "-t", "1"]
    for name, first in (("a.wav", True), ("b.wav", False)):
        r = subprocess.run([*cmd, "-o", str(tmp_path / name)], env=env, capture_output=True, text=True,
                           timeout=300, stdin=subprocess.DEVNULL)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        # piped: one line says what the first run converts, and no per-tensor lines
        assert ("converting Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice once to q8_0" in r.stderr) == first, r.stderr
        assert "[1/" not in r.stderr
    assert (tmp_path / "a.wav").read_bytes() == (tmp_path / "b.wav").read_bytes()
    assert [p.name for p in (tmp_path / "qtts").glob("*.gguf")] == ["Qwen3-TTS-12Hz-0.6B-CustomVoice-q8_0.gguf"]


@pytest.mark.parametrize("offline", [True, False])
def test_repo_id_that_cannot_be_had_says_what_to_do(fixture_root: Path, tmp_path: Path, offline: bool) -> None:
    """The README's first command with no network and the checkpoint not cached (the cache
    holds another repo): qtts's own one-line error naming the repo, the cache folder looked in,
    and the two ways on, from the command line and from qtts.load."""
    import os
    import subprocess
    import sys

    repo_id = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
    _fake_cache(tmp_path / "hf", "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign", fixture_root / "tiny_voice_design")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf"), QTTS_CACHE=str(tmp_path / "qtts"),
               HF_ENDPOINT="http://127.0.0.1:9")  # nothing listens there: no network, even in CI
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    cli = subprocess.run([sys.executable, "-m", "qtts.cli", "-m", repo_id, "--speaker", "ryan", "-p", "Hi",
                          "-o", str(tmp_path / "a.wav")], env=env, capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    lib = subprocess.run([sys.executable, "-c", f"import qtts; qtts.load({repo_id!r})"], env=env,
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert cli.returncode == 1 and lib.returncode == 1
    assert cli.stderr.count("\n") == 1 and cli.stderr.startswith(f"qtts-cli: error: cannot get {repo_id}: ")
    assert "OSError: cannot get" in lib.stderr
    for err in (cli.stderr, lib.stderr):
        why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face Hub could not be reached"
        assert why in err and "not in the local Hugging Face cache" in err
        assert str(tmp_path / "hf" / "hub" / "models--Qwen--Qwen3-TTS-12Hz-0.6B-CustomVoice") in err
        assert "connected to the internet" in err and ("without HF_HUB_OFFLINE" in err) == offline
        assert "`qtts-cli convert LOCAL_DIR -o model.gguf`" in err and "`-m model.gguf`" in err
        assert "local_files_only" not in err and "check your internet connection" not in err
    assert not (tmp_path / "a.wav").exists() and not list((tmp_path / "hf" / "hub").glob("*CustomVoice*"))
