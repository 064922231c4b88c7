"""Voice cloning on the tiny Base checkpoint, against the qwen-tts reference: the speaker encoder,
the codec encoder, x-vector and ICL prompts end to end, voice files and the embedding cache."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.runtime.audio.mel import log_mel_spectrogram
from qtts.runtime.audio.voice import Voice

TEXT = "Hello world, this is a tiny test."
REF_TEXT = "The quick brown fox jumps."
GREEDY = dict(do_sample=False, subtalker_dosample=False, max_new_tokens=21)


def _clip(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 24000
    return (0.3 * np.sin(2 * np.pi * (140 + 60 * t) * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


@pytest.fixture(scope="module")
def base(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=2, voice_cache=False)


@pytest.fixture(scope="module")
def portable(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=2, voice_cache=False, ops="portable")


# The encoders' parity tests run on both paths (docs/kernels.md, "Portable graphs"); the
# end-to-end ones take the portable path in one case each, which covers all three networks.
@pytest.fixture(scope="module", params=["native", "portable"])
def model(request: pytest.FixtureRequest) -> qtts.Model:
    return request.getfixturevalue("base" if request.param == "native" else "portable")


@pytest.fixture(scope="module")
def ref(reference_models):
    return reference_models("tiny_base")


@pytest.mark.parametrize("n", [1280, 24000, 24000 * 3 + 17])
def test_speaker_embedding_matches_reference(model: qtts.Model, ref, n: int) -> None:
    wav = _clip(n, n)
    want = ref.model.extract_speaker_embedding(wav, 24000).float().numpy()
    got = model.speaker_embedding(wav)
    cos = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos >= 0.99999 and np.abs(got - want).max() < 1e-4
    # the engine's encoder over the mel gives the same
    with model.engine.session() as s:
        np.testing.assert_allclose(s.speaker_embed(log_mel_spectrogram(wav)), got, rtol=0, atol=1e-6)


@pytest.mark.parametrize("n", [1, 1919, 1921, 24000 * 2 + 500, 24000 * 5 + 17])
def test_codec_encoder_codes_match_reference(model: qtts.Model, ref, n: int) -> None:
    # 5 s spans three conv-stack chunks (2 s each) and an odd 25 Hz length
    wav = _clip(n, n) if n > 1 else np.array([0.25], np.float32)
    want = ref.model.speech_tokenizer.encode(wav, sr=24000).audio_codes[0].numpy()
    with model.engine.session() as s:
        got = s.encode(wav)
    assert got.shape == want.shape == (-(-n // 1920), 16)
    np.testing.assert_array_equal(got, want)


def test_codec_encoder_on_silence_matches_reference(model: qtts.Model, ref) -> None:
    wav = np.zeros(24000, np.float32)
    want = ref.model.speech_tokenizer.encode(wav, sr=24000).audio_codes[0].numpy()
    with model.engine.session() as s:
        np.testing.assert_array_equal(s.encode(wav), want)


def test_encode_api_resamples_like_the_reference(base: qtts.Model, ref) -> None:
    wav16 = _clip(16000 * 2, 7)
    want = ref.model.speech_tokenizer.encode(wav16, sr=16000).audio_codes[0].numpy()
    np.testing.assert_array_equal(base.encode((wav16, 16000)), want)


@pytest.mark.parametrize("x_vector_only, non_streaming, ops", [
    (True, False, "native"), (False, False, "native"), (True, True, "native"), (False, True, "native"),
    (False, False, "portable")], ids=["xvec-stream_text", "icl-stream_text", "xvec-full_text", "icl-full_text",
                                      "icl-stream_text-portable"])
def test_voice_clone_matches_generate_voice_clone(request: pytest.FixtureRequest, ref, x_vector_only: bool,
                                                  non_streaming: bool, ops: str) -> None:
    model = request.getfixturevalue("base" if ops == "native" else "portable")
    wav = _clip(24000 * 2 + 500, 11)
    rt = None if x_vector_only else REF_TEXT
    want_wavs, sr = ref.generate_voice_clone(TEXT, language="English", ref_audio=(wav, 24000), ref_text=rt,
                                             x_vector_only_mode=x_vector_only, non_streaming_mode=non_streaming,
                                             **GREEDY)
    items = ref.create_voice_clone_prompt(ref_audio=(wav, 24000), ref_text=rt, x_vector_only_mode=x_vector_only)
    voice = model.create_voice((wav, 24000), rt, x_vector_only_mode=x_vector_only)
    if not x_vector_only:
        np.testing.assert_array_equal(voice.ref_codes, items[0].ref_code.numpy())
    audio = model.synthesize(TEXT, language="english", voice=voice, non_streaming_mode=non_streaming, **GREEDY)
    # the greedy codes are the reference's: its waveform is the decode of exactly these frames
    assert audio.codes.shape == (20, 16) and sr == model.sample_rate
    assert len(audio.samples) == len(want_wavs[0])
    np.testing.assert_allclose(audio.samples, want_wavs[0], rtol=0, atol=1e-4)
    if not x_vector_only:
        # G8: the reference's float cut keeps one sample of the reference audio here
        assert len(audio.samples) == 20 * 1920 + 1


def test_voice_clone_codes_equal_reference_generate(base: qtts.Model, ref) -> None:
    import torch

    wav = _clip(30000, 5)
    items = ref.create_voice_clone_prompt(ref_audio=(wav, 24000), ref_text=REF_TEXT)
    prompt = ref._prompt_items_to_voice_clone_prompt(items)
    ids = ref._tokenize_texts([ref._build_assistant_text(TEXT)])
    ref_ids = [ref._tokenize_texts([ref._build_ref_text(REF_TEXT)])[0]]
    with torch.no_grad():
        codes, _ = ref.model.generate(input_ids=ids, ref_ids=ref_ids, voice_clone_prompt=prompt, languages=["auto"],
                                      non_streaming_mode=False, do_sample=False, subtalker_dosample=False,
                                      max_new_tokens=21)
    voice = base.create_voice((wav, 24000), REF_TEXT)
    got = base.generate_codes(TEXT, voice=voice, do_sample=False, subtalker_dosample=False, max_new_tokens=21)
    np.testing.assert_array_equal(got.codes, codes[0].numpy())


@pytest.mark.parametrize("ref_seconds, ops", [(1.25, "native"), (5.0, "native"), (1.25, "portable")])
def test_stream_of_icl_voice_follows_synthesize(request: pytest.FixtureRequest, ref_seconds: float, ops: str) -> None:
    model = request.getfixturevalue("base" if ops == "native" else "portable")
    # 63 reference frames: most only advance the decoder's transformer state (kConvWarmup = 16)
    voice = model.create_voice((_clip(int(24000 * ref_seconds), 2), 24000), REF_TEXT)
    audio = model.synthesize(TEXT, voice=voice, **GREEDY)
    streamed = np.concatenate([c.samples for c in model.stream(TEXT, voice=voice, **GREEDY)])
    # the stream starts exactly at the first generated frame; synthesize reproduces the reference's
    # cut, which may keep one more sample of the reference: the ICL output cut
    # (docs/model.md, "Reference quirks")
    assert len(audio.samples) - len(streamed) in (0, 1)
    np.testing.assert_array_equal(audio.samples[len(audio.samples) - len(streamed):], streamed)


def test_voice_file_round_trip_and_model_check(base: qtts.Model, gguf_dir: Path, tmp_path: Path) -> None:
    wav = _clip(24000, 3)
    voice = base.create_voice((wav, 24000), REF_TEXT)
    p = voice.save(tmp_path / "me.qvoice")
    back = qtts.Voice.load(p)  # the public name
    np.testing.assert_array_equal(back.x_vector, voice.x_vector)
    np.testing.assert_array_equal(back.ref_codes, voice.ref_codes)
    assert back.ref_text == REF_TEXT and back.model_fingerprint == base.fingerprint
    a = base.synthesize(TEXT, voice=back, **GREEDY)
    np.testing.assert_array_equal(a.samples, base.synthesize(TEXT, voice=voice, **GREEDY).samples)
    # another conversion of the same checkpoint accepts it: the speaker encoder stays F32
    q8 = qtts.Model(gguf_dir / "tiny_base-q8_0.gguf", n_threads=1, voice_cache=False)
    assert q8.fingerprint == base.fingerprint
    q8.synthesize(TEXT, voice=back, max_new_tokens=3)
    forged = Voice(voice.x_vector, voice.ref_codes, voice.ref_text, "0" * 64)
    with pytest.raises(ValueError, match="different model"):
        base.synthesize(TEXT, voice=forged)
    xv = base.create_voice((wav, 24000), x_vector_only_mode=True)
    back = Voice.load(xv.save(tmp_path / "x.qvoice"))
    assert back.x_vector_only_mode and back.ref_text is None


@pytest.mark.parametrize("content, match", [
    (b"not a zip", "not a qtts voice file"),
    (None, "no such voice file"),
])
def test_bad_voice_files(tmp_path: Path, content: bytes | None, match: str) -> None:
    p = tmp_path / "v.qvoice"
    if content is not None:
        p.write_bytes(content)
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        Voice.load(p)


def test_voice_file_with_wrong_fields(tmp_path: Path) -> None:
    import json

    def write(**arrays):
        p = tmp_path / "v.qvoice"
        with open(p, "wb") as f:
            np.savez(f, **arrays)
        return p

    head = dict(format="qtts-voice", version=1, model_fingerprint="ab", ref_text=None, x_vector_only_mode=True)
    with pytest.raises(ValueError, match="version 9"):
        Voice.load(write(header=np.array(json.dumps({**head, "version": 9})), x_vector=np.zeros(4, np.float32)))
    with pytest.raises(ValueError, match="x_vector"):
        Voice.load(write(header=np.array(json.dumps(head)), x_vector=np.full(4, np.nan, np.float32)))
    with pytest.raises(ValueError, match="contradict"):
        Voice.load(write(header=np.array(json.dumps({**head, "ref_text": "hi"})), x_vector=np.zeros(4, np.float32),
                         ref_codes=np.zeros((2, 16), np.int32)))


def test_embedding_cache_skips_encoders(gguf_dir: Path, tmp_path: Path) -> None:
    m = qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=1, voice_cache=tmp_path / "voices")
    wav = _clip(24000, 4)
    first = m.synthesize(TEXT, ref_audio=(wav, 24000), ref_text=REF_TEXT, max_new_tokens=3, seed=1)
    assert first.timings.voice_cache == "miss" and first.timings.codec_encode_ms > 0
    again = m.synthesize(TEXT, ref_audio=(wav, 24000), ref_text="Another transcript.", max_new_tokens=3, seed=1)
    t = again.timings
    assert t.voice_cache == "hit" and t.speaker_encode_ms == 0 and t.codec_encode_ms == 0
    assert "voice cache" in t.format()
    # x-vector-only is a different entry
    xv = m.synthesize(TEXT, ref_audio=(wav, 24000), x_vector_only_mode=True, max_new_tokens=3)
    assert xv.timings.voice_cache == "miss"
    assert len(list((tmp_path / "voices").glob("*.qvoice"))) == 2


def test_cloning_errors(base: qtts.Model, gguf_dir: Path) -> None:
    wav = _clip(24000, 6)
    with pytest.raises(ValueError, match="ref_text.*x_vector_only_mode"):
        base.create_voice((wav, 24000))
    with pytest.raises(ValueError, match="voice="):
        base.synthesize(TEXT)
    with pytest.raises(ValueError, match="no instruct"):
        base.synthesize(TEXT, ref_audio=(wav, 24000), x_vector_only_mode=True, instruct="calm")
    with pytest.raises(ValueError, match="too short"):
        base.create_voice((wav[:1000], 24000), x_vector_only_mode=True)
    with pytest.raises(ValueError, match="go with ref_audio"):
        base.synthesize(TEXT, ref_text=REF_TEXT)
    cv = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1, voice_cache=False)
    with pytest.raises(ValueError, match="base model"):
        cv.create_voice((wav, 24000), x_vector_only_mode=True)
    with pytest.raises(ValueError, match="speaker encoder"):
        with cv.engine.session() as s:
            s.speaker_embed(np.zeros((10, 128), np.float32))


def test_compat_voice_clone(base: qtts.Model) -> None:
    wav = _clip(30000, 8)
    prompts = base.create_voice_clone_prompt((wav, 24000), REF_TEXT)
    assert len(prompts) == 1 and not prompts[0].x_vector_only_mode
    wavs, sr = base.generate_voice_clone([TEXT, "Second one."], language="English", voice_clone_prompt=prompts,
                                         **GREEDY)
    assert sr == 24000 and len(wavs) == 2
    direct, _ = base.generate_voice_clone(TEXT, "English", ref_audio=(wav, 24000), ref_text=REF_TEXT, **GREEDY)
    np.testing.assert_array_equal(direct[0], wavs[0])
    with pytest.raises(ValueError, match="voice_clone_prompt or ref_audio"):
        base.generate_voice_clone(TEXT)


def test_long_reference_clips(base: qtts.Model) -> None:
    """A clip over 60 s: ICL cloning refuses it (its transcript must match the audio, so it cannot
    be cut silently); x-vector-only cloning uses its first 60 s and says so."""
    clip = _clip(24000 * 61, 3)
    with pytest.raises(ValueError, match=r"61\.0 s long; voice cloning takes at most 60 s .*ref_text"):
        base.create_voice(clip, REF_TEXT)
    with pytest.raises(ValueError, match=r"sample rate 1 Hz is outside the supported range"):
        base.create_voice((clip, 1), x_vector_only_mode=True)
    with pytest.warns(UserWarning, match=r"61\.0 s long; the speaker embedding uses its first 60 s"):
        voice = base.create_voice(clip, x_vector_only_mode=True)
    first_60s = base.create_voice(clip[:24000 * 60], x_vector_only_mode=True)
    np.testing.assert_array_equal(voice.x_vector, first_60s.x_vector)
