"""Word timestamps of synthesis (runtime/audio/timestamps.py): the load option aligner and the request
option word_timestamps. The words are those the aligner gives for each piece's own audio, offset
to where the piece lies in the request's audio (pauses included), on every path: synthesize,
stream, stream_text, the Scheduler's jobs (iterated, awaited, whole) and synthesize_batch; a
stream's words come after the piece's audio; bad requests are refused before any synthesis."""
from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.runtime.audio.timestamps import NO_ALIGNER

TEXT = "Hello there. This is a test of words."
KW = dict(speaker="ryan", language="english", seed=5, split_sentences=20, max_new_tokens=24)
PIECES = ["Hello there.", "This is a test of", "words."]  # TEXT split at 20 characters


@pytest.fixture(scope="module")
def aligner(aligner_gguf: dict[str, Path]):
    with qtts.load_aligner(aligner_gguf["f32"], n_threads=1) as a:
        yield a


@pytest.fixture(scope="module")
def model(gguf_dir: Path, aligner):
    """A model given a loaded Aligner (which stays the caller's)."""
    with qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1, aligner=aligner) as m:
        yield m
    assert not aligner.engine.closed


def _expected(aligner, chunks: list[qtts.AudioChunk]) -> list[list[qtts.Word]]:
    """Each piece's words as the aligner gives them for the piece's own samples, offset by every
    sample before it: the pieces read off the chunks (a pause holds no codes)."""
    out, parts, before, start = [], [], 0, None
    for c in chunks:
        if c.words is not None:
            continue
        if len(c.codes) or c.piece_text is not None:
            start = before if start is None else start
            parts.append(c.samples)
        if c.piece_text is not None:
            at = start / c.sample_rate
            words = aligner.align((np.concatenate(parts), c.sample_rate), c.piece_text, "english")
            out.append([qtts.Word(w.text, round(w.start + at, 3), round(w.end + at, 3)) for w in words])
            parts, start = [], None
        before += len(c.samples)
    return out


def _check_stream(aligner, chunks: list[qtts.AudioChunk]) -> list[qtts.Word]:
    """The words chunks follow the chunk that ends each piece, hold no audio, and equal the
    aligner's words; the last chunk, a words chunk, carries the stop reason; indices run on."""
    assert [c.index for c in chunks] == list(range(len(chunks)))
    ends = [i for i, c in enumerate(chunks) if c.piece_text is not None]
    assert [c.piece_text for c in chunks if c.piece_text is not None] == PIECES
    assert [i for i, c in enumerate(chunks) if c.words is not None] == [i + 1 for i in ends]
    assert all(not len(chunks[i + 1].samples) for i in ends)
    assert chunks[-1].words is not None and chunks[-1].stop_reason is not None
    assert [c.stop_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    got = [c.words for c in chunks if c.words is not None]
    assert got == _expected(aligner, chunks)
    assert all(got), "every piece has words"
    return [w for words in got for w in words]


def test_synthesize_gives_the_aligners_words(model, aligner) -> None:
    one = {**KW, "split_sentences": False}
    audio = model.synthesize(TEXT, word_timestamps=True, **one)
    assert audio.words == aligner.align(audio, TEXT, "english")
    assert len(audio.words) == 8 and audio.timings.align_ms > 0
    plain = model.synthesize(TEXT, **one)
    assert plain.words is None and plain.timings.align_ms == 0
    np.testing.assert_array_equal(plain.samples, audio.samples)  # the audio does not change


def test_pieces_are_offset_on_every_path(model, aligner) -> None:
    chunks = list(model.stream(TEXT, word_timestamps=True, **KW))
    words = _check_stream(aligner, chunks)
    audio = model.synthesize(TEXT, word_timestamps=True, **KW)
    np.testing.assert_array_equal(audio.samples, np.concatenate([c.samples for c in chunks]))
    assert audio.words == words
    assert words[2].start != chunks[-1].words[0].start  # a later piece's words are offset
    text_chunks = list(model.stream_text(iter(TEXT), word_timestamps=True, **KW))
    assert _check_stream(aligner, text_chunks) == words
    plain = list(model.stream(TEXT, **KW))
    assert [c.words for c in plain] == [None] * len(plain)


def test_scheduler_jobs_give_the_same_words(model, aligner) -> None:
    want = model.synthesize(TEXT, word_timestamps=True, **KW).words
    with qtts.Scheduler(model, max_batch=2) as sched:
        job = sched.submit(TEXT, word_timestamps=True, **KW)
        assert _check_stream(aligner, list(job)) == want
        assert job.result().words == want

        async def read() -> list[qtts.AudioChunk]:
            return [c async for c in sched.submit(TEXT, word_timestamps=True, **KW)]

        assert _check_stream(aligner, asyncio.run(read())) == want
        job = sched.submit_text(iter(TEXT), word_timestamps=True, **KW)
        assert job.result(timeout=600).words == want  # aligned by result(), nobody read the chunks
    batch = model.synthesize_batch([TEXT, "Hello there."], word_timestamps=[True, False], **KW)
    assert batch[0].words == want and batch[1].words is None


def test_requests_are_checked_before_synthesis(gguf_dir: Path, model) -> None:
    with qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1) as plain:
        assert plain.aligner is None
        with pytest.raises(ValueError, match="word_timestamps needs a forced aligner: load the model with aligner="):
            plain.synthesize(TEXT, word_timestamps=True, **KW)
        with pytest.raises(ValueError, match=NO_ALIGNER[:40]):
            plain.stream(TEXT, word_timestamps=True, **KW)
    with pytest.raises(ValueError, match="Japanese need its own word splitter.*nagisa"):
        model.stream(TEXT, word_timestamps=True, **{**KW, "language": "japanese"})
    with pytest.raises(TypeError, match="word_timestamps must be True or False"):
        model.synthesize(TEXT, word_timestamps="yes", **KW)


def test_the_load_option_aligner(gguf_dir: Path, aligner_gguf: dict[str, Path], tmp_path: Path) -> None:
    tts = gguf_dir / "tiny_custom_voice-f32.gguf"
    with pytest.raises(TypeError, match="aligner must be a path, a repo id or a qtts.Aligner, got int"):
        qtts.load(tts, aligner=3)
    with pytest.raises(FileNotFoundError, match="no such model file"):
        qtts.load(tts, aligner=tmp_path / "missing.gguf")
    with pytest.raises(ValueError, match="is not a forced aligner"):
        qtts.load(tts, n_threads=1, aligner=tts)
    m = qtts.load(tts, n_threads=1, ops="portable", aligner=aligner_gguf["q8_0"])
    assert m.aligner.engine.ops == "portable"  # loaded with the model's options
    a = m.aligner
    m.close()
    assert a.engine.closed  # loaded with the model, closed with it
