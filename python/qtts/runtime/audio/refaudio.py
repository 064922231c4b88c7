"""Reference audio for voice cloning: read, validate, mix down to mono and resample.

Mirrors what qwen-tts does before `extract_speaker_embedding` (inference/qwen3_tts_model.py,
`_normalize_audio_inputs`, `_load_audio_to_np` and the librosa.resample call), but fails early
with a message that names the problem instead of crashing deep inside the speaker encoder.
"""
from __future__ import annotations

import hashlib
import math
import os
import warnings
from typing import Any, Tuple, Union

import numpy as np
import soundfile as sf
import soxr

AudioSource = Union[str, os.PathLike, Tuple[Any, Any]]

# Input rates accepted: telephone audio up to the highest common studio rate. Anything outside is
# a wrong argument (a rate of 1 would otherwise resample to billions of samples).
MIN_RATE, MAX_RATE = 8000, 384000
# The longest reference clip: a few to twenty seconds is what cloning wants; an ICL prompt
# carries 12.5 codec frames per second of it, so a 10-minute clip would be a 7500-frame prompt.
MAX_REFERENCE_SECONDS = 60
_BLOCK_VALUES = 1 << 20  # file reading block, in samples over all channels

# Full-scale divisors, the same conventions libsndfile uses when it reads PCM files as float,
# so a tuple of raw integer samples and the file they came from load identically.
_INT_SCALE: dict[np.dtype, float] = {
    np.dtype(np.int8): 128.0,
    np.dtype(np.int16): 32768.0,
    np.dtype(np.int32): 2.0**31,
}
_SILENCE_PEAK = 1e-6


def load_reference_audio(ref_audio: AudioSource, *, sample_rate: int = 24000, min_samples: int = 1280,
                         trim: bool = False) -> np.ndarray:
    """Mono float32 samples of `ref_audio` at `sample_rate`, C-contiguous.

    `ref_audio` is a path to any file soundfile reads, or a `(samples, sample_rate)` tuple whose
    samples are float or int8/int16/int32/uint8, 1-D, or 2-D laid out (samples, channels), at a
    rate in MIN_RATE..MAX_RATE Hz. A clip longer than MAX_REFERENCE_SECONDS is refused, or with
    `trim` cut to its first MAX_REFERENCE_SECONDS with a warning; a file is read only that far,
    in blocks, so memory stays bounded whatever its length or channel count.
    Raises ValueError (FileNotFoundError for a missing file) naming what is wrong.
    """
    target = _check_rate(sample_rate, "target sample_rate")
    _check_range(target, "target sample_rate")
    if isinstance(min_samples, bool) or not isinstance(min_samples, (int, np.integer)) or min_samples < 0:
        raise ValueError(f"min_samples must be a non-negative integer, got {min_samples!r}")
    if isinstance(ref_audio, tuple):
        label = "reference audio"
        samples, rate = _from_tuple(ref_audio, trim)
    elif isinstance(ref_audio, (str, os.PathLike)):
        path = os.fspath(ref_audio)
        label = f"reference audio {path!r}"
        samples, rate = _read_file(path, label, trim)
    else:
        raise ValueError("reference audio must be a file path or a (samples, sample_rate) tuple, "
                         f"got {type(ref_audio).__name__}")
    _check_content(samples, label)
    out = _resample(samples, rate, target)
    if out.shape[0] < min_samples:
        raise ValueError(
            f"{label} is too short: {out.shape[0] / target:.3f} s ({out.shape[0]} samples at "
            f"{target} Hz); the speaker encoder needs at least {min_samples / target:.3f} s "
            f"({min_samples} samples)")
    _warn_if_out_of_range(out, label)
    return np.ascontiguousarray(out, dtype=np.float32)


