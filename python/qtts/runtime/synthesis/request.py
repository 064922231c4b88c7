"""A synthesis request, checked and resolved once: the one builder that Model's methods and the
Scheduler use (docs/architecture.md, "Request pipeline")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..audio.timestamps import WordTiming
from ..engine.context import ModelContext
from ..settings.config import SETTINGS, GenerationConfig
from ..settings.generation import check_text
from ..settings.options import RequestOptions
from ..text.text import text_pieces
from . import cloning
from .cloning import CloneTimings
from .prompt import Conditioning, resolve_voice

# build_request's text for Model.stream_text, whose text arrives later (None is a caller's mistake)
STREAMED_TEXT = object()


@dataclass
class Request:
    """One synthesis request, validated once and reused for every text piece."""
    pieces: list[str]  # empty for streamed text: its pieces come as it arrives
    cond: Conditioning
    config: GenerationConfig  # the request's; each piece runs config.for_piece(index, text)
    non_streaming_mode: bool
    clone_timings: CloneTimings | None = None  # set when the request encoded a reference clip
    timestamps: WordTiming | None = None  # word_timestamps: how its words are timed (timestamps.py)


def default_non_streaming_mode(variant: str) -> bool:
    """The reference's defaults: generate_custom_voice and generate_voice_design prefill the whole
    text (True), generate_voice_clone streams it in with the frames (False)."""
    return variant != "base"


def check_setting_names(sampling: dict[str, Any]) -> None:
    unknown = set(sampling) - set(SETTINGS)
    if unknown:
        raise TypeError(f"unexpected argument(s) {', '.join(sorted(unknown))}; sampling settings are "
                        f"{', '.join(SETTINGS)}")


def build_request(ctx: ModelContext, text: str | object, opts: RequestOptions,
                  sampling: dict[str, Any] | None = None) -> Request:
    """A request's text, options (checked when they were packed) and settings as a Request: a
    reference clip turned into a voice (through the voice cache), the text split into pieces, the
    settings resolved against the model's defaults. text STREAMED_TEXT: the pieces come later
    (stream_text)."""
    ctx.engine.require_open()
    settings = {} if sampling is None else sampling
    check_setting_names(settings)
    if text is not STREAMED_TEXT:
        check_text(text)
    streamed = text is STREAMED_TEXT
    pieces = [] if streamed else text_pieces(str(text), opts.split_sentences)
    # before any work: an aligner is there, and the text splits into words
    timing = WordTiming.of(ctx.aligner, opts.language, pieces) if opts.word_timestamps else None
    voice, clone = opts.voice, None
    if opts.ref_audio is not None:
        if voice is not None:
            raise ValueError("pass either voice or ref_audio, not both")
        voice, clone = cloning.create_voice(ctx, opts.ref_audio, opts.ref_text, opts.x_vector_only_mode)
    elif opts.ref_text is not None or opts.x_vector_only_mode:
        raise ValueError("ref_text and x_vector_only_mode go with ref_audio")
    cond = resolve_voice(ctx, language=opts.language, speaker=opts.speaker, instruct=opts.instruct, voice=voice)
    config = GenerationConfig.resolve(dict(ctx.defaults), settings, opts.seed, opts.frame_budget)
    non_streaming_mode = opts.non_streaming_mode
    if non_streaming_mode is None:
        non_streaming_mode = default_non_streaming_mode(ctx.variant)
    return Request(pieces, cond, config, non_streaming_mode, clone, timing)
