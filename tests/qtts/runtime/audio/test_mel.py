"""qtts.runtime.audio.mel against librosa's filterbank and the reference's own mel_spectrogram."""
from __future__ import annotations

from typing import Callable

import librosa
import numpy as np
import pytest

from qtts.runtime.audio.mel import log_mel_spectrogram, slaney_mel_filters
from tests.conftest import _need_reference

SR = 24000
LENGTHS = [385, 1280, 24000, 24000 * 3 + 17]  # 385: the shortest the reflect pad accepts


@pytest.mark.parametrize("sr,n_fft,n_mels,fmin,fmax", [
    (24000, 1024, 128, 0, 12000),  # the speaker encoder's
    (16000, 512, 80, 0, 8000),
    (22050, 1024, 80, 55.0, None),  # log-region fmin, fmax defaulting to Nyquist
])
def test_filters_match_librosa(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None) -> None:
    ours = slaney_mel_filters(sr, n_fft, n_mels, fmin, fmax)
    ref = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax)
    assert ours.shape == ref.shape == (n_mels, n_fft // 2 + 1)
    assert ours.dtype == np.float32
    assert np.abs(ours - ref).max() <= 1e-6 * ref.max()


def test_filters_are_cached_and_read_only() -> None:
    a = slaney_mel_filters(SR, 1024, 128, 0.0, 12000.0)
    assert slaney_mel_filters(SR, 1024, 128, 0.0, 12000.0) is a
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 1.0


@pytest.mark.parametrize("args", [(SR, 1024, 0, 0.0, 12000.0), (SR, 1024, 128, 12000.0, 12000.0),
                                  (SR, 1024, 128, -1.0, 12000.0)])
def test_filters_reject_bad_parameters(args: tuple) -> None:
    with pytest.raises(ValueError):
        slaney_mel_filters(*args)


@pytest.fixture(scope="module")
def reference_mel() -> Callable[[np.ndarray], np.ndarray]:
    """The reference's mel_spectrogram called as extract_speaker_embedding calls it, [T, 128]."""
    _need_reference()
    import torch
    from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram

    def run(audio: np.ndarray) -> np.ndarray:
        mels = mel_spectrogram(torch.from_numpy(audio).unsqueeze(0), n_fft=1024, num_mels=128,
                               sampling_rate=24000, hop_size=256, win_size=1024, fmin=0,
                               fmax=12000).transpose(1, 2)
        return mels[0].numpy()

    return run


def _noise(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    return np.clip(0.3 * rng.standard_normal(n), -1.0, 1.0).astype(np.float32)


def _sweep(n: int) -> np.ndarray:
    # Linear chirp 50 Hz -> 11 kHz over the clip: every mel band is crossed.
    t = np.arange(n) / SR
    phase = 50.0 * t + (11000.0 - 50.0) / (2.0 * t[-1]) * t * t
    return (0.5 * np.sin(2.0 * np.pi * phase)).astype(np.float32)


@pytest.mark.parametrize("n", LENGTHS)
def test_log_mel_matches_reference_on_noise(reference_mel, n: int) -> None:
    x = _noise(n)
    ref, ours = reference_mel(x), log_mel_spectrogram(x)
    assert ours.shape == ref.shape == (n // 256, 128)
    assert ours.dtype == np.float32 and ours.flags.c_contiguous
    assert np.abs(ours - ref).max() <= 1e-4


@pytest.mark.parametrize("n", LENGTHS)
def test_log_mel_matches_reference_on_sweep(reference_mel, n: int) -> None:
    x = _sweep(n)
    ref, ours = reference_mel(x).astype(np.float64), log_mel_spectrogram(x).astype(np.float64)
    assert ours.shape == ref.shape == (n // 256, 128)
    # A pure tone leaves bins ~100 dB below the frame's peak, where the reference's float32 (MKL)
    # STFT round-off, ~1e-7 of the peak, dominates. Within 60 dB of the peak the logs agree
    # tightly; everywhere, the linear mel energies agree to float32 round-off of the peak.
    peak = ours.max(axis=1, keepdims=True)
    loud = ours >= peak - 3.0 * np.log(10.0)
    assert np.abs(ours - ref)[loud].max() <= 1e-4
    assert (np.abs(np.exp(ours) - np.exp(ref)) / np.exp(peak)).max() <= 1e-6


def test_too_short_is_rejected_like_the_reference(reference_mel) -> None:
    x = _noise(384)
    with pytest.raises(ValueError, match="too short"):
        log_mel_spectrogram(x)
    with pytest.raises(RuntimeError):  # torch's reflect pad refuses it too
        reference_mel(x)


def test_rejects_non_mono_and_integer_input() -> None:
    with pytest.raises(ValueError, match="1-D"):
        log_mel_spectrogram(np.zeros((2, 4800), np.float32))
    with pytest.raises(ValueError, match="floating point"):
        log_mel_spectrogram(np.zeros(4800, np.int16))
