"""Audio encoders for response_format, and speed.

pcm (s16le, 24 kHz mono) and wav stream as frames are generated (wav with a streaming header
whose sizes are 0xFFFFFFFF, as OpenAI sends it); flac, mp3 and opus (in Ogg) are written by
libsndfile through soundfile, aac (ADTS) by PyAV, each as one complete file
(docs/serving.md, "Server")."""
from __future__ import annotations

import io
import struct

import numpy as np

from ..runtime.audio.audio import pcm16, to_int16
from .errors import ApiError

STREAMED = ("pcm", "wav")
MEDIA_TYPES = {"pcm": "audio/pcm", "wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg",
               "opus": "audio/ogg", "aac": "audio/aac"}
_SOUNDFILE = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS")}
_UNKNOWN_SIZE = 0xFFFFFFFF


def wav_header(sample_rate: int, n_samples: int | None) -> bytes:
    """The 44-byte header of 16-bit mono PCM WAV; n_samples None: a stream of unknown length."""
    data = _UNKNOWN_SIZE if n_samples is None else 2 * n_samples
    riff = _UNKNOWN_SIZE if n_samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate,
                                                                        2 * sample_rate, 2, 16)
            + b"data" + struct.pack("<I", data))


def supported_formats() -> list[str]:
    """The response formats this installation can write."""
    import soundfile as sf

    have = sf.available_formats()
    out = ["wav", "pcm", *(f for f, (major, _) in _SOUNDFILE.items() if major in have)]
    try:
        import av  # noqa: F401
        out.append("aac")
    except ImportError:
        pass
    return out


def check_format(fmt: str) -> None:
    supported = supported_formats()
    if fmt not in supported:
        raise ApiError(400, f"response_format {fmt!r} is not available here; supported: {', '.join(supported)}",
                       param="response_format", code="unsupported_format")


def encode(samples: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """A complete file of `samples` (float32 mono) in response format `fmt`."""
    if fmt == "pcm":
        return pcm16(samples)
    if fmt == "wav":
        return wav_header(sample_rate, len(samples)) + pcm16(samples)
    if fmt == "aac":
        return _aac(samples, sample_rate)
    import soundfile as sf

    major, subtype = _SOUNDFILE[fmt]
    buf = io.BytesIO()
    # from the same 16-bit samples as pcm and wav, so that flac decodes to exactly those
    sf.write(buf, to_int16(samples), sample_rate, format=major, subtype=subtype)
    return buf.getvalue()


def _aac(samples: np.ndarray, sample_rate: int) -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="adts") as container:
        stream = container.add_stream("aac", rate=sample_rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(np.asarray(samples, dtype=np.float32)[None, :], format="fltp",
                                           layout="mono")
        frame.sample_rate = sample_rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return buf.getvalue()


def change_speed(samples: np.ndarray, sample_rate: int, speed: float) -> np.ndarray:
    """Faster or slower speech at the same pitch (pedalboard's time stretch); 1.0 leaves the
    samples untouched."""
    if speed == 1.0 or not len(samples):
        return samples
    import pedalboard

    out = pedalboard.time_stretch(np.asarray(samples, dtype=np.float32)[None, :], sample_rate,
                                  stretch_factor=float(speed))
    return np.ascontiguousarray(out[0], dtype=np.float32)
