"""qtts-cli speak / speakers / languages, run as a user would (tiny models, greedy, 8 tokens)."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf  # a runtime dependency: imported, never skipped

SHORT = ("--greedy", "--max-new-tokens", "8")
SAMPLES_PER_FRAME = 1920  # 24 kHz / 12.5 Hz


def _cli(*args: str, input: str | bytes | None = None, text: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qtts.cli", *args], input=input, capture_output=True,
                          text=text, timeout=300, stdin=None if input is not None else subprocess.DEVNULL)


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> str:
    return str(gguf_dir / "tiny_custom_voice-f32.gguf")


def _speak(cv: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return _cli("speak", "-m", cv, "--speaker", "ryan", *SHORT, *args, **kw)


def _ok(r: subprocess.CompletedProcess) -> None:
    err = r.stderr if isinstance(r.stderr, str) else r.stderr.decode(errors="replace")
    assert r.returncode == 0, err
    assert "Traceback" not in err


def _read_wav(path_or_bytes) -> np.ndarray:
    f = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    info = sf.info(f)
    assert (info.samplerate, info.channels, info.format, info.subtype) == (24000, 1, "WAV", "PCM_16")
    if isinstance(f, io.BytesIO):
        f.seek(0)
    data, _ = sf.read(f, dtype="int16")
    return data


def test_speak_to_wav_with_json_and_timings(cv: str, tmp_path: Path) -> None:
    out = tmp_path / "hello.wav"
    r = _speak(cv, "-p", "Hello world.", "-o", str(out), "-s", "7", "--json", "--timings")
    _ok(r)
    report = json.loads(r.stdout)
    assert report["variant"] == "custom_voice" and report["sample_rate"] == 24000
    assert report["seed"] == 7 and report["speaker"] == "ryan" and report["language"] == "auto"
    (o,) = report["outputs"]
    assert o["output"] == str(out) and o["text"] == "Hello world."
    assert 1 <= o["frames"] <= 7 and o["stop_reason"] in ("eos", "max_new_tokens")
    assert o["timings"]["frames"] == o["frames"] and o["timings"]["total_ms"] > 0
    samples = _read_wav(str(out))
    assert len(samples) == o["frames"] * SAMPLES_PER_FRAME
    assert o["audio_seconds"] == pytest.approx(len(samples) / 24000)
    assert "talker" in r.stderr and "RTF" in r.stderr  # the --timings table


def test_default_command_stdout_wav_and_determinism(cv: str, tmp_path: Path) -> None:
    out = tmp_path / "a.wav"
    _ok(_cli("-m", cv, "-p", "Hi there.", "-o", str(out), "--speaker", "ryan", *SHORT))  # no "speak"
    r = _speak(cv, "-p", "Hi there.", "-o", "-", "--json", text=False)
    _ok(r)
    assert r.stdout[:4] == b"RIFF" and r.stdout[8:12] == b"WAVE"
    report = json.loads(r.stderr)  # audio on stdout: the report goes to stderr
    assert report["outputs"][0]["output"] == "-"
    np.testing.assert_array_equal(_read_wav(r.stdout), _read_wav(str(out)))  # greedy: same audio


def test_raw_stream(cv: str, tmp_path: Path) -> None:
    out = tmp_path / "ref.wav"
    _ok(_speak(cv, "-p", "Streaming test.", "-o", str(out)))
    r = _speak(cv, "-p", "Streaming test.", "--raw", text=False)
    _ok(r)
    err = r.stderr.decode()
    assert "ffplay -f s16le -ar 24000 -ac 1" in err and "aplay -f S16_LE -r 24000 -c 1" in err
    assert len(r.stdout) > 0 and len(r.stdout) % 2 == 0
    pcm = np.frombuffer(r.stdout, dtype="<i2")
    ref = _read_wav(str(out))
    assert len(pcm) == len(ref) and len(pcm) % SAMPLES_PER_FRAME == 0
    np.testing.assert_allclose(pcm.astype(np.int32), ref.astype(np.int32), atol=8)


def test_output_dir_from_file(cv: str, tmp_path: Path) -> None:
    text = tmp_path / "lines.txt"
    text.write_text("First line.\n\n   \nSecond line.\n", encoding="utf-8")
    out = tmp_path / "clips"
    r = _speak(cv, "-f", str(text), "--output-dir", str(out), "--json")
    _ok(r)
    assert sorted(p.name for p in out.iterdir()) == ["001.wav", "002.wav"]
    outputs = json.loads(r.stdout)["outputs"]
    assert [o["text"] for o in outputs] == ["First line.", "Second line."]
    for o in outputs:
        assert len(_read_wav(o["output"])) == o["frames"] * SAMPLES_PER_FRAME


def test_text_from_stdin(cv: str, tmp_path: Path) -> None:
    out = tmp_path / "stdin.flac"
    _ok(_speak(cv, "-o", str(out), input="Read from standard input.\n"))
    assert sf.info(str(out)).format == "FLAC" and sf.info(str(out)).frames > 0


def test_voice_design_with_instruct(gguf_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "vd.wav"
    _ok(_cli("-m", str(gguf_dir / "tiny_voice_design-f32.gguf"), "-p", "Designed voice.",
             "--instruct", "A calm, low voice.", "-o", str(out), *SHORT))
    assert len(_read_wav(str(out))) % SAMPLES_PER_FRAME == 0


def test_speakers_and_languages(cv: str, gguf_dir: Path) -> None:
    r = _cli("speakers", cv)
    _ok(r)
    assert r.stdout.split() == ["dylan", "ryan", "vivian"]
    r = _cli("languages", cv)
    _ok(r)
    langs = r.stdout.split()
    assert langs[0] == "auto" and "english" in langs and not any("dialect" in x for x in langs)
    r = _cli("speakers", str(gguf_dir / "tiny_voice_design-f32.gguf"))
    _ok(r)
    assert r.stdout == ""


@pytest.mark.parametrize("output, message", [
    ("out.mp3", "unsupported audio extension '.mp3'"),
    ("out", "unsupported audio extension '(none)'"),
    ("missing/dir/out.wav", "does not exist"),
])
def test_bad_output_fails_before_loading(tmp_path: Path, output: str, message: str) -> None:
    # the model path does not exist either: the output is checked first, before any work
    r = _cli("-m", str(tmp_path / "no-model.gguf"), "-p", "hello", "-o", str(tmp_path / output))
    assert r.returncode == 1 and r.stderr.startswith("qtts-cli: error:") and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "no-model" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_ops_flag_picks_the_codec_path(cv: str, tmp_path: Path) -> None:
    wavs = []
    for ops in ("native", "portable"):
        out = tmp_path / f"{ops}.wav"
        _ok(_speak(cv, "-p", "Hello world.", "-o", str(out), "-s", "3", "--ops", ops))
        wavs.append(_read_wav(str(out)).astype(np.int32))
    # the same codes; the two vocoder paths agree within 1e-4 (3 PCM16 steps)
    assert len(wavs[0]) == len(wavs[1]) > 0 and np.abs(wavs[0] - wavs[1]).max() <= 3
    r = _speak(cv, "-p", "Hello world.", "--ops", "gpu")
    assert r.returncode == 2 and "--ops" in r.stderr and "invalid choice" in r.stderr


def test_usage_errors(cv: str, gguf_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.wav"
    r = _cli("-m", cv, "-p", "hello", "--speaker", "nobody", "-o", str(out), *SHORT)
    assert r.returncode == 1 and "unknown speaker 'nobody'" in r.stderr and "dylan, ryan, vivian" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
    r = _cli("-m", cv, "-p", "hello", "-o", str(out))  # custom_voice needs a speaker
    assert r.returncode == 1 and "needs a speaker" in r.stderr and not out.exists()
    r = _cli("-m", str(gguf_dir / "tiny_base-f32.gguf"), "-p", "hello", "-o", str(out))
    assert r.returncode == 1 and "qtts-cli: error:" in r.stderr and "Traceback" not in r.stderr
    r = _cli("-m", cv, "--speaker", "ryan", "-o", str(out))  # stdin is empty (not a TTY)
    assert r.returncode == 1 and "no text" in r.stderr
    r = _cli("-m", str(tmp_path / "missing.gguf"), "-p", "hello", "-o", str(out))
    assert r.returncode == 1 and "missing.gguf" in r.stderr and "Traceback" not in r.stderr
    r = _cli("-m", cv, "-p", "hello", "--frame-budget", "lots")
    assert r.returncode == 2 and "frame-budget" in r.stderr
    r = _cli("-m", cv, "-p", "hello", "--raw", "-o", str(out))
    assert r.returncode == 2 and "not allowed with" in r.stderr
