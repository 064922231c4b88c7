"""qtts-cli align and qtts-cli convert/info on the aligner, run as a user would."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

import qtts
from qtts.runtime.aligner.subtitles import to_srt, to_vtt
from tests.fixtures.aligner_reference import clip

TEXT = "Hello, world! This is a tiny test."


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qtts.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("align") / "clip.wav"
    sf.write(path, clip(3.0, 21, rate=24000), 24000)
    return path


def test_convert_then_info(reference_aligner_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "aligner.gguf"
    r = _cli("convert", str(reference_aligner_dir), "-o", str(out), "--type", "q8_0")
    assert r.returncode == 0, r.stderr
    r = _cli("info", str(out))
    assert r.returncode == 0, r.stderr
    assert "qwen3-forced-aligner forced_aligner" in r.stdout and "timestamp_classes=5000" in r.stdout


def test_align_prints_writes_and_compares(aligner_gguf: dict[str, Path], reference_aligner_dir: Path, wav: Path,
                                          tmp_path: Path) -> None:
    model = str(aligner_gguf["f32"])
    with qtts.load_aligner(model, n_threads=1) as a:
        want = a.align(wav, TEXT, "english")
    r = _cli("align", str(wav), TEXT, "-m", model, "-l", "english", "-t", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["words"] == [{"word": w.text, "start": w.start, "end": w.end} for w in want]
    assert "7 words in" in r.stderr and "encoder" in r.stderr
    r = _cli("align", str(wav), TEXT, "-m", model, "-q")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 7 and lines[0].split() == [f"{want[0].start:.3f}",
                                                                        f"{want[0].end:.3f}", "Hello"]
    srt = tmp_path / "words.srt"
    r = _cli("align", str(wav), TEXT, "-m", model, "-o", str(srt), "-q")
    assert r.returncode == 0 and srt.read_text(encoding="utf-8") == to_srt(want)
    # the check a user runs on their own recording: the official aligner on the same input
    r = _cli("align", str(wav), TEXT, "-m", model, "-l", "english", "--compare-reference", str(reference_aligner_dir))
    assert r.returncode == 0, r.stderr
    assert "reference (qwen-asr): 7 words, 7 with the same span, largest difference 0.000 s" in r.stdout


def test_words_file(aligner_gguf: dict[str, Path], wav: Path, tmp_path: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_text("こんにちは\n\n世界\n", encoding="utf-8")
    r = _cli("align", str(wav), "--words-file", str(words), "-m", str(aligner_gguf["f32"]), "-l", "japanese", "-q")
    assert r.returncode == 0, r.stderr
    assert [line.split()[-1] for line in r.stdout.splitlines()] == ["こんにちは", "世界"]


def test_errors(aligner_gguf: dict[str, Path], wav: Path, tmp_path: Path) -> None:
    model = str(aligner_gguf["f32"])
    cases = [
        (("align", str(tmp_path / "no.wav"), "hi", "-m", model), 1, "AUDIO"),
        (("align", str(wav), "-m", model), 1, "give the TEXT"),
        (("align", str(wav), "hi", "-m", model, "-o", str(tmp_path / "w.txt")), 1, ".srt, .vtt or .json"),
        (("align", str(wav), "こんにちは", "-m", model, "-l", "japanese"), 1, "pass the words as a list"),
        (("align", str(wav), "hi", "-m", model, "-l", "klingon"), 1, "language 'klingon'"),
        (("align", str(wav), "hi", "-m", model, "--ops", "fast"), 2, "invalid choice"),
    ]
    for args, code, fragment in cases:
        r = _cli(*args)
        assert r.returncode == code and fragment in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_speak_writes_timestamps(aligner_gguf: dict[str, Path], gguf_dir: Path, tmp_path: Path) -> None:
    model = gguf_dir / "tiny_custom_voice-f32.gguf"
    words_file = tmp_path / "words.json"
    r = _cli("speak", "-m", str(model), "--speaker", "ryan", "-p", "Hello world, again.", "-o",
             str(tmp_path / "out.wav"), "-s", "1", "--max-new-tokens", "30", "-t", "1", "--timestamps",
             str(words_file), "--aligner", str(aligner_gguf["f32"]), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outputs"][0]["timestamps"] == str(words_file)
    with qtts.load(model, n_threads=1) as m, qtts.load_aligner(aligner_gguf["f32"], n_threads=1) as a:
        audio = m.synthesize("Hello world, again.", speaker="ryan", seed=1, max_new_tokens=30)
        want = a.align(audio, "Hello world, again.")
    got = json.loads(words_file.read_text(encoding="utf-8"))["words"]
    assert got == [{"word": w.text, "start": w.start, "end": w.end} for w in want]
    assert [w["word"] for w in got] == ["Hello", "world", "again"]
    for extra, fragment in ((("--output-dir", str(tmp_path / "d")), "drop --output-dir"),
                            (("-o", str(tmp_path / "o.wav"), "--timestamps", str(tmp_path / "w.txt")),
                             ".srt, .vtt or .json")):
        args = ["speak", "-m", str(model), "--speaker", "ryan", "-p", "Hi.", "--timestamps", str(words_file), *extra]
        if extra[0] == "-o":
            args = ["speak", "-m", str(model), "--speaker", "ryan", "-p", "Hi.", *extra]
        r = _cli(*args)
        assert r.returncode == 1 and fragment in r.stderr, r.stderr


def test_speak_streams_timestamps(aligner_gguf: dict[str, Path], gguf_dir: Path, tmp_path: Path) -> None:
    """--raw streams the audio and writes the words once the stream ends: those of Model.stream."""
    model = gguf_dir / "tiny_custom_voice-f32.gguf"
    words_file = tmp_path / "words.vtt"
    r = subprocess.run([sys.executable, "-m", "qtts.cli", "speak", "-m", str(model), "--speaker", "ryan", "-p",
                        "Hello world, again.", "--raw", "-s", "2", "--max-new-tokens", "20", "-t", "1", "-q",
                        "--timestamps", str(words_file), "--aligner", str(aligner_gguf["f32"])],
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    with qtts.load(model, n_threads=1, aligner=aligner_gguf["f32"]) as m:
        chunks = list(m.stream("Hello world, again.", speaker="ryan", seed=2, max_new_tokens=20, word_timestamps=True))
    assert r.stdout == b"".join(qtts.pcm16(c.samples) for c in chunks)
    assert words_file.read_text(encoding="utf-8") == to_vtt([w for c in chunks for w in c.words or []])
    r = _cli("speak", "-m", str(model), "--speaker", "ryan", "-p", "Hi.", "-o", str(tmp_path / "o.wav"),
             "--aligner", str(aligner_gguf["f32"]))
    assert r.returncode == 1 and "--aligner times the words of --timestamps FILE" in r.stderr, r.stderr
