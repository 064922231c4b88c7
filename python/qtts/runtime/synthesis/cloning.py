"""From a reference clip to a Voice: the speaker encoder (x-vector) and, for ICL cloning, the
codec encoder (reference codes), with the on-disk embedding cache in front of both."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..audio.mel import log_mel_spectrogram
from ..audio.refaudio import AudioSource, audio_fingerprint, load_reference_audio
from ..audio.voice import Voice, VoiceCache
from ..engine.context import ModelContext

# The speaker encoder's reflect pads need > 384 samples and >= 5 mel frames (docs/model.md, "Speaker encoder").
MIN_REFERENCE_SAMPLES = 5 * 256


@dataclass
class CloneTimings:
    speaker_encode_ms: float = 0.0
    codec_encode_ms: float = 0.0
    cache: str = "off"  # "hit", "miss" or "off"


def reference_samples(ctx: ModelContext, ref_audio: AudioSource | np.ndarray, *, trim: bool = False) -> np.ndarray:
    """24 kHz mono float32 samples of a path, a (samples, rate) tuple or a 24 kHz array, at most
    refaudio.MAX_REFERENCE_SECONDS long: a longer clip is refused, or with `trim` cut with a
    warning (only for the speaker embedding: an ICL prompt's transcript must match its audio)."""
    if isinstance(ref_audio, np.ndarray):
        ref_audio = (ref_audio, ctx.sample_rate)
    return load_reference_audio(ref_audio, sample_rate=ctx.sample_rate, min_samples=MIN_REFERENCE_SAMPLES,
                                trim=trim)


def speaker_embedding(ctx: ModelContext, wav: np.ndarray) -> np.ndarray:
    if ctx.mel_dim is None:
        raise ValueError(f"a speaker embedding needs a base model; this one is {ctx.variant!r}")
    mel = log_mel_spectrogram(wav, sample_rate=ctx.sample_rate, n_mels=ctx.mel_dim)
    with ctx.engine.session() as s:
        return s.speaker_embed(mel)


def encode(ctx: ModelContext, wav: np.ndarray) -> np.ndarray:
    with ctx.engine.session() as s:
        return s.encode(wav)


def create_voice(ctx: ModelContext, ref_audio: AudioSource | np.ndarray, ref_text: str | None,
                 x_vector_only_mode: bool) -> tuple[Voice, CloneTimings]:
    """A voice from a reference clip, and what making it took; through ctx's voice cache."""
    ctx.engine.require_open()
    if ctx.variant != "base":
        raise ValueError(f"voice cloning needs a base model; this one is {ctx.variant!r}")
    if x_vector_only_mode:
        ref_text = None
    else:
        if ref_text is None or not str(ref_text).strip():
            raise ValueError("in-context (ICL) cloning needs ref_text, the transcript of ref_audio; give it, or use "
                             "x_vector_only_mode=True (--x-vector-only) to clone from the speaker embedding alone")
        ctx.tokenizer.ref_prompt_ids(ref_text)  # fail now, not at the first synthesis
    wav = reference_samples(ctx, ref_audio, trim=x_vector_only_mode)
    t = CloneTimings()
    cache = ctx.voice_cache
    key = None
    if cache is not None:
        key = VoiceCache.key(ctx.fingerprint, audio_fingerprint(wav, ctx.sample_rate), x_vector_only_mode)
        hit = cache.get(key)
        if hit is not None and hit.model_fingerprint == ctx.fingerprint:
            t.cache = "hit"
            return Voice(hit.x_vector, hit.ref_codes, ref_text, hit.model_fingerprint), t
        t.cache = "miss"
    t0 = time.perf_counter()
    x_vector = speaker_embedding(ctx, wav)
    t1 = time.perf_counter()
    codes = None if x_vector_only_mode else encode(ctx, wav)
    t.speaker_encode_ms = (t1 - t0) * 1e3
    t.codec_encode_ms = (time.perf_counter() - t1) * 1e3
    # a later hit keeps the encodings and takes its caller's transcript (the key has no text)
    voice = Voice(x_vector, codes, ref_text, ctx.fingerprint)
    if cache is not None and key is not None:
        cache.put(key, voice)
    return voice, t
