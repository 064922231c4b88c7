"""Every argument that reaches C++ or the tokenizer is checked in Python first: TypeError for a
wrong type, ValueError for a bad value, each naming the argument (never a pybind11 cast error)."""
from __future__ import annotations

import numpy as np
import pytest

import qtts
from qtts.runtime.settings.config import GenerationConfig

DEFAULTS = dict(do_sample=True, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05,
                subtalker_dosample=True, subtalker_temperature=0.9, subtalker_top_k=50, subtalker_top_p=1.0,
                max_new_tokens=8192)

BAD_SETTINGS = [
    ("max_new_tokens", 3_000_000_000, ValueError), ("max_new_tokens", 1, ValueError),
    ("max_new_tokens", 2.0, TypeError), ("max_new_tokens", True, TypeError),
    ("min_new_tokens", -1, ValueError), ("min_new_tokens", 10**9, ValueError),
    ("top_k", 3_000_000_000, ValueError), ("top_k", -1, ValueError), ("top_k", 5.5, TypeError),
    ("top_k", True, TypeError), ("subtalker_top_k", 2**40, ValueError),
    ("temperature", float("inf"), ValueError), ("temperature", float("nan"), ValueError),
    ("temperature", 1e-30, ValueError), ("temperature", 1e39, ValueError), ("temperature", "1", TypeError),
    ("subtalker_temperature", -1.0, ValueError),
    ("top_p", 0.0, ValueError), ("top_p", 1.5, ValueError), ("top_p", float("nan"), ValueError),
    ("subtalker_top_p", "x", TypeError),
    ("repetition_penalty", 0.0, ValueError), ("repetition_penalty", float("inf"), ValueError),
    ("do_sample", 1, TypeError), ("subtalker_dosample", "yes", TypeError),
]


@pytest.mark.parametrize(("name", "value", "error"), BAD_SETTINGS)
def test_bad_setting_names_itself(name: str, value: object, error: type) -> None:
    with pytest.raises(error, match=name):
        GenerationConfig.resolve(DEFAULTS, {name: value}, 0)


@pytest.mark.parametrize(("seed", "error"), [(-1, ValueError), (2**64, ValueError), (1.5, TypeError),
                                             (True, TypeError), ("7", TypeError)])
def test_bad_seed(seed: object, error: type) -> None:
    with pytest.raises(error, match="seed"):
        GenerationConfig.resolve(DEFAULTS, {}, seed)  # type: ignore[arg-type]


def test_good_settings_are_normalised() -> None:
    s = GenerationConfig.resolve(DEFAULTS, dict(top_k=np.int64(3), temperature=np.float32(0.5),
                                                do_sample=np.bool_(True)), 2**64 - 1)
    assert (s.top_k, s.temperature, s.do_sample, s.seed) == (3, 0.5, True, 2**64 - 1)
    assert type(s.top_k) is int and type(s.do_sample) is bool
    # greedy ignores the temperature, as the reference: 0 passes there
    assert GenerationConfig.resolve(DEFAULTS, dict(do_sample=False, temperature=0.0), 0).temperature == 0.0
    with pytest.raises(ValueError, match="temperature must be at least"):
        GenerationConfig.resolve(DEFAULTS, dict(temperature=0.0), 0)


@pytest.fixture(scope="module")
def cv(gguf_dir):
    return qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(text=None), TypeError, "text must be a str, got NoneType"),
    (dict(text=b"hello"), TypeError, "text must be a str, got bytes"),
    (dict(text=5), TypeError, "text must be a str, got int"),
    (dict(text="caf\udce9"), ValueError, "text is not valid Unicode: lone surrogate"),
    (dict(text="  "), ValueError, "text is empty"),
    (dict(speaker=3), TypeError, "speaker must be a str"),
    (dict(language=None), TypeError, "language must be a str"),
    (dict(instruct=b"x"), TypeError, "instruct must be a str"),
    (dict(speaker="ry\ud800an"), ValueError, "speaker is not valid Unicode"),
    (dict(voice="me.qvoice"), TypeError, "voice must be a qtts.Voice"),
    (dict(non_streaming_mode=1), TypeError, "non_streaming_mode"),
    (dict(frame_budget=2.5), TypeError, "frame_budget"),
    (dict(frame_budget=0), ValueError, "frame_budget"),
    (dict(frame_budget=2**40), ValueError, "frame_budget"),
    (dict(split_sentences=0), ValueError, "split_sentences"),
    (dict(split_sentences="yes"), ValueError, "split_sentences"),
    (dict(split_sentences=2.5), TypeError, "split_sentences"),
    (dict(max_new_tokens=3_000_000_000), ValueError, "max_new_tokens"),
    (dict(progress=5), TypeError, "progress must be callable"),
])
def test_synthesize_checks_every_argument(cv: qtts.Model, kwargs: dict, error: type, match: str) -> None:
    args = dict(text="Hello.", speaker="ryan", max_new_tokens=3, do_sample=False, subtalker_dosample=False)
    args.update(kwargs)
    text = args.pop("text")
    with pytest.raises(error, match=match):
        cv.synthesize(text, **args)


def test_stream_and_load_arguments(cv: qtts.Model, gguf_dir) -> None:
    with pytest.raises(ValueError, match="max_chunk_frames"):
        cv.stream("Hi.", speaker="ryan", max_chunk_frames=2**40)
    with pytest.raises(TypeError, match="first_chunk_frames"):
        cv.stream("Hi.", speaker="ryan", first_chunk_frames=1.0)
    with pytest.raises(TypeError, match="text must be a str"):
        cv.generate_codes(None, speaker="ryan")  # type: ignore[arg-type]
    for text in (None, b"hi", 3):  # the qwen-tts names take a str or a list of them
        with pytest.raises(TypeError, match="text must be a str"):
            cv.generate_custom_voice(text, speaker="ryan")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        cv.generate_custom_voice(["ok", b"hi"], speaker="ryan", max_new_tokens=2)  # type: ignore[list-item]
    path = gguf_dir / "tiny_custom_voice-f32.gguf"
    with pytest.raises(TypeError, match="n_threads must be an integer"):
        qtts.Model(path, n_threads=True)
    with pytest.raises(ValueError, match="n_threads must be in"):
        qtts.Model(path, n_threads=0)
    with pytest.raises(TypeError, match="device must be a str"):
        qtts.Model(path, device=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ops must be one of auto, native, portable, got 'gpu'"):
        qtts.Model(path, ops="gpu")
    with pytest.raises(TypeError, match="ops must be a str, got int"):
        qtts.load(path, ops=1)  # type: ignore[arg-type]
