"""Pipelined synthesis (docs/serving.md, "Pipelined streaming"): the vocoder on a second
session in a worker thread gives the serial path's codes and samples bit for bit; the split is
validated, chosen automatically, and a pipelined stream closes, cancels and fails cleanly."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.errors import QttsError
from qtts.runtime.engine.engine import SessionHandle
from qtts.runtime.engine.pipeline import MIN_MEASURED_FRAMES, ThreadSplit

TEXT = "Hello world, this is a tiny test. And a second sentence here."
REF_TEXT = "The quick brown fox jumps."
FRAMES = dict(max_new_tokens=12, min_new_tokens=11, frame_budget=None)  # 11 frames per piece: chunks 1, 2, 4, 4


def _clip(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 24000
    return (0.3 * np.sin(2 * np.pi * (140 + 60 * t) * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


def _pair(path: Path) -> tuple[qtts.Model, qtts.Model]:
    return (qtts.Model(path, n_threads=2, vocoder_threads=0, voice_cache=False),
            qtts.Model(path, n_threads=2, vocoder_threads=1, voice_cache=False))


@pytest.fixture(scope="module", params=["f32", "q8_0"])
def cv(request: pytest.FixtureRequest, gguf_dir: Path) -> tuple[qtts.Model, qtts.Model]:
    return _pair(gguf_dir / f"tiny_custom_voice-{request.param}.gguf")


@pytest.fixture(scope="module")
def base(gguf_dir: Path) -> tuple[qtts.Model, qtts.Model]:
    return _pair(gguf_dir / "tiny_base-f32.gguf")


def _vocoder_threads_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("qtts-vocoder")]


def _same(serial: qtts.Model, piped: qtts.Model, **kw: object) -> None:
    a, b = serial.synthesize(TEXT, **kw), piped.synthesize(TEXT, **kw)
    assert (a.timings.vocoder_threads, b.timings.vocoder_threads) == (0, 1)
    np.testing.assert_array_equal(a.codes, b.codes)
    assert np.array_equal(a.samples, b.samples) and a.stop_reason == b.stop_reason
    sa, sb = list(serial.stream(TEXT, **kw)), list(piped.stream(TEXT, **kw))
    assert [len(c.samples) for c in sa] == [len(c.samples) for c in sb]
    for x, y in zip(sa, sb, strict=True):
        np.testing.assert_array_equal(x.codes, y.codes)
        assert np.array_equal(x.samples, y.samples) and x.stop_reason == y.stop_reason
    assert np.array_equal(np.concatenate([c.samples for c in sb]), b.samples)
    assert not _vocoder_threads_alive()


@pytest.mark.usefixtures("clock_stands_still")
def test_pipelined_equals_serial_custom_voice(cv: tuple[qtts.Model, qtts.Model]) -> None:
    # four pieces with pauses between them, sampled (a seed), generation on 1 or 2 threads per step
    _same(*cv, speaker="ryan", seed=7, split_sentences=20, **FRAMES)


@pytest.mark.usefixtures("clock_stands_still")
def test_pipelined_equals_serial_icl_clone(base: tuple[qtts.Model, qtts.Model]) -> None:
    serial, piped = base
    voice = serial.create_voice((_clip(24000, 1), 24000), REF_TEXT)
    assert voice.ref_codes is not None  # silent reference frames in the stream, cut off in synthesize
    _same(serial, piped, voice=voice, seed=3, split_sentences=True, **FRAMES)
    _same(serial, piped, voice=voice, seed=4, split_sentences=30, **FRAMES)
    seen: list[int] = []
    kw = dict(voice=voice, seed=4, split_sentences=30, **FRAMES)
    with_progress = piped.synthesize(TEXT, progress=lambda p: seen.append(p.frames), **kw)
    assert np.array_equal(with_progress.samples, serial.synthesize(TEXT, **kw).samples)
    assert seen and seen[-1] == len(with_progress.codes)


def test_second_session_memory(cv: tuple[qtts.Model, qtts.Model]) -> None:
    serial, piped = cv
    serial.synthesize("Short.", speaker="ryan", **FRAMES)
    piped.synthesize("Short.", speaker="ryan", **FRAMES)
    assert serial.engine.memory()["vocoder_compute_buffers"] == 0
    assert piped.engine.memory()["vocoder_compute_buffers"] > 0


@pytest.mark.parametrize("value, error", [(2, ValueError), (-1, ValueError), (True, TypeError), ("1", TypeError),
                                          (1.0, TypeError)])
def test_vocoder_threads_validation(value: object, error: type, gguf_dir: Path) -> None:
    with pytest.raises(error, match="vocoder_threads"):
        qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2, vocoder_threads=value)  # type: ignore[arg-type]
    if value != 2:
        with pytest.raises(error, match="vocoder_threads"):
            qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", vocoder_threads=value)  # type: ignore[arg-type]


def test_auto_split_rule() -> None:
    assert ThreadSplit(1, None, cpu=True).vocoder_threads == 0  # nothing to split
    assert ThreadSplit(4, None, cpu=False).vocoder_threads == 0  # the networks run on another device
    s = ThreadSplit(4, None, cpu=True)
    assert s.vocoder_threads is None and s.next() == 0
    s.record(0, MIN_MEASURED_FRAMES - 1, 700.0, 300.0)  # too short to count
    assert s.next() == 0
    f = 10
    s.record(0, f, 60.0 * f, 30.0 * f)  # serial: 90 ms/frame, the vocoder a third of it
    assert s.next() == 1 and s.vocoder_threads is None
    s.record(1, f, 80.0 * f, 85.0 * f)  # pipelined at 1 of 4: 85 ms/frame < 90
    assert s.vocoder_threads == 1 and s.next() == 1
    s = ThreadSplit(2, None, cpu=True)
    s.record(0, f, 77.0 * f, 27.0 * f)
    s.record(1, f, 149.0 * f, 60.0 * f)  # one core each: 149 > 104, serial kept
    assert s.vocoder_threads == 0
    assert ThreadSplit(4, 2, cpu=True).next() == 2


def test_auto_split_on_a_model(gguf_dir: Path) -> None:
    m = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2)
    assert m.vocoder_threads is None
    first = m.synthesize("Short.", speaker="ryan", seed=1, **FRAMES)
    t = qtts.Timings()
    second = np.concatenate([c.samples for c in m.stream("Short.", speaker="ryan", seed=1, timings=t, **FRAMES)])
    assert (first.timings.vocoder_threads, t.vocoder_threads) == (0, 1)  # serial measured, then the candidate
    assert np.array_equal(first.samples, second)
    assert m.vocoder_threads in (0, 1)
    assert "pipeline" in t.format()


@pytest.mark.usefixtures("clock_stands_still")  # the chunks of two streams compared one by one
def test_pipelined_stream_close_and_cancel(cv: tuple[qtts.Model, qtts.Model]) -> None:
    serial, piped = cv
    kw = dict(speaker="ryan", seed=5, split_sentences=20, **FRAMES)
    it = piped.stream(TEXT, **kw)
    first = [next(it), next(it)]
    it.close()
    assert not _vocoder_threads_alive()
    expected = list(serial.stream(TEXT, **kw))
    for x, y in zip(first, expected, strict=False):  # the closed stream's chunks are a prefix
        assert np.array_equal(x.samples, y.samples)
    # cancel() from another thread ends the stream with a "cancelled" chunk
    it = piped.stream(TEXT, speaker="ryan", seed=5, max_new_tokens=2000, min_new_tokens=1999, frame_budget=None)
    next(it)
    piped.cancel()
    chunks = list(it)
    assert chunks[-1].stop_reason == "cancelled"
    assert not _vocoder_threads_alive()
    assert np.array_equal(piped.synthesize(TEXT, **kw).samples, serial.synthesize(TEXT, **kw).samples)


def test_vocoder_thread_failure_reaches_the_consumer(cv: tuple[qtts.Model, qtts.Model],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, piped = cv
    push = SessionHandle.decode_stream_push
    calls = []

    def failing(self: SessionHandle, codes: np.ndarray, stream: int = 0) -> np.ndarray:
        assert threading.current_thread().name.startswith("qtts-vocoder")
        calls.append(len(codes))
        if len(calls) == 2:
            raise QttsError("vocoder failed")
        return push(self, codes, stream)

    monkeypatch.setattr(SessionHandle, "decode_stream_push", failing)
    it = piped.stream(TEXT, speaker="ryan", seed=5, **FRAMES)
    with pytest.raises(QttsError, match="vocoder failed"):
        list(it)
    assert not _vocoder_threads_alive()
    calls.clear()
    with pytest.raises(QttsError, match="vocoder failed"):
        piped.synthesize(TEXT, speaker="ryan", seed=5, **FRAMES)
    monkeypatch.undo()
    assert not _vocoder_threads_alive()
    piped.synthesize("Short.", speaker="ryan", **FRAMES)  # the model is usable afterwards


def test_cli_vocoder_threads(gguf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qtts import cli

    model = str(gguf_dir / "tiny_custom_voice-f32.gguf")
    argv = ["speak", "-m", model, "--speaker", "ryan", "-s", "3", "--max-new-tokens", "10", "-q", "-t", "2",
            "-p", TEXT]
    for v in ("0", "1"):
        assert cli.main([*argv, "--vocoder-threads", v, "-o", str(tmp_path / f"{v}.wav")]) == 0
    assert (tmp_path / "0.wav").read_bytes() == (tmp_path / "1.wav").read_bytes()
    assert cli.main([*argv, "--vocoder-threads", "2", "-o", str(tmp_path / "x.wav")]) == 1
    assert "vocoder_threads must be between 0 (serial) and n_threads - 1 (1)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--vocoder-threads", "x", "-o", str(tmp_path / "x.wav")])
    assert e.value.code == 2 and "--vocoder-threads" in capsys.readouterr().err