def audio_fingerprint(samples: np.ndarray, sample_rate: int) -> str:
    """sha256 hex digest of the samples (as float32 little-endian) and the rate: a cache key."""
    rate = _check_rate(sample_rate, "sample_rate")
    data = np.ascontiguousarray(samples, dtype="<f4")
    h = hashlib.sha256(data.tobytes())
    h.update(rate.to_bytes(8, "little"))
    return h.hexdigest()


def _check_rate(rate: Any, what: str) -> int:
    # Floats holding whole numbers (16000.0) are accepted; the reference silently truncates
    # anything else with int(), which would resample with the wrong ratio.
    if isinstance(rate, (bool, np.bool_)) or not isinstance(rate, (int, float, np.integer, np.floating)):
        raise ValueError(f"{what} must be a positive integer, got {rate!r}")
    if not math.isfinite(rate) or rate != int(rate) or rate <= 0:
        raise ValueError(f"{what} must be a positive integer, got {rate!r}")
    return int(rate)


def _check_range(rate: int, what: str) -> None:
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(f"{what} {rate} Hz is outside the supported range {MIN_RATE}..{MAX_RATE} Hz")


def _too_long(label: str, n: int | None, rate: int, trim: bool) -> None:
    """Raise for a clip over the limit, or warn that it is cut; `n` is its length when known."""
    length = f"{n / rate:.1f} s long" if n else f"longer than {MAX_REFERENCE_SECONDS} s"
    if trim:
        warnings.warn(f"{label} is {length}; the speaker embedding uses its first {MAX_REFERENCE_SECONDS} s",
                      UserWarning, stacklevel=2)
        return
    raise ValueError(f"{label} is {length}; voice cloning takes at most {MAX_REFERENCE_SECONDS} s (5-20 s is "
                     "typical). For in-context cloning cut the clip and its transcript (ref_text) to match; "
                     f"x_vector_only_mode uses the first {MAX_REFERENCE_SECONDS} s of a longer clip")


def _read_file(path: str | bytes, label: str, trim: bool) -> tuple[np.ndarray, int]:
    text = os.fsdecode(path)
    if text.lower().startswith(("http://", "https://")):
        raise ValueError(f"{label} is a URL; qtts runs offline: download the file first and pass "
                         "its local path")
    if text.startswith("data:"):
        raise ValueError("reference audio string is a data: URI (base64 audio); decode it and pass "
                         "a (samples, sample_rate) tuple or a file path instead")
    if not os.path.exists(path):
        if len(text) > 256 and "/" not in text and "\\" not in text:
            # The reference's own test for base64 audio.
            raise ValueError("reference audio string is not a file and looks like base64 audio; "
                             "decode it and pass a (samples, sample_rate) tuple or a file path")
        raise FileNotFoundError(f"{label}: no such file")
    if os.path.isdir(path):
        raise ValueError(f"{label} is a directory, not an audio file")
    try:
        with sf.SoundFile(path) as f:
            return _read_blocks(f, label, trim)
    except (sf.SoundFileError, RuntimeError, TypeError) as e:
        raise ValueError(f"{label} cannot be read as audio: {e}") from e


