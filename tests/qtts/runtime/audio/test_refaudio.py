"""qtts.runtime.audio.refaudio: reading, mixdown and resampling against soundfile, librosa and the reference."""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Callable

import librosa
import numpy as np
import pytest
import soundfile as sf

from qtts.runtime.audio.refaudio import audio_fingerprint, load_reference_audio
from tests.conftest import _need_reference

SR = 24000


def _voice(n: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """Speech-like test signal: a few partials plus noise, peak about 0.6, (n,) or (n, channels)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000.0
    cols = [sum(0.12 * np.sin(2 * np.pi * f * (c + 1) * t) for f in (140, 410, 1300, 3100))
            + 0.05 * rng.standard_normal(n) for c in range(channels)]
    x = np.stack(cols, axis=-1).astype(np.float32)
    return x[:, 0] if channels == 1 else x


def _librosa_expected(mono: np.ndarray, sr: int) -> np.ndarray:
    if sr == SR:
        return mono
    return librosa.resample(mono, orig_sr=sr, target_sr=SR, res_type="soxr_hq")


@pytest.fixture(scope="module")
def reference_prepare() -> Callable[[object], np.ndarray]:
    """The reference's path from ref_audio to the speaker encoder's input (create_voice_clone_prompt)."""
    _need_reference()
    from qwen_tts import Qwen3TTSModel

    model = Qwen3TTSModel.__new__(Qwen3TTSModel)  # these helpers use no instance state

    def run(ref_audio: object) -> np.ndarray:
        ((wav, sr),) = model._normalize_audio_inputs([ref_audio])
        if sr != SR:
            wav = librosa.resample(y=wav.astype(np.float32), orig_sr=int(sr), target_sr=SR)
        return wav

    return run


FILES = [("wav", "PCM_16", 24000, 1), ("wav", "PCM_U8", 16000, 1), ("wav", "PCM_32", 44100, 1),
         ("wav", "FLOAT", 24000, 2), ("flac", "PCM_16", 44100, 2), ("flac", "PCM_24", 48000, 1),
         ("ogg", "VORBIS", 16000, 1)]


def _write(tmp_path: Path, ext: str, subtype: str, sr: int, channels: int, n: int = 20000) -> Path:
    path = tmp_path / f"ref-{subtype}-{sr}-{channels}.{ext}"
    sf.write(path, _voice(n, channels), sr, subtype=subtype)
    return path


@pytest.mark.parametrize("ext,subtype,sr,channels", FILES)
def test_file_matches_soundfile_plus_librosa(tmp_path: Path, ext: str, subtype: str, sr: int,
                                            channels: int) -> None:
    path = _write(tmp_path, ext, subtype, sr, channels)
    ours = load_reference_audio(path)
    raw, _ = sf.read(path, dtype="float32")
    expected = _librosa_expected(raw if channels == 1 else raw.mean(axis=-1, dtype=np.float32), sr)
    assert ours.dtype == np.float32 and ours.ndim == 1 and ours.flags.c_contiguous
    assert ours.shape == expected.shape == (int(np.ceil(raw.shape[0] * SR / sr)),)
    assert np.abs(ours - expected).max() <= 1e-5


@pytest.mark.parametrize("ext,subtype,sr,channels", FILES)
def test_file_matches_reference(tmp_path: Path, reference_prepare, ext: str, subtype: str, sr: int,
                                channels: int) -> None:
    path = _write(tmp_path, ext, subtype, sr, channels)
    expected = reference_prepare(str(path))
    ours = load_reference_audio(str(path))
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= 1e-5


@pytest.mark.parametrize("orig_sr", [8000, 16000, 22050, 44100, 48000])
def test_resampling_matches_librosa_soxr_hq(orig_sr: int) -> None:
    x = _voice(orig_sr // 2 + 7)
    expected = librosa.resample(x, orig_sr=orig_sr, target_sr=SR, res_type="soxr_hq")
    ours = load_reference_audio((x, orig_sr))
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= 1e-5


def test_float_tuple_at_target_rate_is_passed_through(reference_prepare) -> None:
    x = _voice(4000)
    ours = load_reference_audio((x, SR))
    assert np.array_equal(ours, x)
    assert np.array_equal(ours, reference_prepare((x, SR)))


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_float_tuples_and_lists(dtype: type) -> None:
    x = _voice(8000).astype(dtype)
    expected = _librosa_expected(x.astype(np.float32), 16000)
    assert np.abs(load_reference_audio((x, 16000)) - expected).max() <= 1e-5
    assert np.abs(load_reference_audio((x.tolist(), 16000.0)) - expected).max() <= 1e-5


# Integer tuples are scaled the way libsndfile scales the same PCM read as float. Each case
# writes a PCM file, reads its raw integers back and checks both routes give the same audio.
def _ints(path: Path, dtype: type) -> np.ndarray:
    if dtype == np.int32:
        return sf.read(path, dtype="int32")[0]
    wide = sf.read(path, dtype="int16")[0]
    if dtype == np.int16:
        return wide
    narrow = wide >> 8  # 8-bit PCM comes back left-aligned in int16
    return (narrow + 128).astype(np.uint8) if dtype == np.uint8 else narrow.astype(np.int8)


@pytest.mark.parametrize("dtype,subtype", [(np.int16, "PCM_16"), (np.int32, "PCM_32"),
                                           (np.uint8, "PCM_U8"), (np.int8, "PCM_U8")])
def test_integer_tuples_scale_like_libsndfile(tmp_path: Path, dtype: type, subtype: str) -> None:
    path = _write(tmp_path, "wav", subtype, 16000, 1)
    ints = _ints(path, dtype)
    assert ints.dtype == dtype
    from_file = load_reference_audio(path)
    from_tuple = load_reference_audio((ints, 16000))
    assert np.abs(from_tuple - from_file).max() <= 1e-7
    at_rate = load_reference_audio((ints, SR))
    assert np.abs(at_rate - sf.read(path, dtype="float32")[0]).max() <= 1e-7


def test_stereo_tuple_mixes_down_like_the_reference_file_path(tmp_path: Path, reference_prepare) -> None:
    # (samples, channels), averaged over the last axis as the reference does. The reference's own
    # tuple route crashes on 2-D input, so compare with its file route on the same samples.
    x = _voice(20000, channels=2)
    path = tmp_path / "stereo.wav"
    sf.write(path, x, 44100, subtype="FLOAT")
    ours = load_reference_audio((x, 44100))
    assert np.array_equal(ours, load_reference_audio(path))
    assert np.abs(ours - reference_prepare(str(path))).max() <= 1e-5
    assert np.abs(ours - _librosa_expected(x.mean(axis=-1, dtype=np.float32), 44100)).max() <= 1e-5


def test_out_of_range_samples_are_kept_with_one_warning() -> None:
    x = 1.5 * _voice(4000) / np.abs(_voice(4000)).max()
    with pytest.warns(UserWarning, match=r"outside \[-1, 1\]") as caught:
        ours = load_reference_audio((x, SR))
    assert len(caught) == 1
    assert np.isclose(np.abs(ours).max(), 1.5)


def test_in_range_audio_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_reference_audio((_voice(4000), SR))


def test_file_errors_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.wav"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        load_reference_audio(missing)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path)) + ".*directory"):
        load_reference_audio(tmp_path)
    for name in ("text.wav", "text.raw", "text.txt"):
        bogus = tmp_path / name
        bogus.write_text("not audio at all")
        with pytest.raises(ValueError, match=re.escape(str(bogus)) + ".*cannot be read as audio"):
            load_reference_audio(bogus)


def test_file_content_errors_name_the_path(tmp_path: Path) -> None:
    cases = {"empty": (np.zeros(0, np.float32), "empty"),
             "inf": (np.where(np.arange(4000) == 7, np.inf, _voice(4000)), "NaN or infinite"),
             "quiet": (np.full(4000, 1e-7, np.float32), "silent")}
    for stem, (data, message) in cases.items():
        path = tmp_path / f"{stem}.wav"
        sf.write(path, data, SR, subtype="FLOAT")
        with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + message):
            load_reference_audio(path)


@pytest.mark.parametrize("samples,message", [
    (np.zeros(4000, np.float32), "silent"),
    (np.zeros(4000, np.int16), "silent"),
    (np.full(4000, 5e-7, np.float32), "silent"),
    (np.zeros(0, np.float32), "empty"),
    (np.zeros((0, 2), np.float32), "empty"),
    (np.where(np.arange(4000) == 3, np.nan, 0.1).astype(np.float32), "NaN or infinite"),
    (np.zeros((40, 40, 2), np.float32), "3 dimensions"),
    (np.zeros((2, 48000), np.float32), "looks like \\(channels, samples\\)"),
    (np.zeros(4000, np.int64), "dtype int64 is not supported"),
    (np.zeros(4000, np.uint16), "dtype uint16 is not supported"),
    (np.zeros(4000, np.complex64), "dtype complex64 is not supported"),
    (np.zeros(4000, bool), "dtype bool is not supported"),
])
def test_bad_samples(samples: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_reference_audio((samples, SR))


def test_too_short_is_measured_after_resampling() -> None:
    x = _voice(1000)
    with pytest.raises(ValueError, match=r"too short: 0\.042 s \(1000 samples at 24000 Hz\).*"
                                         r"0\.053 s \(1280 samples\)"):
        load_reference_audio((x, SR))
    with pytest.raises(ValueError, match=r"too short: 0\.021 s \(500 samples"):
        load_reference_audio((x, 48000))
    assert load_reference_audio((x, 16000)).shape == (1500,)
    assert load_reference_audio((x, SR), min_samples=1000).shape == (1000,)


@pytest.mark.parametrize("rate", [0, -16000, 22050.5, float("nan"), "24000", True, None])
def test_bad_sample_rates(rate: object) -> None:
    with pytest.raises(ValueError, match="sample rate must be a positive integer"):
        load_reference_audio((_voice(4000), rate))
    with pytest.raises(ValueError, match="target sample_rate must be a positive integer"):
        load_reference_audio((_voice(4000), SR), sample_rate=rate)


@pytest.mark.parametrize("ref_audio,message", [
    (123, "file path or a \\(samples, sample_rate\\) tuple, got int"),
    (b"ref.wav", "got bytes"),
    (_voice(4000), "got ndarray"),
    ({"audio": 1}, "got dict"),
    ((_voice(4000), SR, 1), "got 3 items"),
    (("abc", SR), "must be a numpy array or a list, got str"),
    ((["a", "b"], SR), "list is not numeric audio"),
    ("http://example.com/ref.wav", "URL.*download the file first"),
    ("HTTPS://example.com/ref.wav", "URL.*download the file first"),
    ("data:audio/wav;base64,UklGRiQAAABXQVZF", "base64"),
    ("UklGRiQAAABXQVZF" * 20, "base64"),
])
def test_bad_inputs(ref_audio: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_reference_audio(ref_audio)


def test_bad_min_samples() -> None:
    with pytest.raises(ValueError, match="min_samples"):
        load_reference_audio((_voice(4000), SR), min_samples=-1)


def test_fingerprint_keys_on_values_and_rate() -> None:
    x = _voice(4000)
    key = audio_fingerprint(x, SR)
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    # Same float32 values however they are stored: a float64 copy, a strided view.
    assert audio_fingerprint(x.astype(np.float64), SR) == key
    assert audio_fingerprint(np.stack([x, x], axis=1)[:, 0], SR) == key
    assert audio_fingerprint(x, 16000) != key
    y = x.copy()
    y[123] = np.nextafter(y[123], np.float32(2))
    assert audio_fingerprint(y, SR) != key
    with pytest.raises(ValueError):
        audio_fingerprint(x, 0)


@pytest.mark.parametrize("rate", [1, 7999, 384001, 10**9])
def test_sample_rates_outside_the_range_are_refused(rate: int, tmp_path: Path) -> None:
    """A (samples, 1) tuple once resampled to 1.7e9 samples and was OOM-killed."""
    with pytest.raises(ValueError, match=f"reference audio sample rate {rate} Hz is outside the supported "
                                         "range 8000..384000 Hz"):
        load_reference_audio((_voice(48000), rate))
    with pytest.raises(ValueError, match=f"target sample_rate {rate} Hz is outside"):
        load_reference_audio((_voice(48000), SR), sample_rate=rate)


def test_file_sample_rate_outside_the_range_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "low.wav"
    sf.write(path, _voice(4000), 4000)
    with pytest.raises(ValueError, match=r"reference audio '.*low\.wav' sample rate 4000 Hz is outside"):
        load_reference_audio(path)


def test_long_tuple_is_refused_or_trimmed() -> None:
    x = _voice(16000 * 61)
    with pytest.raises(ValueError, match=r"reference audio is 61\.0 s long; voice cloning takes at most 60 s .*"
                                         r"cut the clip and its transcript \(ref_text\)"):
        load_reference_audio((x, 16000))
    with pytest.warns(UserWarning, match=r"is 61\.0 s long; the speaker embedding uses its first 60 s"):
        got = load_reference_audio((x, 16000), trim=True)
    assert np.array_equal(got, load_reference_audio((x[:16000 * 60], 16000)))


def _long_file(tmp_path: Path, seconds: int, channels: int) -> tuple[Path, np.ndarray]:
    rate = 8000
    head = _voice(rate * 60 + 1000, channels)  # the first 60 s and a little more, then silence
    path = tmp_path / "long.wav"
    with sf.SoundFile(path, "w", rate, channels, "PCM_16") as f:
        f.write(head)
        f.write(np.zeros((rate * seconds - head.shape[0], channels), np.float32))
    return path, head


def test_long_file_is_refused_before_reading(tmp_path: Path) -> None:
    import tracemalloc

    path, _ = _long_file(tmp_path, 600, 4)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"'.*long\.wav' is 600\.0 s long; voice cloning takes at most 60 s"):
            load_reference_audio(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_long_file_trimmed_in_bounded_memory(tmp_path: Path) -> None:
    """A 10-minute 4-channel file (77 MB as float32) is read only to 60 s, a block at a time."""
    import tracemalloc

    path, head = _long_file(tmp_path, 600, 4)
    want = load_reference_audio((sf.read(path, frames=8000 * 60, dtype="float32")[0], 8000))
    tracemalloc.start()
    try:
        with pytest.warns(UserWarning, match=r"is 600\.0 s long; the speaker embedding uses its first 60 s"):
            got = load_reference_audio(path, trim=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, want)
    assert got.shape == (SR * 60,)
    assert peak < 8 * got.nbytes, (peak, got.nbytes)  # the whole-file read peaked at 17x


def test_file_of_exactly_the_limit_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "sixty.wav"
    sf.write(path, _voice(8000 * 60), 8000)
    assert load_reference_audio(path).shape == (SR * 60,)
