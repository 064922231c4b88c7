"""The engine layer: its lock (once per operation, other threads wait, a nested call raises; a
stream's lock across threads: tests/qtts/runtime/engine/test_stream_threads.py),
session handles that end with their block, and the one conversion of settings to the binding."""
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import qtts
from qtts.runtime.engine.engine import Engine, native_params
from qtts.runtime.settings.config import GenerationConfig, frame_budget_of

TEXT = "Hello world, this is a tiny test."
DEFAULTS = dict(do_sample=True, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05,
                subtalker_dosample=True, subtalker_temperature=0.9, subtalker_top_k=50, subtalker_top_p=1.0,
                max_new_tokens=8192)


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)


def test_nested_use_in_one_thread_raises(cv: qtts.Model) -> None:
    with cv.engine.session() as s:
        with pytest.raises(RuntimeError, match="nested"):
            cv.codec_embedding([0])
        assert s.codec_embed([0]).shape == (1, cv.hidden_size)
    assert cv.codec_embedding([0]).shape == (1, cv.hidden_size)  # released


def test_handle_ends_with_its_block(cv: qtts.Model) -> None:
    with cv.engine.session() as s:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        s.text_embed([0])


def test_other_threads_wait_for_an_open_stream(cv: qtts.Model, lock_waiters: Callable[[int], None]) -> None:
    it = cv.stream(TEXT, speaker="ryan", max_new_tokens=50, seed=1)
    next(it)
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(len(cv.synthesize(TEXT, speaker="ryan", max_new_tokens=3).codes)))
    t.start()
    lock_waiters(1)
    assert t.is_alive() and not got  # waiting for the stream
    it.close()
    t.join(60)
    assert got == [2]


def test_stream_closed_from_another_thread_frees_the_model(cv: qtts.Model) -> None:
    it = cv.stream(TEXT, speaker="ryan", max_new_tokens=50, seed=1)
    next(it)
    t = threading.Thread(target=it.close)
    t.start()
    t.join(60)
    assert cv.synthesize(TEXT, speaker="ryan", max_new_tokens=3).codes.shape == (2, 16)


def test_metadata_engine_has_no_session(gguf_dir: Path) -> None:
    e = Engine.metadata(str(gguf_dir / "tiny_custom_voice-f32.gguf"))
    assert e.variant == "custom_voice" and e.num_code_groups == 16 and e.frame_rate == 12.5
    with pytest.raises(RuntimeError, match="metadata only"):
        with e.session():
            pass


def test_piece_configs_and_native_params() -> None:
    config = GenerationConfig.resolve(DEFAULTS, dict(max_new_tokens=100), seed=2**64 - 1)
    assert config.frame_budget == "auto" and config.min_new_tokens == 2
    with pytest.raises(ValueError, match="for_piece"):
        native_params(config)
    piece = config.for_piece(1, "Hi.")
    assert piece.seed == 0 and piece.frame_budget == frame_budget_of("Hi.", "auto") and piece.frame_limit == 99
    native = native_params(piece)
    assert (native.seed, native.frame_budget, native.max_new_tokens) == (0, piece.frame_budget, 100)
    assert (native.talker.temperature, native.subtalker.top_k) == (pytest.approx(piece.temperature),
                                                                    piece.subtalker_top_k)
    off = GenerationConfig.resolve(DEFAULTS, {}, 0, frame_budget=None).for_piece(0, "Hi.")
    assert off.frame_budget is None and off.frame_limit == 8191 and native_params(off).frame_budget == 0
    with pytest.raises(ValueError, match="frame_budget"):
        GenerationConfig.resolve(DEFAULTS, {}, 0, frame_budget="never")
    with pytest.raises(TypeError, match="frame_budget"):
        GenerationConfig.resolve(DEFAULTS, {}, 0, frame_budget=2.5)