def _read_blocks(f: sf.SoundFile, label: str, trim: bool) -> tuple[np.ndarray, int]:
    rate = int(f.samplerate)
    _check_range(rate, f"{label} sample rate")
    limit = MAX_REFERENCE_SECONDS * rate
    known = f.frames if f.seekable() and f.frames > 0 else None  # unknown for pipes
    if known is not None and known > limit:
        _too_long(label, known, rate, trim)  # refused before reading anything
    # float32 like librosa.load in the reference: PCM is scaled to [-1, 1) by libsndfile. Each
    # block is mixed down at once (the mean is per frame, so blocks give the same values).
    parts, n = [], 0
    for block in f.blocks(blocksize=max(1, _BLOCK_VALUES // f.channels), dtype="float32", always_2d=True,
                          frames=limit + 1):
        parts.append(np.mean(block, axis=-1, dtype=np.float32) if f.channels > 1 else block[:, 0].copy())
        n += block.shape[0]
    if n > limit:
        if known is None:
            _too_long(label, None, rate, trim)
        parts[-1] = parts[-1][:parts[-1].shape[0] - (n - limit)]
    samples = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return samples, rate


def _from_tuple(item: tuple, trim: bool) -> tuple[np.ndarray, int]:
    if len(item) != 2:
        raise ValueError(f"reference audio tuple must be (samples, sample_rate), got {len(item)} items")
    raw, rate = item
    if not isinstance(raw, (np.ndarray, list)):
        raise ValueError("reference audio samples must be a numpy array or a list, "
                         f"got {type(raw).__name__}")
    rate = _check_rate(rate, "reference audio sample rate")
    _check_range(rate, "reference audio sample rate")
    if isinstance(raw, list):
        # A list carries no sample format, so its numbers are amplitudes, as soxr would read them.
        try:
            raw = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise ValueError(f"reference audio list is not numeric audio: {e}") from e
    if raw.ndim == 2 and raw.shape[1] > raw.shape[0] > 0:
        # The reference averages the LAST axis, so a (channels, samples) array would collapse to
        # a handful of samples; refuse it rather than guess. (Files always come (frames, channels).)
        raise ValueError(f"reference audio has shape {raw.shape}: 2-D audio is read as (samples, "
                         "channels); this looks like (channels, samples), transpose it")
    limit = MAX_REFERENCE_SECONDS * rate
    if raw.ndim >= 1 and raw.shape[0] > limit:
        _too_long("reference audio", raw.shape[0], rate, trim)
        raw = raw[:limit]
    return _mixdown(_to_float32(raw), "reference audio"), rate


def _to_float32(raw: np.ndarray) -> np.ndarray:
    if raw.dtype == np.uint8:
        return ((raw.astype(np.float32) - 128.0) / 128.0).astype(np.float32)
    if raw.dtype in _INT_SCALE:
        return (raw.astype(np.float64) / _INT_SCALE[raw.dtype]).astype(np.float32)
    if raw.dtype.kind == "f":
        return raw.astype(np.float32)
    raise ValueError(f"reference audio dtype {raw.dtype} is not supported: use float, int8, int16, "
                     "int32 or uint8 samples")


def _mixdown(samples: np.ndarray, label: str) -> np.ndarray:
    if samples.ndim == 1:
        return samples
    if samples.ndim != 2:
        raise ValueError(f"{label} must be 1-D (samples) or 2-D (samples, channels), "
                         f"got {samples.ndim} dimensions {samples.shape}")
    return np.mean(samples, axis=-1, dtype=np.float32)


def _check_content(samples: np.ndarray, label: str) -> None:
    if samples.size == 0:
        raise ValueError(f"{label} is empty (no samples)")
    if not np.all(np.isfinite(samples)):
        raise ValueError(f"{label} contains NaN or infinite samples")
    peak = float(np.max(np.abs(samples)))
    if peak < _SILENCE_PEAK:
        raise ValueError(f"{label} is silent (peak amplitude {peak:.3g}); a speaker embedding "
                         "needs speech")


def _resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    if rate == target:
        return samples
    # Same call and length fix-up as librosa.resample(res_type="soxr_hq"), which the reference uses.
    n_out = int(np.ceil(samples.shape[0] * (float(target) / rate)))
    out = soxr.resample(samples, rate, target, quality="HQ")
    if out.shape[0] >= n_out:
        return out[:n_out]
    return np.pad(out, (0, n_out - out.shape[0]))


def _warn_if_out_of_range(samples: np.ndarray, label: str) -> None:
    # The reference's mel front end only prints a warning for these and keeps the values.
    lo, hi = float(np.min(samples)), float(np.max(samples))
    if lo < -1.0 or hi > 1.0:
        warnings.warn(f"{label} has samples outside [-1, 1] (min {lo:.3f}, max {hi:.3f}); they are "
                      "kept as is, as the reference does", UserWarning, stacklevel=3)
