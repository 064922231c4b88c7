"""Text streamed in (docs/model.md, "Text streamed in"): however the text is cut into fragments and
whenever they come, stream_text gives the samples of stream(full text, non_streaming_mode=False)
with the same settings and seed; the incremental splitting and tokenizing never take back what
they settled."""
from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.runtime.synthesis.text_stream import final_text_ids, known_pieces
from qtts.runtime.text.text import text_pieces
from tests.fixtures.unicode import INVALID, VALID

TEXT = "Hello world, this is a streaming test. It's got two sentences: don't stop!"
LONG = ("The first sentence is here. A second, longer sentence follows it, with clauses; "
        "then 第二句话。And the end comes at last!")
GREEDY = dict(do_sample=False, subtalker_dosample=False)
REF_TEXT = "The quick brown fox jumps."


def _clip(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 24000
    return (0.3 * np.sin(2 * np.pi * (140 + 60 * t) * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


@pytest.fixture(scope="module")
def models(gguf_dir: Path) -> dict[str, qtts.Model]:
    return {name: qtts.Model(gguf_dir / f"tiny_{name}-f32.gguf", n_threads=2, voice_cache=False)
            for name in ("custom_voice", "voice_design", "base")}


def _cuts(text: str, how: str, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    if how == "chars":
        return list(text)
    if how == "words":  # as an LLM's deltas: each word with the space before it
        words = text.split(" ")
        return [words[0]] + [" " + w for w in words[1:]]
    if how == "random":
        cuts = sorted(rng.sample(range(1, len(text)), 12))
        return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    return [text]


def _delayed(parts: list[str], seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    for p in parts:
        if rng.random() < 0.3:
            time.sleep(rng.random() * 0.01)
        yield p


def _samples(chunks: list[qtts.AudioChunk]) -> np.ndarray:
    return np.concatenate([c.samples for c in chunks])


def _check_equal(model: qtts.Model, text: str, how: str, cut_seed: int, **kwargs: object) -> list[qtts.AudioChunk]:
    want = list(model.stream(text, non_streaming_mode=False, **kwargs))
    got = list(model.stream_text(_delayed(_cuts(text, how, cut_seed), cut_seed), **kwargs))
    np.testing.assert_array_equal(np.concatenate([c.codes for c in got]), np.concatenate([c.codes for c in want]))
    np.testing.assert_array_equal(_samples(got), _samples(want))
    assert got[-1].stop_reason == want[-1].stop_reason
    assert all(c.stop_reason is None for c in got[:-1])
    return got


@pytest.mark.parametrize("how", ["chars", "words", "random", "one"])
@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_custom_voice_equals_stream(models: dict[str, qtts.Model], how: str, sampling: str) -> None:
    settings = GREEDY if sampling == "greedy" else {}
    _check_equal(models["custom_voice"], TEXT, how, 3, speaker="ryan", seed=7, max_new_tokens=30, **settings)


@pytest.mark.parametrize("split", [False, 40, True])
@pytest.mark.parametrize("how", ["chars", "words", "random"])
def test_split_text_equals_stream(models: dict[str, qtts.Model], split: object, how: str) -> None:
    got = _check_equal(models["custom_voice"], LONG, how, 5, speaker="vivian", seed=2, max_new_tokens=12,
                       split_sentences=split)
    pieces = len(text_pieces(LONG, split))  # type: ignore[arg-type]
    assert sum(1 for c in got if not len(c.codes) and len(c.samples)) == pieces - 1  # the pauses


@pytest.mark.parametrize("how", ["chars", "random"])
def test_voice_design_equals_stream(models: dict[str, qtts.Model], how: str) -> None:
    _check_equal(models["voice_design"], TEXT, how, 4, instruct="A calm, low voice.", seed=9, max_new_tokens=25)


@pytest.mark.parametrize("x_vector_only", [True, False])
@pytest.mark.parametrize("ref_seconds", [0.3, 1.5])
@pytest.mark.parametrize("how", ["chars", "words"])
def test_clones_equal_stream(models: dict[str, qtts.Model], x_vector_only: bool, ref_seconds: float,
                             how: str) -> None:
    # An ICL prompt holds the reference's frames' worth of text: with 1.5 s (19 frames) the
    # generation starts only after several words, and TEXT is longer than the frame slots;
    # "Hi there." is not, so that prompt waits for the whole text.
    base = models["base"]
    wav = _clip(int(24000 * ref_seconds), 1)
    voice = base.create_voice((wav, 24000), None if x_vector_only else REF_TEXT, x_vector_only_mode=x_vector_only)
    for text in (TEXT, "Hi there."):
        _check_equal(base, text, how, 6, voice=voice, seed=4, max_new_tokens=20)


def test_pipelined_vocoder_equals_stream(gguf_dir: Path) -> None:
    # the vocoder on one of the two threads while the other generates: the same samples, and the
    # chunk made before a wait for text is handed out before it
    model = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2, vocoder_threads=1, voice_cache=False)
    _check_equal(model, TEXT, "words", 8, speaker="ryan", seed=6, max_new_tokens=30)
    _check_equal(model, LONG, "random", 8, speaker="ryan", seed=6, max_new_tokens=10, split_sentences=40)


def test_budget_grows_with_the_text(models: dict[str, qtts.Model]) -> None:
    # frame_budget "auto" is 128 frames plus 1.4 per character: a runaway run that reaches it
    # must stop where the whole text's budget stops it, the talker cache grown on the way
    model = models["custom_voice"]
    text = "Go on. " * 30
    want = list(model.stream(text, speaker="ryan", seed=1, max_new_tokens=2000, non_streaming_mode=False,
                             split_sentences=False, min_new_tokens=2000))
    assert want[-1].stop_reason == "budget"
    got = list(model.stream_text(_cuts(text, "words"), speaker="ryan", seed=1, max_new_tokens=2000,
                                 split_sentences=False, min_new_tokens=2000))
    assert got[-1].stop_reason == "budget"
    np.testing.assert_array_equal(_samples(got), _samples(want))


def test_async_variant_equals_stream(models: dict[str, qtts.Model]) -> None:
    model = models["custom_voice"]
    kwargs = dict(speaker="ryan", seed=3, max_new_tokens=20)
    want = _samples(list(model.stream(TEXT, non_streaming_mode=False, **kwargs)))

    async def deltas() -> AsyncIterator[str]:
        for part in _cuts(TEXT, "words"):
            await asyncio.sleep(0.002)
            yield part

    async def run() -> list[qtts.AudioChunk]:
        return [c async for c in model.stream_text_async(deltas(), **kwargs)]

    np.testing.assert_array_equal(_samples(asyncio.run(run())), want)


def test_close_and_cancel_mid_text(models: dict[str, qtts.Model]) -> None:
    model = models["custom_voice"]
    release = threading.Event()

    def held() -> Iterator[str]:
        yield "Hello there, my friend and"
        release.wait(600)  # the rest comes only at the test's end
        yield " more."

    try:
        it = model.stream_text(held(), speaker="ryan", seed=1, max_new_tokens=200)
        first = next(it)
        assert len(first.codes) == 1
        it.close()  # while it waits for text
        # the model is free again
        assert model.synthesize(TEXT, speaker="ryan", max_new_tokens=3, **GREEDY).codes.shape == (2, 16)

        chunks: list[qtts.AudioChunk] = []
        started, done = threading.Event(), threading.Event()

        def consume() -> None:
            for c in model.stream_text(held(), speaker="ryan", seed=1, max_new_tokens=200):
                chunks.append(c)
                started.set()
            done.set()

        threading.Thread(target=consume, daemon=True).start()
        assert started.wait(120)

        # it waits for the rest of the text without spinning a core: a spin would burn about 0.5 s
        # of CPU in every window, while work still finishing (a chunk vocoded late on busy cores) ends
        def window() -> float:
            cpu = time.process_time()
            time.sleep(0.5)
            return time.process_time() - cpu

        assert min(window() for _ in range(4)) < 0.15
        model.cancel()
        # the text never comes, so only the cancel can end the stream (the wait is a hang guard)
        assert done.wait(120), "cancel() did not wake a stream waiting for text"
        assert chunks[-1].stop_reason == "cancelled"
    finally:
        release.set()


def test_bad_input(models: dict[str, qtts.Model]) -> None:
    model = models["custom_voice"]
    with pytest.raises(TypeError, match="iterable of str"):
        model.stream_text("Hello", speaker="ryan")
    with pytest.raises(TypeError, match="iterable of str"):
        model.stream_text(42, speaker="ryan")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non_streaming_mode=False"):
        model.stream_text(["Hi."], speaker="ryan", non_streaming_mode=True)
    with pytest.raises(ValueError, match="unknown speaker"):
        model.stream_text(["Hi."], speaker="nobody")
    with pytest.raises(TypeError, match="fragment must be a str"):
        list(model.stream_text(["Hi", 3], speaker="ryan", max_new_tokens=5))  # type: ignore[list-item]
    with pytest.raises(ValueError, match="text is empty"):
        list(model.stream_text([" ", "\n"], speaker="ryan", max_new_tokens=5))

    def failing() -> Iterator[str]:
        yield "Hello"
        raise OSError("the LLM went away")

    with pytest.raises(OSError, match="went away"):
        list(model.stream_text(failing(), speaker="ryan", max_new_tokens=5))


@pytest.mark.parametrize("mode", ["auto", True, False, 7, 15, 30])
def test_known_pieces_never_take_back(mode: object) -> None:
    rng = random.Random(str(mode))
    words = ["Hello", "world", "a", "bb,", "c.", "dd!", "yes;", "no:", "longlonglong", "\n", "é", "你好。",
             "好，"]
    for _ in range(300):
        text = "".join(rng.choice(words) + rng.choice([" ", " ", "  ", "", "\n", " \t"])
                       for _ in range(rng.randint(1, 40)))
        if mode == "auto" and rng.random() < 0.5:
            text *= 3
        final = [p for p in text_pieces(text, mode) if p.strip()]  # type: ignore[arg-type]
        settled: list[str] = []
        for k in range(len(text) + 1):
            known = known_pieces(text[:k], k == len(text), mode)  # type: ignore[arg-type]
            assert known.complete == final[:len(known.complete)]
            assert known.complete[:len(settled)] == settled
            if known.next_text:
                assert final[len(known.complete)].startswith(known.next_text)
            settled = known.complete
        assert settled == final


def test_final_text_ids_are_the_full_texts(models: dict[str, qtts.Model]) -> None:
    # contractions, whitespace runs, newlines, digits, combining marks (NFC), CJK
    tok = models["custom_voice"].tokenizer
    rng = random.Random(2)
    frags = ["Hello", " world", "'s", "'ll", " don't", ",", ".", "!!", " ", "  ", "\n", "12", "3.5", " é",
             "e\u0301", "你好", "。", "「", " 'x", "\t", "...", "'re", "ab\u0308c"]
    for _ in range(400):
        text = "".join(rng.choice(frags) for _ in range(rng.randint(1, 15)))
        if not text.strip() or text[0].isspace():
            continue
        full = tok.prompt_text_ids(text)
        settled: list[int] = []
        for k in range(1, len(text) + 1):
            ids = final_text_ids(tok, text[:k], k == len(text))
            assert full[:len(ids)] == ids and ids[:len(settled)] == settled, (text, k)
            settled = ids
        assert settled == full


_WRITER = """
import sys, time
for i, part in enumerate(sys.argv[1:]):
    sys.stdout.write(part)
    sys.stdout.flush()
    time.sleep(0.05 if i < 3 else 0.005)
"""


def test_cli_text_stream(models: dict[str, qtts.Model], gguf_dir: Path, tmp_path: Path) -> None:
    # a program that prints words without newlines, piped in: the audio equals
    # stream(full text, non_streaming_mode=False); usage errors and undecodable input fail cleanly
    import subprocess
    import sys

    from qtts.runtime.audio.audio import pcm16

    model = models["custom_voice"]
    want = pcm16(_samples(list(model.stream(TEXT, speaker="ryan", seed=5, max_new_tokens=25,
                                            non_streaming_mode=False))))
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, *_cuts(TEXT, "words")], stdout=subprocess.PIPE)
    r = subprocess.run([sys.executable, "-m", "qtts.cli", "speak", "-m", str(gguf_dir / "tiny_custom_voice-f32.gguf"),
                        "--speaker", "ryan", "-s", "5", "--max-new-tokens", "25", "--text-stream", "--raw", "-q",
                        "-t", "2"], stdin=writer.stdout, capture_output=True, timeout=300)
    writer.wait(10)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == want
    out = tmp_path / "a.wav"
    r = subprocess.run([sys.executable, "-m", "qtts.cli", "speak", "-m", str(gguf_dir / "tiny_custom_voice-f32.gguf"),
                        "--speaker", "ryan", "--text-stream", "-p", "hi"], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "--text-stream reads the text from stdin" in r.stderr
    r = subprocess.run([sys.executable, "-m", "qtts.cli", "speak", "-m", str(gguf_dir / "tiny_custom_voice-f32.gguf"),
                        "--speaker", "ryan", "-s", "5", "--max-new-tokens", "25", "--text-stream", "-o", str(out)],
                       input=("\ufeff\n  " + TEXT).encode(), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    import soundfile as sf

    got, sr = sf.read(out, dtype="int16")  # the file writer rounds float samples its own way
    assert sr == 24000 and len(got) * 2 == len(want)
    np.testing.assert_allclose(got.astype(np.int32), np.frombuffer(want, dtype="<i2").astype(np.int32), atol=8)
    r = subprocess.run([sys.executable, "-m", "qtts.cli", "speak", "-m", str(gguf_dir / "tiny_custom_voice-f32.gguf"),
                        "--speaker", "ryan", "--text-stream", "--raw"], input=b"Hi \xff\xfe there.",
                       capture_output=True, timeout=300)
    assert r.returncode != 0 and b"stdin is not UTF-8" in r.stderr


@pytest.mark.parametrize("name", list(VALID))
def test_unicode_corpus(models: dict[str, qtts.Model], name: str) -> None:
    """Unusual but valid text (tests/fixtures/unicode.py) streamed in, character by character or
    whole, is spoken as stream() speaks it; text that is not valid Unicode is refused where it is
    written, naming it."""
    model = models["custom_voice"]
    text = VALID[name]
    want = _samples(list(model.stream(text, speaker="ryan", seed=3, max_new_tokens=6, non_streaming_mode=False)))
    for parts in (list(text), [text]):
        got = _samples(list(model.stream_text(iter(parts), speaker="ryan", seed=3, max_new_tokens=6)))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(INVALID))
def test_unicode_corpus_refused(models: dict[str, qtts.Model], name: str) -> None:
    model = models["custom_voice"]
    with pytest.raises(ValueError, match="text fragment is not valid Unicode: lone surrogate"):
        list(model.stream_text(iter(["Fine so far, ", INVALID[name]]), speaker="ryan", max_new_tokens=5))
    assert len(_samples(list(model.stream_text(["Still fine."], speaker="ryan", max_new_tokens=3)))) > 0


def test_cli_text_stream_unicode_corpus(models: dict[str, qtts.Model], gguf_dir: Path) -> None:
    """The corpus piped into --text-stream in one text: the audio of stream(); a lone surrogate's
    bytes (as CESU-8 writes it) are not UTF-8 and are refused."""
    import subprocess
    import sys

    from qtts.runtime.audio.audio import pcm16

    text = "\n".join(VALID.values())
    model = models["custom_voice"]
    want = pcm16(_samples(list(model.stream(text, speaker="ryan", seed=5, max_new_tokens=6, non_streaming_mode=False))))
    cmd = [sys.executable, "-m", "qtts.cli", "speak", "-m", str(gguf_dir / "tiny_custom_voice-f32.gguf"), "--speaker",
           "ryan", "-s", "5", "--max-new-tokens", "6", "--text-stream", "--raw", "-q", "-t", "2"]
    r = subprocess.run(cmd, input=text.encode(), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == want
    for name in INVALID:
        r = subprocess.run(cmd, input=INVALID[name].encode("utf-8", "surrogatepass"), capture_output=True, timeout=300)
        assert r.returncode == 1 and b"stdin is not UTF-8" in r.stderr, r.stderr.decode()
