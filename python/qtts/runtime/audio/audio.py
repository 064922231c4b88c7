"""Synthesis results: Audio (eager), AudioChunk (streamed) and their per-stage Timings."""
from __future__ import annotations

import errno
import io
import json
import os
import resource
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..text.words import Word


@dataclass
class Timings:
    """Where the time of one synthesis went. Per-frame figures are averages over the frames."""
    tokenize_ms: float = 0.0
    speaker_encode_ms: float = 0.0  # voice cloning from a reference clip (0 on a voice-cache hit)
    codec_encode_ms: float = 0.0
    voice_cache: str | None = None  # "hit", "miss" or "off" when a reference clip was given
    prompt_ms: float = 0.0
    prefill_ms: float = 0.0
    talker_ms_per_frame: float = 0.0
    predictor_ms_per_frame: float = 0.0
    vocoder_ms_per_frame: float = 0.0
    vocoder_threads: int = 0  # 0: serial; else the vocoder ran on this many threads beside the generation
    time_to_first_audio_ms: float | None = None
    total_ms: float = 0.0
    frames: int = 0
    audio_seconds: float = 0.0
    rtf: float = 0.0  # wall time / audio time
    peak_rss_mb: float = field(default_factory=lambda: peak_rss_mb())
    align_ms: float = 0.0  # word timestamps: the forced aligner's time, after the rest (not in total_ms)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def format(self) -> str:
        ttfa = "-" if self.time_to_first_audio_ms is None else f"{self.time_to_first_audio_ms:.0f} ms"
        rows = [("tokenize", f"{self.tokenize_ms:.1f} ms")]
        if self.voice_cache is not None:
            rows += [("speaker encode", f"{self.speaker_encode_ms:.1f} ms"),
                     ("codec encode", f"{self.codec_encode_ms:.1f} ms"), ("voice cache", self.voice_cache)]
        rows += [
            ("prompt", f"{self.prompt_ms:.1f} ms"),
            ("prefill", f"{self.prefill_ms:.1f} ms"),
            ("talker", f"{self.talker_ms_per_frame:.1f} ms/frame"),
            ("code predictor", f"{self.predictor_ms_per_frame:.1f} ms/frame"),
            ("vocoder", f"{self.vocoder_ms_per_frame:.1f} ms/frame"),
            ("pipeline", f"vocoder on {self.vocoder_threads} thread(s)" if self.vocoder_threads else "off (serial)"),
            ("first audio", ttfa), ("total", f"{self.total_ms:.0f} ms"),
            ("frames", f"{self.frames} ({self.audio_seconds:.2f} s of audio)"), ("RTF", f"{self.rtf:.2f}"),
            ("peak RSS", f"{self.peak_rss_mb:.0f} MB"),
        ]
        if self.align_ms:
            rows.append(("word timing", f"{self.align_ms:.0f} ms"))
        return "\n".join(f"{k:<15}{v}" for k, v in rows)


def peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


@dataclass
class Audio:
    samples: np.ndarray    # float32 mono in [-1, 1]
    sample_rate: int
    codes: np.ndarray      # [frames, 16] int32 codec codes
    stop_reason: str       # "eos", "max_new_tokens", "budget" or "cancelled"
    timings: Timings
    words: list[Word] | None = None  # word_timestamps=True: each word's span, seconds from the start

    @property
    def duration(self) -> float:
        return len(self.samples) / self.sample_rate

    def save(self, path: str | os.PathLike[str], subtype: str | None = None) -> Path:
        return save_audio(path, self.samples, self.sample_rate, subtype)


@dataclass
class AudioChunk:
    samples: np.ndarray    # float32 mono, the audio of `codes`
    sample_rate: int
    codes: np.ndarray      # [n, 16] codes this chunk decodes (empty for a pause between sentences)
    index: int
    stop_reason: str | None = None  # set on the last chunk of the stream
    piece_text: str | None = None  # on the chunk that ends a text piece: the piece's text
    # word_timestamps=True: on a chunk without audio after each piece's, the piece's words
    # (seconds from the stream's start, pauses included)
    words: list[Word] | None = None


def save_audio(path: str | os.PathLike[str], samples: np.ndarray, sample_rate: int,
               subtype: str | None = None) -> Path:
    """16-bit PCM WAV by default (the format every player takes); FLAC/OGG by extension.

    Atomic: written to a temporary file in the target folder and renamed, so `path` holds either
    its previous content or the whole new file, never a truncated one. OSError (FileNotFoundError,
    PermissionError, ...) says what went wrong and names the path.
    """
    from ...atomic import atomic_output, describe_os_error

    p = Path(path)
    fmt = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG"}.get(p.suffix.lower())
    if fmt is None:
        raise ValueError(f"{p}: unsupported audio extension {p.suffix!r} (use .wav, .flac or .ogg)")
    if subtype is None:
        subtype = {"WAV": "PCM_16", "FLAC": "PCM_16", "OGG": "VORBIS"}[fmt]
    if p.is_dir():
        raise IsADirectoryError(errno.EISDIR, f"cannot write {p}: it is a folder")
    # Encoded in memory first: soundfile reports any OS failure of its own writes as "System
    # error.", while Python's file writes below carry the errno (disk full, permission, ...).
    buf = io.BytesIO()
    write_audio(buf, samples, sample_rate, fmt, subtype)
    try:
        with atomic_output(p) as tmp, open(tmp, "wb") as f:
            f.write(buf.getbuffer())
    except OSError as e:
        raise type(e)(e.errno, describe_os_error(e, p)) from e
    return p


def write_audio(out: io.BytesIO, samples: np.ndarray, sample_rate: int, fmt: str, subtype: str) -> None:
    """`samples` encoded as a `fmt` file (soundfile's format and subtype names) into `out`.
    16-bit files get to_int16's samples: libsndfile's own float conversion scales by 32768 and
    rounds otherwise, which would make a WAV differ from the raw PCM of the same audio."""
    import soundfile as sf

    data = to_int16(samples) if subtype == "PCM_16" else np.asarray(samples, dtype=np.float32)
    sf.write(out, data, sample_rate, format=fmt, subtype=subtype)


def to_int16(samples: np.ndarray) -> np.ndarray:
    """The one float-to-16-bit conversion of every output (files, raw PCM, the server): clipped
    to [-1, 1], scaled by 32767 (so that +1 and -1 map to +-32767, symmetric), rounded half to
    even."""
    return np.rint(np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0) * np.float32(32767.0)).astype(np.int16)


def pcm16(samples: np.ndarray) -> bytes:
    """Little-endian signed 16-bit PCM (to_int16), as raw players (ffplay -f s16le, aplay -f S16_LE) expect."""
    return to_int16(samples).astype("<i2").tobytes()
