"""Word timestamps with Qwen3-ForcedAligner (docs/aligner.md): `qtts.load_aligner` and
`Aligner.align(audio, text, language)`.

The front ends are the reference's (qwen-asr 0.0.6, Qwen3ForcedAligner.align): the audio as mono
16 kHz float32 in [-1, 1], its Whisper log-mel; the words (runtime/text/words.py) in the prompt
<|audio_start|> + one <|audio_pad|> per encoder row + <|audio_end|> + each word's tokens followed
by two <timestamp> slots; the class the decoder picks at each slot times the class's span, then
the monotonic repair. The networks run natively (runtime/aligner/aligner_engine.py).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from ...threads import resolve_threads
from ..audio.mel import whisper_log_mel
from ..audio.refaudio import _check_range, _check_rate, _mixdown, _resample, _to_float32
from ..engine.engine import check_gguf_path
from ..settings.options import LoadOptions
from ..text.tokenizer import Tokenizer, TokenizerData
from ..text.words import Word, split_words, words_from_classes
from .aligner_engine import ARCHITECTURE, AlignerEngine, file_architecture

# The longest audio aligned at once: the reference's own limit for its aligner
# (qwen_asr.inference.utils.MAX_FORCE_ALIGN_INPUT_SECONDS); longer recordings are aligned in parts.
MAX_SECONDS = 180.0


@dataclass(frozen=True)
class AlignTimings:
    """Where an alignment's time went, in ms: the log-mel and the prompt on the host, the audio
    encoder, the decoder, the repair."""

    front_ms: float
    encoder_ms: float
    decoder_ms: float
    repair_ms: float

    @property
    def total_ms(self) -> float:
        return self.front_ms + self.encoder_ms + self.decoder_ms + self.repair_ms


def _audio(audio: Any, rate: int) -> np.ndarray:
    """Mono float32 at `rate` in [-1, 1] (a louder clip scaled down to peak 1), as the reference
    normalises its inputs. `audio`: a qtts Audio, a (samples, sample_rate) tuple, or a file path."""
    label = "audio"
    if hasattr(audio, "samples") and hasattr(audio, "sample_rate"):  # qtts.Audio
        audio = (np.asarray(audio.samples), audio.sample_rate)
    if isinstance(audio, tuple):
        if len(audio) != 2 or not isinstance(audio[0], np.ndarray):
            raise ValueError("audio tuple must be (samples as a numpy array, sample_rate)")
        src_rate = _check_rate(audio[1], "audio sample rate")
        _check_range(src_rate, "audio sample rate")
        raw = audio[0]
        if raw.ndim == 2 and raw.shape[1] > raw.shape[0] > 0:
            raise ValueError(f"audio has shape {raw.shape}: 2-D audio is read as (samples, channels); this looks "
                             "like (channels, samples), transpose it")
        samples = _mixdown(_to_float32(raw), label)
    elif isinstance(audio, (str, os.PathLike)):
        path = os.fspath(audio)
        label = f"audio {path!r}"
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{label}: no such file")
        try:
            with sf.SoundFile(path) as f:
                src_rate = int(f.samplerate)
                _check_range(src_rate, f"{label} sample rate")
                if f.frames > MAX_SECONDS * src_rate:
                    raise ValueError(f"{label} is {f.frames / src_rate:.1f} s long; the aligner takes at most "
                                     f"{MAX_SECONDS:.0f} s at once: align it in parts")
                samples = _mixdown(f.read(dtype="float32", always_2d=True), label)
        except (sf.SoundFileError, RuntimeError, TypeError) as e:
            raise ValueError(f"{label} cannot be read as audio: {e}") from e
    else:
        raise TypeError(f"audio must be a qtts.Audio, a (samples, sample_rate) tuple or a file path, "
                        f"got {type(audio).__name__}")
    if samples.ndim != 1:
        raise ValueError(f"{label} must be 1-D (samples) or 2-D (samples, channels)")
    if samples.shape[0] > MAX_SECONDS * src_rate:
        raise ValueError(f"{label} is {samples.shape[0] / src_rate:.1f} s long; the aligner takes at most "
                         f"{MAX_SECONDS:.0f} s at once: align it in parts")
    if not np.all(np.isfinite(samples)):
        raise ValueError(f"{label} contains NaN or infinite samples")
    out = _resample(samples, src_rate, rate).astype(np.float32)
    peak = float(np.max(np.abs(out))) if out.size else 0.0
    if peak > 1.0:
        out = out / np.float32(peak)
    return np.clip(out, -1.0, 1.0)


class Aligner:
    """A loaded Qwen3-ForcedAligner (`qtts.load_aligner`). close() (or `with`) frees it at once."""

    def __init__(self, path: str | os.PathLike[str], *, n_threads: int | None = None, device: str = "auto",
                 ops: str = "auto", precision: str = "auto") -> None:
        """ops: "native" (the decoder attends through the fused CPU op; the CPU's default) or
        "portable" (stock ggml ops, any device); precision as qtts.load's."""
        self.path = Path(path)
        check_gguf_path(self.path)
        LoadOptions(n_threads=n_threads, device=device, ops=ops, precision=precision)  # their declared checks
        if file_architecture(str(self.path)) not in ("", ARCHITECTURE):
            raise ValueError(f"{self.path} is not a forced aligner: load a text-to-speech model with qtts.load")
        self.engine = AlignerEngine(str(self.path), device, resolve_threads(n_threads), ops, precision)
        self.tokenizer = Tokenizer.from_data(TokenizerData(*self.engine.read_tokenizer()))
        enc = self.engine.hparams["audio_encoder"]
        self.sample_rate = int(enc["sample_rate"])
        self._mel = {"sample_rate": self.sample_rate, "n_fft": int(enc["n_fft"]), "hop": int(enc["hop_length"]),
                     "n_mels": int(enc["mel_bins"])}
        self.ids = self.engine.ids
        self.last_timings: AlignTimings | None = None

    @property
    def languages(self) -> list[str]:
        """The languages the checkpoint names (lower case)."""
        return [s.lower() for s in self.engine.languages]

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> Aligner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_language(self, language: str | None) -> None:
        if language is None:
            return
        if not isinstance(language, str):
            raise TypeError(f"language must be a str, got {type(language).__name__}")
        if self.languages and language.lower() not in self.languages and language.lower() != "auto":
            raise ValueError(f"language {language!r} is not one of this aligner's: {', '.join(self.languages)}")

    def prompt(self, words: list[str], n_audio: int) -> list[int]:
        """The token ids of the reference's prompt for `words` and n_audio encoder rows."""
        ids = [self.ids["audio_start"], *([self.ids["audio_pad"]] * n_audio), self.ids["audio_end"]]
        slots = [self.ids["timestamp"]] * 2
        for w in words:
            ids += self.tokenizer.encode(w) + slots
        return ids

    def align(self, audio: Any, text: str | list[str], language: str | None = None) -> list[Word]:
        """The words of `text` as spoken in `audio`, each with its start and end in seconds
        (Word). audio: a qtts.Audio, a (samples, sample_rate) tuple or a file path, at most
        MAX_SECONDS long. text: what is said; words are split as the reference splits them
        (runtime/text/words.py), or given as a list of words (Japanese and Korean need that).
        language: one of `languages` or None; it decides only the splitting."""
        self.engine.require_open()
        self._check_language(language)
        words = split_words(text, language)
        samples = _audio(audio, self.sample_rate)
        if not words:
            return []
        t0 = time.perf_counter()
        mel = whisper_log_mel(samples, **self._mel)
        t1 = time.perf_counter()
        rows = self.engine.encode(mel)
        t2 = time.perf_counter()
        ids = self.prompt(words, rows.shape[0])
        t3 = time.perf_counter()
        logits = self.engine.timestamp_logits(ids, rows)
        t4 = time.perf_counter()
        out = words_from_classes(words, np.argmax(logits, axis=-1).tolist(), self.engine.segment_ms)
        t5 = time.perf_counter()
        self.last_timings = AlignTimings((t1 - t0 + t3 - t2) * 1e3, (t2 - t1) * 1e3, (t4 - t3) * 1e3, (t5 - t4) * 1e3)
        return out


def load_aligner(model: str | os.PathLike[str], *, convert_type: str = "q8_0", **kwargs: Any) -> Aligner:
    """An Aligner from a converted .gguf file or a Hugging Face repo id (Qwen/Qwen3-ForcedAligner-0.6B:
    downloaded and converted once to `convert_type`, as qtts.load does). Other keyword arguments
    as Aligner's."""
    from ...convert.registry import cache_dir, fetch, is_repo_id

    path = fetch(str(model), cache_dir(), convert_type) if is_repo_id(model) else model
    return Aligner(path, **kwargs)


def open_aligner(opts: LoadOptions) -> tuple[Aligner | None, bool]:
    """A model's load option `aligner` (word timestamps): (None, False) without one; a qtts.Aligner
    as given, (aligner, False), the caller's to close; a path or repo id loaded with the model's
    threads, device, ops and precision, (aligner, True), closed with the model."""
    value = opts.aligner
    if value is None:
        return None, False
    if not isinstance(value, (str, os.PathLike)):
        return value, False
    return load_aligner(value, n_threads=opts.n_threads, device=opts.device, ops=opts.ops,
                        precision=opts.precision), True
