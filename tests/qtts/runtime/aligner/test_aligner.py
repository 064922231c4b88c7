"""qtts.load_aligner / Aligner.align end to end against qwen-asr's Qwen3ForcedAligner.align on the
tiny checkpoint: the same words and the same timestamps, on both paths, for English, Chinese and
mixed text and clips of one and several encoder windows; the log-mel and the prompt ids on the
way; the audio inputs it takes and the ones it refuses."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import qtts
from qtts.runtime.audio.mel import whisper_log_mel
from qtts.runtime.text.words import split_words
from tests.fixtures.aligner_reference import clip, inputs, windowed

TEXTS = {
    "english": ("Hello, world! This is a tiny test of word timestamps; isn't it?", "English"),
    "chinese": ("我叫通义千问，是阿里云的开源大模型。", "Chinese"),
    "mixed": ("Qwen3-TTS 说 hello 世界 and 再见!", "Chinese"),
    "long_words": ("Internationalization incomprehensibilities antidisestablishmentarianism.", "English"),
}


@pytest.fixture(scope="module", params=["native", "portable"])
def aligner(aligner_gguf: dict[str, Path], request: pytest.FixtureRequest):
    with qtts.load_aligner(aligner_gguf["f32"], n_threads=2, device="cpu", ops=request.param) as a:
        yield a


def _reference(reference, audio, text: str, language: str) -> list[qtts.Word]:
    with windowed(reference):
        items = reference.align(audio=audio, text=text, language=language)[0]
    return [qtts.Word(it.text, it.start_time, it.end_time) for it in items]


@pytest.mark.parametrize("text", sorted(TEXTS))
@pytest.mark.parametrize("seconds", [2.0, 5.5, 12.3])
def test_align_matches_reference(aligner, reference_aligner, text: str, seconds: float) -> None:
    audio = (clip(seconds, 6), 16000)
    got = aligner.align(audio, *TEXTS[text])
    want = _reference(reference_aligner, audio, *TEXTS[text])
    assert got == want
    assert all(w.start <= w.end for w in got) and [w.start for w in got] == sorted(w.start for w in got)
    t = aligner.last_timings
    assert t.encoder_ms > 0 and t.decoder_ms > 0 and t.total_ms >= t.encoder_ms + t.decoder_ms


def test_log_mel_matches_reference(reference_aligner) -> None:
    for seconds in (0.0135, 0.7, 3.33, 12.3):
        audio = clip(seconds, 7)
        want = inputs(reference_aligner, audio, ["x"])["input_features"][0].numpy()
        got = whisper_log_mel(audio)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4


def test_prompt_matches_reference(aligner, reference_aligner) -> None:
    for text, language in TEXTS.values():
        words = split_words(text, language)
        batch = inputs(reference_aligner, clip(1.5, 8), words)
        n_audio = int((batch["input_ids"][0] == aligner.ids["audio_pad"]).sum())
        assert aligner.prompt(words, n_audio) == batch["input_ids"][0].tolist()


def test_audio_inputs(aligner, reference_aligner, gguf_dir: Path, tmp_path: Path) -> None:
    """Other rates are resampled as the reference resamples them, stereo is mixed down, loud audio
    scaled to peak 1; a file, a tuple and a qtts.Audio give the same words."""
    text, language = TEXTS["english"]
    x24 = clip(3.0, 9, rate=24000)
    got = aligner.align((x24, 24000), text, language)
    assert got == _reference(reference_aligner, (x24, 24000), text, language)
    loud = np.stack([3 * x24, 2 * x24], axis=1)
    assert aligner.align((loud, 24000), text, language) == _reference(reference_aligner, (loud, 24000), text, language)
    sf.write(tmp_path / "clip.wav", x24, 24000, subtype="FLOAT")
    assert aligner.align(tmp_path / "clip.wav", text, language) == got
    with qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1) as model:
        speech = model.synthesize("Hello world.", speaker="ryan", seed=1, max_new_tokens=30)
    assert aligner.align(speech, "Hello world.") == aligner.align((speech.samples, speech.sample_rate), "Hello world.")
    pcm = (clip(3.0, 9, rate=16000) * 32767).astype(np.int16)
    assert aligner.align((pcm, 16000), text, language) == _reference(reference_aligner, (pcm.astype(np.float32) /
                                                                                          32768.0, 16000), text,
                                                                      language)


def test_words_given_as_a_list(aligner) -> None:
    audio = (clip(2.0, 10), 16000)
    words = aligner.align(audio, ["こんにちは", "、", "世界"], "japanese")
    assert [w.text for w in words] == ["こんにちは", "世界"]
    assert aligner.align(audio, "!!! ...", "english") == []


def test_quantized_files_align(aligner_gguf: dict[str, Path]) -> None:
    text, language = TEXTS["mixed"]
    for t in ("bf16", "q8_0", "q4_k"):
        with qtts.load_aligner(aligner_gguf[t], n_threads=1) as a:
            words = a.align((clip(2.5, 11), 16000), text, language)
        assert len(words) == 8 and all(0 <= w.start <= w.end <= 400 for w in words)  # "Qwen3TTS" is one


def test_bad_inputs_are_refused(aligner, gguf_dir: Path, tmp_path: Path) -> None:
    ok = (clip(1.0, 12), 16000)
    cases = [
        ((clip(200.0 / 16000, 1), 16000), "hi", None, ValueError, "audio too short for the log-mel"),
        ((np.zeros(181 * 8000, np.float32), 8000), "hi", None, ValueError, "at most 180 s at once"),
        ((np.full(16000, np.nan, np.float32), 16000), "hi", None, ValueError, "NaN or infinite"),
        ((np.zeros((2, 16000), np.float32), 16000), "hi", None, ValueError, "transpose it"),
        ((np.zeros(16000, np.float32), 7), "hi", None, ValueError, "outside the supported range"),
        (np.zeros(16000, np.float32), "hi", None, TypeError, "a qtts.Audio, a \\(samples, sample_rate\\) tuple"),
        (tmp_path / "missing.wav", "hi", None, FileNotFoundError, "no such file"),
        (ok, "こんにちは", "Japanese", ValueError, "pass the words as a list"),
        (ok, "hi", "klingon", ValueError, "language 'klingon' is not one of this aligner's"),
        (ok, "hi", 3, TypeError, "language must be a str"),
    ]
    for audio, text, language, error, match in cases:
        with pytest.raises(error, match=match):
            aligner.align(audio, text, language)
    with pytest.raises(ValueError, match="is not a forced aligner"):
        qtts.load_aligner(gguf_dir / "tiny_custom_voice-f32.gguf")
    with pytest.raises(ValueError, match="a forced aligner, for qtts.load_aligner"):
        qtts.load(aligner.path, n_threads=1)
    with pytest.raises(FileNotFoundError):
        qtts.load_aligner(tmp_path / "missing.gguf")


def test_closed_aligner_refuses(aligner_gguf: dict[str, Path]) -> None:
    a = qtts.load_aligner(aligner_gguf["f32"], n_threads=1)
    a.close()
    a.close()
    with pytest.raises(RuntimeError, match="is closed"):
        a.align((clip(1.0, 13), 16000), "hi")
