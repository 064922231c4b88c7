"""Log-mel front ends in numpy: the speaker encoder's and the forced aligner's.

`log_mel_spectrogram` reproduces qwen-tts's `mel_spectrogram` as `extract_speaker_embedding` calls
it (core/models/modeling_qwen3_tts.py): reflect pad (n_fft - hop) / 2, STFT with a periodic Hann
window and center=False, magnitude sqrt(re^2 + im^2 + 1e-9), Slaney mel filterbank (librosa's
default), natural log clamped at 1e-5. librosa is only needed to test this, not to run it.
`whisper_log_mel` reproduces the Whisper feature extractor that qwen-asr's aligner processor
uses (docs/aligner.md, "The prompt").
"""
from __future__ import annotations

import functools

import numpy as np

_MAG_EPS = 1e-9
_LOG_FLOOR = 1e-5

# Slaney's auditory-toolbox mel scale (librosa htk=False): linear below 1 kHz, log above.
_F_SP = 200.0 / 3.0
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    mel = hz / _F_SP
    log_part = hz >= _MIN_LOG_HZ
    mel[log_part] = _MIN_LOG_MEL + np.log(hz[log_part] / _MIN_LOG_HZ) / _LOGSTEP
    return mel


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    hz = mel * _F_SP
    log_part = mel >= _MIN_LOG_MEL
    hz[log_part] = _MIN_LOG_HZ * np.exp(_LOGSTEP * (mel[log_part] - _MIN_LOG_MEL))
    return hz


@functools.lru_cache(maxsize=16)
def slaney_mel_filters(sample_rate: int, n_fft: int, n_mels: int, fmin: float = 0.0,
                       fmax: float | None = None) -> np.ndarray:
    """Slaney-normalised triangular mel filters, [n_mels, n_fft // 2 + 1] float32, read-only.

    Equal to librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=fmin,
    fmax=fmax) with its defaults (htk=False, norm="slaney"). fmax None means sample_rate / 2.
    """
    if sample_rate <= 0 or n_fft <= 0 or n_mels <= 0:
        raise ValueError(f"sample_rate, n_fft and n_mels must be positive, got "
                         f"{sample_rate}, {n_fft}, {n_mels}")
    top = sample_rate / 2.0 if fmax is None else float(fmax)
    if not 0.0 <= fmin < top:
        raise ValueError(f"need 0 <= fmin < fmax, got fmin={fmin}, fmax={top}")
    fft_hz = np.fft.rfftfreq(n_fft, d=1.0 / sample_rate)
    # n_mels + 2 edges: filter i rises from edge i to edge i+1 and falls to edge i+2.
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array([fmin]))[0], _hz_to_mel(np.array([top]))[0],
                                   n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    # Slaney area normalisation: every filter carries about the same energy.
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    out = weights.astype(np.float32)
    out.flags.writeable = False  # shared through the cache
    return out


def _periodic_hann(n: int) -> np.ndarray:
    # torch.hann_window's default (periodic=True): the window of an n+1 point Hann minus its end.
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)


def log_mel_spectrogram(samples: np.ndarray, *, sample_rate: int = 24000, n_fft: int = 1024,
                        hop: int = 256, n_mels: int = 128, fmin: float = 0.0,
                        fmax: float = 12000.0) -> np.ndarray:
    """ln(max(mel · |STFT|, 1e-5)) as float32 [frames, n_mels], time-major.

    frames = (N + 2 * pad - n_fft) // hop + 1, i.e. N // hop for the defaults, with
    pad = (n_fft - hop) // 2 reflected samples on each side.
    """
    x = np.asarray(samples)
    if x.ndim != 1:
        raise ValueError(f"samples must be 1-D mono audio, got shape {x.shape}")
    if x.dtype.kind != "f":
        raise ValueError(f"samples must be floating point, got {x.dtype}")
    pad = (n_fft - hop) // 2
    if x.shape[0] <= pad or x.shape[0] + 2 * pad < n_fft:
        raise ValueError(f"audio too short for the mel front end: {x.shape[0]} samples, need more "
                         f"than {max(pad, n_fft - 2 * pad - 1)} (reflect pad of {pad})")
    # float64 throughout: the reference computes in float32, so this only removes rounding noise.
    padded = np.pad(x.astype(np.float64), pad, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop]
    spec = np.fft.rfft(frames * _periodic_hann(n_fft), axis=-1)
    mag = np.sqrt(spec.real**2 + spec.imag**2 + _MAG_EPS)
    mel = mag @ slaney_mel_filters(sample_rate, n_fft, n_mels, fmin, fmax).T.astype(np.float64)
    return np.ascontiguousarray(np.log(np.maximum(mel, _LOG_FLOOR)), dtype=np.float32)


def whisper_log_mel(samples: np.ndarray, *, sample_rate: int = 16000, n_fft: int = 400, hop: int = 160,
                    n_mels: int = 128) -> np.ndarray:
    """The Whisper feature extractor's log-mel as float32 [n_mels, frames], frames = N // hop.

    A centred STFT (reflect pad n_fft // 2 on each side, periodic Hann window), its power, the
    last frame dropped; Slaney mel filters up to sample_rate / 2; log10 clamped at 1e-10; floored
    at the whole clip's maximum minus 8; then (x + 4) / 4. Computed in float64: the reference's
    float32 differs by rounding only.
    """
    x = np.asarray(samples)
    if x.ndim != 1 or x.dtype.kind != "f":
        raise ValueError(f"samples must be 1-D floating-point mono audio, got {x.dtype} of shape {x.shape}")
    pad = n_fft // 2
    if x.shape[0] <= pad:
        raise ValueError(f"audio too short for the log-mel: {x.shape[0]} samples, need more than {pad} "
                         f"({pad / sample_rate * 1000:.1f} ms)")
    padded = np.pad(x.astype(np.float64), pad, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop][:-1]
    spec = np.fft.rfft(frames * _periodic_hann(n_fft), axis=-1)
    power = spec.real**2 + spec.imag**2
    mel = slaney_mel_filters(sample_rate, n_fft, n_mels).astype(np.float64) @ power.T
    log = np.log10(np.maximum(mel, 1e-10))
    log = np.maximum(log, log.max() - 8.0)
    return np.ascontiguousarray((log + 4.0) / 4.0, dtype=np.float32)
