"""Progress on a terminal, silence when piped or with -q; the eager path's progress callback;
help text for every option; argument errors as usage errors (exit 2) naming the flag."""
from __future__ import annotations

import argparse
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.cli import build_parser

GREEDY = ("--greedy", "--max-new-tokens", "12", "-t", "1")


def _cli(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qtts.cli", *args], input=input, capture_output=True,
                          timeout=300, stdin=None if input is not None else subprocess.DEVNULL)


def _cli_tty_stderr(*args: str) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal (stdout piped): (exit status, what the terminal showed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a real terminal's size
    proc = subprocess.Popen([sys.executable, "-m", "qtts.cli", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=300), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> str:
    return str(gguf_dir / "tiny_custom_voice-f32.gguf")


def test_progress_on_a_terminal_only(cv: str, tmp_path: Path) -> None:
    speak = ("-m", cv, "--speaker", "ryan", "-p", "Hello there.", "-o", str(tmp_path / "a.wav"), *GREEDY)
    rc, shown = _cli_tty_stderr(*speak)
    assert rc == 0, shown
    assert "generating" in shown and "frame" in shown and "s audio" in shown and "real time" in shown
    assert "stop: max_new_tokens" in shown
    rc, shown = _cli_tty_stderr(*speak, "-q")
    assert rc == 0 and shown == "", shown
    r = _cli(*speak)
    assert r.returncode == 0 and b"generating" not in r.stderr and r.stderr == b"", r.stderr


def test_progress_callback_keeps_the_codes(cv: str) -> None:
    m = qtts.load(cv, n_threads=1)
    text = "First sentence here. And a second one."
    kw = dict(speaker="ryan", seed=5, max_new_tokens=11, split_sentences=20)
    plain = m.synthesize(text, **kw)
    seen: list[qtts.runtime.synthesis.speech.Progress] = []
    stepped = m.synthesize(text, progress=seen.append, **kw)
    np.testing.assert_array_equal(stepped.codes, plain.codes)
    np.testing.assert_array_equal(stepped.samples, plain.samples)
    assert stepped.stop_reason == plain.stop_reason and stepped.timings.frames == plain.timings.frames
    frames = [p.frames for p in seen]
    assert frames == sorted(frames) and frames[-1] == len(plain.codes) and len(seen) > 2
    assert {p.pieces for p in seen} == {2} and {p.piece for p in seen} == {0, 1}
    assert all(p.frame_limit == 20 for p in seen)  # two pieces, each at most max_new_tokens - 1 frames
    assert seen[-1].audio_seconds == pytest.approx(len(plain.codes) / 12.5)


def _walk(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield f"{path} {choice.dest}", choice.help
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")
        else:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}", action.help


def test_every_option_has_help() -> None:
    found = dict(_walk(build_parser(), "qtts-cli"))
    assert "qtts-cli speak --temperature" in found and "qtts-cli bench speed --frames" in found
    missing = [name for name, text in found.items() if not text or text == argparse.SUPPRESS]
    assert missing == []


@pytest.mark.parametrize(("args", "flag"), [
    (("--max-new-tokens", "3000000000"), "--max-new-tokens"),
    (("--max-new-tokens", "1"), "--max-new-tokens"),
    (("--top-k", "3000000000"), "--top-k"),
    (("--top-k", "1.5"), "--top-k"),
    (("--temperature", "inf"), "--temperature"),
    (("--temperature", "nan"), "--temperature"),
    (("--top-p", "0"), "--top-p"),
    (("--repetition-penalty", "-1"), "--repetition-penalty"),
    (("-s", "18446744073709551616"), "-s/--seed"),
    (("-t", "0"), "-t/--threads"),
    (("--frame-budget", "3000000000"), "--frame-budget"),
    (("-p", "caf\udce9"), "-p/--prompt"),  # invalid UTF-8 in argv, as Python hands it over
    (("--speaker", "ry\udcffan"), "--speaker"),
])
def test_bad_arguments_are_usage_errors(tmp_path: Path, args: tuple[str, ...], flag: str) -> None:
    # no model exists: the flag is refused before anything loads
    base = ["-m", str(tmp_path / "none.gguf"), "--speaker", "ryan", "-p", "hi", "-o", str(tmp_path / "o.wav")]
    r = _cli(*base, *args)
    err = r.stderr.decode()
    assert r.returncode == 2 and f"argument {flag}" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("qtts-cli speak: error:"), err  # one line


def test_invalid_utf8_text_from_stdin_and_file(cv: str, tmp_path: Path) -> None:
    out = tmp_path / "o.wav"
    r = _cli("-m", cv, "--speaker", "ryan", "-o", str(out), input=b"caf\xe9 au lait")
    assert r.returncode == 2
    assert r.stderr.decode() == "qtts-cli: error: stdin: not valid UTF-8 (byte 0xe9 at offset 3)\n"
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\xfe")
    r = _cli("-m", cv, "--speaker", "ryan", "-f", str(bad), "-o", str(out))
    assert r.returncode == 2 and f"-f {bad}: not valid UTF-8 (byte 0xff at offset 3)" in r.stderr.decode()
    assert not out.exists()


def test_speakers_of_a_model_without_any(gguf_dir: Path) -> None:
    r = _cli("speakers", str(gguf_dir / "tiny_voice_design-f32.gguf"))
    assert r.returncode == 0 and r.stdout == b""
    assert b"a voice_design model has no speakers; describe the voice with --instruct" in r.stderr


def test_convert_prints_a_summary_not_every_tensor(fixture_root: Path, tmp_path: Path) -> None:
    src = str(fixture_root / "tiny_voice_design")
    r = _cli("convert", src, "-o", str(tmp_path / "a.gguf"))
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 0 and len(lines) == 1 and lines[0].startswith(f"wrote {tmp_path / 'a.gguf'}"), lines
    r = _cli("convert", src, "-o", str(tmp_path / "b.gguf"), "-v")
    assert r.returncode == 0 and r.stderr.decode().count("[1/") == 1 and len(r.stderr.decode().splitlines()) > 50
    rc, shown = _cli_tty_stderr("convert", src, "-o", str(tmp_path / "c.gguf"))
    assert rc == 0 and "tensor" in shown and "[1/" not in shown and "wrote" in shown, shown


def test_voice_create_shows_the_encoders_on_a_terminal(gguf_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import soundfile as sf  # a runtime dependency: never skipped
    monkeypatch.setenv("QTTS_CACHE", str(tmp_path / "cache"))
    clip = tmp_path / "ref.wav"
    sf.write(str(clip), (0.3 * np.sin(np.arange(24000) * 0.04)).astype(np.float32), 24000)
    create = ("voice", "create", "-m", str(gguf_dir / "tiny_base-f32.gguf"), "--ref-audio", str(clip),
              "--x-vector-only", "-t", "1")
    rc, shown = _cli_tty_stderr(*create, "-o", str(tmp_path / "a.qvoice"))
    assert rc == 0 and "encoding the reference clip (speaker embedding, codec)" in shown and "wrote" in shown, shown
    rc, shown = _cli_tty_stderr(*create, "-o", str(tmp_path / "b.qvoice"), "-q")
    assert rc == 0 and shown == "", shown
    r = _cli(*create, "-o", str(tmp_path / "c.qvoice"))
    assert r.returncode == 0 and b"encoding" not in r.stderr, r.stderr


def test_raw_stream_progress_on_a_terminal_only(cv: str) -> None:
    speak = ("-m", cv, "--speaker", "ryan", "-p", "Hello there.", "--raw", *GREEDY)
    rc, shown = _cli_tty_stderr(*speak)
    assert rc == 0 and "generating" in shown and "s audio" in shown and "raw s16le PCM" in shown, shown
    rc, shown = _cli_tty_stderr(*speak, "-q")
    assert rc == 0 and shown == "", shown
