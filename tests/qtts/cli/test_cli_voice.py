"""qtts-cli voice cloning: `voice create`, and `speak` with --voice / --ref-audio (tiny Base model).

Most runs call `main()` in-process (a model load is the only cost); one goes through a real
`python -m qtts.cli` to cover the entry point.
"""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf  # a runtime dependency: imported, never skipped

import qtts
from qtts.cli import main
from qtts.runtime.audio.audio import pcm16, save_audio
from qtts.runtime.audio.voice import Voice
from qtts.runtime.synthesis import cloning

TEXT = "Hello there, cloned voice."
REF_TEXT = "The quick brown fox jumps."
SHORT = ("--greedy", "--max-new-tokens", "5", "-t", "2")
SAMPLES_PER_FRAME = 1920  # 24 kHz / 12.5 Hz


def _run(*argv: str) -> tuple[int, bytes, str]:
    """main(argv) in-process: (exit status, stdout bytes, stderr text); usage errors exit 2."""
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = int(e.code or 0)
        out.flush()
    return rc, out.buffer.getvalue(), err.getvalue()


def _ok(rc: int, err: str) -> None:
    assert rc == 0, err
    assert "Traceback" not in err


@pytest.fixture(scope="module", autouse=True)
def voice_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep the voice cache out of ~/.cache; the module's runs share it (one test relies on that)."""
    root = tmp_path_factory.mktemp("qtts-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QTTS_CACHE", str(root))
        yield root


@pytest.fixture(scope="module")
def base(gguf_dir: Path) -> str:
    return str(gguf_dir / "tiny_base-f32.gguf")


@pytest.fixture(scope="module")
def model(base: str) -> qtts.Model:
    return qtts.Model(base, n_threads=2, voice_cache=False)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> str:
    """1 s of a sine with noise, as a 16-bit WAV file."""
    rng = np.random.default_rng(1)
    t = np.arange(24000) / 24000
    wav = 0.3 * np.sin(2 * np.pi * 150 * t) + 0.05 * rng.standard_normal(len(t))
    path = tmp_path_factory.mktemp("ref") / "ref.wav"
    sf.write(str(path), wav.astype(np.float32), 24000, subtype="PCM_16")
    return str(path)


