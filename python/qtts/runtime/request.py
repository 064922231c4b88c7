"""A synthesis request, checked and resolved once: the one builder that Model's methods and the
Scheduler use (docs/architecture.md, "Request pipeline")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import cloning
from .cloning import AudioSource, CloneTimings
from .config import SETTINGS, GenerationConfig, check_bool
from .context import ModelContext
from .generation import check_text
from .prompt import Conditioning, resolve_voice
from .text import SplitSentences, text_pieces
from .voice import Voice

MAX_CHUNK_FRAMES = 4096  # the most frames a stream's chunk may take (first_chunk_frames, max_chunk_frames)
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


def default_non_streaming_mode(variant: str) -> bool:
    """The reference's defaults: generate_custom_voice and generate_voice_design prefill the whole
    text (True), generate_voice_clone streams it in with the frames (False)."""
    return variant != "base"


def check_setting_names(sampling: dict[str, Any]) -> None:
    unknown = set(sampling) - set(SETTINGS)
    if unknown:
        raise TypeError(f"unexpected argument(s) {', '.join(sorted(unknown))}; sampling settings are "
                        f"{', '.join(SETTINGS)}")


def check_request_args(speaker: Any, language: Any, instruct: Any, voice: Any, non_streaming_mode: Any) -> None:
    """Types of the conditioning arguments, before they reach the tokenizer or C++."""
    check_text(speaker, "speaker", optional=True, allow_empty=True)
    check_text(language, "language")
    check_text(instruct, "instruct", optional=True, allow_empty=True)
    if voice is not None and not isinstance(voice, Voice):
        raise TypeError(f"voice must be a qtts.Voice (from create_voice), got {type(voice).__name__}")
    if non_streaming_mode is not None:
        check_bool("non_streaming_mode", non_streaming_mode)


def build_request(ctx: ModelContext, text: str | object, *, speaker: str | None = None, language: str = "auto",
                  instruct: str | None = None, voice: Voice | None = None,
                  ref_audio: AudioSource | Any = None, ref_text: str | None = None,
                  x_vector_only_mode: bool = False, seed: int | None = None,
                  split_sentences: SplitSentences = "auto", frame_budget: int | str | None = "auto",
                  non_streaming_mode: bool | None = None, sampling: dict[str, Any] | None = None) -> Request:
    """Model.synthesize's (and stream's, and Scheduler.submit's) arguments as a Request: every
    argument checked, a reference clip turned into a voice (through the voice cache), the text
    split into pieces, the settings resolved against the model's defaults. text STREAMED_TEXT:
    the pieces come later (stream_text)."""
    ctx.engine.require_open()
    settings = {} if sampling is None else sampling
    check_setting_names(settings)
    if text is not STREAMED_TEXT:
        check_text(text)
    check_request_args(speaker, language, instruct, voice, non_streaming_mode)
    check_text(ref_text, "ref_text", optional=True, allow_empty=True)
    check_bool("x_vector_only_mode", x_vector_only_mode)
    clone = None
    if ref_audio is not None:
        if voice is not None:
            raise ValueError("pass either voice or ref_audio, not both")
        voice, clone = cloning.create_voice(ctx, ref_audio, ref_text, x_vector_only_mode)
    elif ref_text is not None or x_vector_only_mode:
        raise ValueError("ref_text and x_vector_only_mode go with ref_audio")
    cond = resolve_voice(ctx, language=language, speaker=speaker, instruct=instruct, voice=voice)
    config = GenerationConfig.resolve(dict(ctx.defaults), settings, seed, frame_budget)
    streamed = text is STREAMED_TEXT
    pieces = text_pieces("x" if streamed else str(text), split_sentences)  # validates split_sentences too
    if non_streaming_mode is None:
        non_streaming_mode = default_non_streaming_mode(ctx.variant)
    return Request([] if streamed else pieces, cond, config, non_streaming_mode, clone)
