"""Eager synthesis, streaming, text splitting, audio files and the qwen-tts compatibility names."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import qtts
from qtts.runtime.audio.audio import pcm16
from qtts.runtime.settings.config import GenerationConfig
from qtts.runtime.synthesis.prompt import build_prompt, resolve_voice
from qtts.runtime.text.text import split_text

TEXT = "Hello world, this is a tiny test."
GREEDY = dict(do_sample=False, subtalker_dosample=False)


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2)


def test_stepwise_generation_equals_one_call(cv: qtts.Model) -> None:
    voice = resolve_voice(cv.context, language="english", speaker="ryan", instruct=None)
    config = GenerationConfig.resolve(cv.generation_defaults, dict(max_new_tokens=30), 5, frame_budget=None)
    with cv.engine.session() as s:
        p = build_prompt(cv.context, s, TEXT, voice, non_streaming_mode=True)
        full, reason, _ = s.generate(p.embeddings, p.trailing, config)
        s.generate_begin(p.embeddings, p.trailing, config)
        parts, r = [], None
        while r is None:
            codes, r, timings = s.generate_next(3)
            parts.append(codes)
        assert r == reason == "max_new_tokens"
        np.testing.assert_array_equal(np.concatenate(parts), full)
        assert timings["predictor_ms"] > 0
        with pytest.raises(ValueError, match="n_frames"):
            s.generate_next(0)


def test_synthesize_is_codes_then_decode(cv: qtts.Model, tmp_path: Path) -> None:
    audio = cv.synthesize(TEXT, speaker="ryan", seed=3, max_new_tokens=12, **GREEDY)
    codes = cv.generate_codes(TEXT, speaker="ryan", max_new_tokens=12, **GREEDY).codes
    np.testing.assert_array_equal(audio.codes, codes)
    np.testing.assert_array_equal(audio.samples, cv.decode(codes))
    assert audio.sample_rate == 24000 and audio.samples.dtype == np.float32
    assert len(audio.samples) == 11 * 1920 and audio.stop_reason == "max_new_tokens"
    t = audio.timings
    assert t.frames == 11 and t.vocoder_ms_per_frame > 0 and t.rtf > 0 and t.peak_rss_mb > 0
    assert "vocoder" in t.format() and '"rtf"' in t.to_json()
    for name, subtype in (("a.wav", "PCM_16"), ("a.flac", "PCM_16")):
        audio.save(tmp_path / name)
        info = sf.info(str(tmp_path / name))
        assert (info.samplerate, info.channels, info.subtype, info.frames) == (24000, 1, subtype, len(audio.samples))
    with pytest.raises(ValueError, match="extension"):
        audio.save(tmp_path / "a.mp3")


@pytest.mark.usefixtures("clock_stands_still")
def test_stream_equals_synthesize(cv: qtts.Model) -> None:
    kwargs = dict(speaker="vivian", seed=11, max_new_tokens=20)
    eager = cv.synthesize(TEXT, **kwargs)
    chunks = list(cv.stream(TEXT, **kwargs))
    assert [len(c.codes) for c in chunks][:4] == [1, 2, 4, 8]
    assert chunks[-1].stop_reason == eager.stop_reason and all(c.stop_reason is None for c in chunks[:-1])
    np.testing.assert_array_equal(np.concatenate([c.codes for c in chunks]), eager.codes)
    np.testing.assert_allclose(np.concatenate([c.samples for c in chunks]), eager.samples, atol=1e-5)


def test_closing_a_stream_stops_it(cv: qtts.Model) -> None:
    it = cv.stream(TEXT, speaker="ryan", max_new_tokens=10_000, frame_budget=None, seed=1)
    first = next(it)
    assert len(first.codes) == 1 and len(first.samples) == 1920
    it.close()
    # the model is free again
    assert cv.synthesize(TEXT, speaker="ryan", max_new_tokens=3, **GREEDY).codes.shape == (2, 16)


def test_split_sentences(cv: qtts.Model) -> None:
    text = "First sentence here. 第二句话。Third one!"
    assert split_text(text, max_chars=20) == ["First sentence here.", "第二句话。Third one!"]
    assert split_text(text, max_chars=12) == ["First", "sentence", "here. 第二句话。", "Third one!"]
    audio = cv.synthesize(text, speaker="ryan", split_sentences=20, max_new_tokens=6, **GREEDY)
    assert len(audio.codes) == 2 * 5
    n = len(split_text(text, max_chars=10))
    assert n == 5
    audio = cv.synthesize(text, speaker="ryan", split_sentences=10, max_new_tokens=6, **GREEDY)
    assert len(audio.codes) == n * 5
    pause = int(0.25 * 24000)
    assert len(audio.samples) == n * 5 * 1920 + (n - 1) * pause
    chunks = list(cv.stream(text, speaker="ryan", split_sentences=10, max_new_tokens=6, **GREEDY))
    np.testing.assert_allclose(np.concatenate([c.samples for c in chunks]), audio.samples, atol=1e-5)


def test_compat_names(cv: qtts.Model, gguf_dir: Path) -> None:
    wavs, sr = cv.generate_custom_voice(["Hi there.", TEXT], speaker="ryan", max_new_tokens=5, **GREEDY)
    assert sr == 24000 and [len(w) for w in wavs] == [4 * 1920, 4 * 1920]
    vd = qtts.load(gguf_dir / "tiny_voice_design-f32.gguf", n_threads=1)
    wavs, _ = vd.generate_voice_design(TEXT, instruct="A calm voice.", language="English", max_new_tokens=4)
    assert len(wavs) == 1 and len(wavs[0]) == 3 * 1920
    with pytest.raises(ValueError, match="speaker has 2 items"):
        cv.generate_custom_voice(TEXT, speaker=["ryan", "vivian"])
    with pytest.raises(TypeError, match="unexpected argument"):
        cv.synthesize(TEXT, speaker="ryan", length_penalty=1.0)
    # EOS is masked until min_new_tokens tokens exist: a fixed length, as the benchmarks use
    fixed = cv.synthesize(TEXT, speaker="ryan", min_new_tokens=7, max_new_tokens=8, frame_budget=None, **GREEDY)
    assert len(fixed.codes) == 7 and fixed.stop_reason == "max_new_tokens"
    assert cv.get_supported_speakers() == ["dylan", "ryan", "vivian"]


def test_pcm16() -> None:
    b = pcm16(np.array([0.0, 1.0, -1.0, 2.0], dtype=np.float32))
    assert np.frombuffer(b, "<i2").tolist() == [0, 32767, -32767, 32767]


@pytest.mark.parametrize("name, request_", [
    ("tiny_custom_voice", dict(speaker="dylan", language="auto")),
    ("tiny_voice_design", dict(instruct="A warm, calm voice.", language="english")),
])
def test_waveform_matches_reference(name: str, request_: dict, gguf_dir: Path, reference_models) -> None:
    """End to end, greedy: synthesize() equals the reference's generate_custom_voice /
    generate_voice_design waveform within 1e-4."""
    import torch

    ref = reference_models(name)
    kwargs = dict(max_new_tokens=21, **GREEDY)
    with torch.no_grad():
        if name == "tiny_custom_voice":
            wavs, sr = ref.generate_custom_voice(text=TEXT, **request_, **kwargs)
        else:
            wavs, sr = ref.generate_voice_design(text=TEXT, **request_, **kwargs)
    m = qtts.load(gguf_dir / f"{name}-f32.gguf", n_threads=2)
    audio = m.synthesize(TEXT, **request_, **kwargs)
    assert sr == audio.sample_rate and len(wavs[0]) == len(audio.samples) == 20 * 1920
    assert np.abs(audio.samples - wavs[0]).max() <= 1e-4
    assert np.std(audio.samples) > 0.01