@pytest.fixture(scope="module")
def created(base: str, clip: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """An ICL voice made by a real `python -m qtts.cli` (with --json) and an x-vector-only voice
    made in-process (with -q): {mode: (path, exit status, stdout, stderr)}."""
    d = tmp_path_factory.mktemp("voices")
    icl, xvec = d / "icl.qvoice", d / "xvec.qvoice"
    r = subprocess.run([sys.executable, "-m", "qtts.cli", "voice", "create", "-m", base, "--ref-audio", clip,
                        "--ref-text", REF_TEXT, "-o", str(icl), "-t", "2", "--json"],
                       capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    x = _run("voice", "create", "-m", base, "--ref-audio", clip, "--x-vector-only", "-o", str(xvec), "-t", "2", "-q")
    return {"icl": (icl, r.returncode, r.stdout, r.stderr.decode()), "xvec": (xvec, *x)}


@pytest.fixture
def count_clones(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts reference encodings (create_voice runs, cache hits included), CLI and library alike."""
    calls: list[int] = []
    real = cloning.create_voice

    def counting(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(cloning, "create_voice", counting)
    return calls


def test_voice_create_icl_and_x_vector_only(created: dict[str, tuple], model: qtts.Model, clip: str) -> None:
    path, rc, out, err = created["icl"]
    _ok(rc, err)
    report = json.loads(out)
    assert report["output"] == str(path) and report["mode"] == "icl" and report["ref_text"] == REF_TEXT
    assert report["frames"] == 13 and report["reference_seconds"] == pytest.approx(1.0)  # ceil(24000 / 1920)
    assert report["voice_cache"] == "miss" and report["speaker_encode_ms"] > 0 and report["codec_encode_ms"] > 0
    assert report["model_fingerprint"] == model.fingerprint
    assert f"wrote {path}: in-context (ICL) voice from 1.00 s of reference audio, 13 reference frames" in err
    want = model.create_voice(clip, REF_TEXT)
    icl = Voice.load(path)
    np.testing.assert_array_equal(icl.ref_codes, want.ref_codes)
    np.testing.assert_array_equal(icl.x_vector, want.x_vector)
    assert icl.ref_text == REF_TEXT and icl.model_fingerprint == model.fingerprint

    path, rc, out, err = created["xvec"]
    _ok(rc, err)
    assert out == b"" and err == ""  # -q, no --json
    xvec = Voice.load(path)
    assert xvec.x_vector_only_mode and xvec.ref_text is None
    np.testing.assert_array_equal(xvec.x_vector, want.x_vector)


def test_speak_voice_file_equals_ref_audio_and_library(created: dict[str, tuple], base: str, clip: str,
                                                        model: qtts.Model, tmp_path: Path) -> None:
    icl = str(created["icl"][0])
    a, b, c = tmp_path / "file.wav", tmp_path / "ref.wav", tmp_path / "api.wav"
    rc, _, err = _run("-m", base, "--voice", icl, "-p", TEXT, "-o", str(a), *SHORT)  # the default command
    _ok(rc, err)
    rc, out, err = _run("speak", "-m", base, "--ref-audio", clip, "--ref-text", REF_TEXT, "-p", TEXT,
                        "-o", str(b), "--json", *SHORT)
    _ok(rc, err)
    assert a.read_bytes() == b.read_bytes()
    report = json.loads(out)
    # `voice create` encoded this clip in the same cache: speak finds it there
    assert report["voice"] == dict(ref_audio=clip, mode="icl", ref_text=REF_TEXT, voice_cache="hit",
                                   speaker_encode_ms=0.0, codec_encode_ms=0.0)
    (o,) = report["outputs"]
    assert o["timings"]["voice_cache"] == "hit" and o["stop_reason"] == "max_new_tokens" and o["frames"] == 4
    audio = model.synthesize(TEXT, voice=Voice.load(icl), do_sample=False, subtalker_dosample=False,
                             max_new_tokens=5)
    save_audio(c, audio.samples, audio.sample_rate)
    assert a.read_bytes() == c.read_bytes()


def test_json_and_timings_report_a_voice_cache_miss(base: str, clip: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QTTS_CACHE", str(tmp_path / "fresh"))
    rc, out, err = _run("-m", base, "--ref-audio", clip, "--x-vector-only", "-p", TEXT, "-o",
                        str(tmp_path / "x.wav"), "--json", "--timings", *SHORT)
    _ok(rc, err)
    report = json.loads(out)
    assert report["voice"]["mode"] == "x_vector_only" and report["voice"]["ref_text"] is None
    assert report["voice"]["voice_cache"] == "miss" and report["voice"]["speaker_encode_ms"] > 0
    assert report["outputs"][0]["timings"]["voice_cache"] == "miss"
    assert "voice cache    miss" in err and "speaker encode" in err  # the --timings table
    assert len(list((tmp_path / "fresh" / "voices").glob("*.qvoice"))) == 1


def test_output_dir_encodes_the_reference_once(created: dict[str, tuple], base: str, clip: str, tmp_path: Path,
                                               count_clones: list[int]) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("First line.\nSecond line.\n", encoding="utf-8")
    rc, out, err = _run("-m", base, "-f", str(lines), "--ref-audio", clip, "--x-vector-only",
                        "--output-dir", str(tmp_path / "ref"), "--json", *SHORT)
    _ok(rc, err)
    assert len(count_clones) == 1
    outputs = json.loads(out)["outputs"]
    assert [o["text"] for o in outputs] == ["First line.", "Second line."]
    # the encoding happened once, before the first line: only its timings carry it
    assert outputs[0]["timings"]["voice_cache"] in ("hit", "miss") and outputs[1]["timings"]["voice_cache"] is None
    rc, _, err = _run("-m", base, "-f", str(lines), "--voice", str(created["xvec"][0]),
                      "--output-dir", str(tmp_path / "file"), *SHORT)
    _ok(rc, err)
    assert len(count_clones) == 1  # a voice file encodes nothing
    for name in ("001.wav", "002.wav"):
        data = (tmp_path / "file" / name).read_bytes()
        assert data == (tmp_path / "ref" / name).read_bytes()
        assert sf.info(io.BytesIO(data)).frames == 4 * SAMPLES_PER_FRAME


def test_raw_stream_with_ref_audio(base: str, clip: str, model: qtts.Model, count_clones: list[int]) -> None:
    rc, out, err = _run("-m", base, "--ref-audio", clip, "--x-vector-only", "-p", TEXT, "--raw", "-q", *SHORT)
    _ok(rc, err)
    assert len(count_clones) == 1
    want = model.synthesize(TEXT, voice=model.create_voice(clip, x_vector_only_mode=True), do_sample=False,
                            subtalker_dosample=False, max_new_tokens=5)
    pcm, ref = np.frombuffer(out, "<i2"), np.frombuffer(pcm16(want.samples), "<i2")
    assert len(pcm) == len(ref) == 4 * SAMPLES_PER_FRAME
    # the streaming decoder matches the eager one to within a few PCM steps (as in test_cli_speak)
    np.testing.assert_allclose(pcm.astype(np.int32), ref.astype(np.int32), atol=8)


_PRE_LOAD = [  # (argv after the model and text / output, exit status, message)
    (["--voice", "{tmp}/v.qvoice", "--ref-audio", "{clip}"], 2,
     "argument --ref-audio: not allowed with argument --voice"),
    (["--ref-audio", "{clip}", "--ref-text", "hi", "--x-vector-only"], 2,
     "argument --x-vector-only: not allowed with argument --ref-text"),
    (["--ref-text", "hi"], 1, "--ref-text goes with --ref-audio"),
    (["--x-vector-only"], 1, "--x-vector-only goes with --ref-audio"),
    (["--voice", "{tmp}/v.qvoice", "--ref-text", "hi"], 1, "--ref-text goes with --ref-audio (a --voice file"),
    (["--ref-audio", "{clip}"], 1, "give --ref-text TEXT, or use --x-vector-only"),
    (["--ref-audio", "{clip}", "--ref-text", "  "], 1, "give --ref-text TEXT, or use --x-vector-only"),
    (["--ref-audio", "{tmp}/missing.wav", "--x-vector-only"], 1, "--ref-audio {tmp}/missing.wav: no such file"),
    (["--ref-audio", "{tmp}", "--x-vector-only"], 1, "--ref-audio {tmp}: is a directory"),
    (["--voice", "{tmp}/missing.qvoice"], 1, "{tmp}/missing.qvoice: no such voice file"),
    (["--voice", "{tmp}/junk.qvoice"], 1, "{tmp}/junk.qvoice: not a qtts voice file"),
]

_CREATE_PRE_LOAD = [  # voice create
    (["--ref-audio", "{clip}", "--x-vector-only", "-o", "{tmp}/v.qvoice"], 2, "required: -m/--model"),
    (["-m", "{model}", "--ref-audio", "{clip}", "--x-vector-only"], 2, "required: -o/--output"),
    (["-m", "{model}", "--x-vector-only", "-o", "{tmp}/v.qvoice"], 2, "required: --ref-audio"),
    (["-m", "{model}", "--ref-audio", "{clip}", "-o", "{tmp}/v.qvoice"], 1,
     "give --ref-text TEXT, or use --x-vector-only"),
    (["-m", "{model}", "--ref-audio", "{clip}", "--ref-text", "hi", "--x-vector-only", "-o", "{tmp}/v.qvoice"], 2,
     "not allowed with argument --ref-text"),
    (["-m", "{model}", "--ref-audio", "{tmp}/missing.wav", "--x-vector-only", "-o", "{tmp}/v.qvoice"], 1,
     "--ref-audio {tmp}/missing.wav: no such file"),
    (["-m", "{model}", "--ref-audio", "{clip}", "--x-vector-only", "-o", "{tmp}/no/dir/v.qvoice"], 1,
     "output directory '{tmp}/no/dir' does not exist"),
    (["-m", "{model}", "--ref-audio", "{clip}", "--x-vector-only", "-o", "{tmp}"], 1, "{tmp} is a directory"),
]


@pytest.mark.parametrize("command", ["speak", "create"])
def test_usage_errors_come_before_the_model_loads(command: str, clip: str, tmp_path: Path) -> None:
    # the model does not exist: every case must fail on its own rule, before the load would
    model = str(tmp_path / "no-model.gguf")
    (tmp_path / "junk.qvoice").write_bytes(b"not a voice")
    cases = _PRE_LOAD if command == "speak" else _CREATE_PRE_LOAD
    for argv, status, message in cases:
        argv = [a.format(clip=clip, tmp=tmp_path, model=model) for a in argv]
        if command == "speak":
            argv = ["-m", model, "-p", "hello", "-o", str(tmp_path / "out.wav"), *argv]
        else:
            argv = ["voice", "create", *argv]
        rc, out, err = _run(*argv)
        message = message.format(tmp=tmp_path)
        assert rc == status and message in err and "Traceback" not in err, (argv, err)
        if status == 1:
            assert err.startswith("qtts-cli: error:")
        assert "no-model" not in err and out == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.qvoice"]  # nothing written


def test_errors_after_the_model_loads(created: dict[str, tuple], base: str, gguf_dir: Path, clip: str,
                                      model: qtts.Model, tmp_path: Path) -> None:
    out = str(tmp_path / "out.wav")
    rc, _, err = _run("-m", base, "-p", "hello", "-o", out, *SHORT)  # a base model without a voice
    assert rc == 1 and err.startswith("qtts-cli: error: a base model clones a voice")
    assert "--ref-audio WAV with --ref-text TEXT (or --x-vector-only), or --voice FILE" in err
    cv = str(gguf_dir / "tiny_custom_voice-f32.gguf")
    rc, _, err = _run("-m", cv, "-p", "hello", "-o", out, "--voice", str(created["xvec"][0]))
    assert rc == 1 and "voice cloning needs a base model; this one is 'custom_voice'" in err
    rc, _, err = _run("voice", "create", "-m", cv, "--ref-audio", clip, "--x-vector-only",
                      "-o", str(tmp_path / "v.qvoice"))
    assert rc == 1 and "needs a base model" in err
    forged = Voice(model.create_voice(clip, x_vector_only_mode=True).x_vector, None, None, "0" * 64)
    rc, _, err = _run("-m", base, "-p", "hello", "-o", out, "--voice", str(forged.save(tmp_path / "f.qvoice")))
    assert rc == 1 and "different model" in err
    (tmp_path / "notaudio.wav").write_text("not audio")
    rc, _, err = _run("voice", "create", "-m", base, "--ref-audio", str(tmp_path / "notaudio.wav"),
                      "--x-vector-only", "-o", str(tmp_path / "v.qvoice"))
    assert rc == 1 and "cannot be read as audio" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.qvoice", "notaudio.wav"]
