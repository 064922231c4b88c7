"""The official qwen-tts method names and return shapes, for code written against it.

`generate_custom_voice`, `generate_voice_design` and `generate_voice_clone` return `(list of float32
waveforms, sample_rate)` and accept a single text or a list (each item synthesized in turn);
language None means "auto", non_streaming_mode None the reference's default for the model's
variant (True for generate_custom_voice and generate_voice_design, False for
generate_voice_clone). `create_voice_clone_prompt` returns a list of qtts.Voice, which
`generate_voice_clone(voice_clone_prompt=...)` takes back.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..audio.audio import Audio
from ..audio.voice import Voice


class _Facade(Protocol):
    """What the qwen-tts names use of qtts.Model, which mixes them in."""

    @property
    def sample_rate(self) -> int: ...

    @property
    def speakers(self) -> list[str]: ...

    @property
    def languages(self) -> list[str]: ...

    def synthesize(self, text: str, **kwargs: Any) -> Audio: ...

    def create_voice(self, ref_audio: Any, ref_text: str | None = None, *,
                     x_vector_only_mode: bool = False) -> Voice: ...


def _broadcast(name: str, value: Any, n: int) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} items but text has {n}")
        return list(value)
    return [value] * n


def _batch(model: _Facade, text: str | list[str], per_item: dict[str, Any], non_streaming_mode: bool | None,
           kwargs: dict[str, Any]) -> tuple[list[np.ndarray], int]:
    if not isinstance(text, (str, list, tuple)):
        raise TypeError(f"text must be a str or a list of str, got {type(text).__name__}")
    texts = [text] if isinstance(text, str) else list(text)
    if not texts:
        raise ValueError("text is empty")
    items = {k: _broadcast(k, v, len(texts)) for k, v in per_item.items()}
    wavs = []
    for i, t in enumerate(texts):
        args = {k: v[i] for k, v in items.items()}
        args["language"] = args.get("language") or "auto"
        wavs.append(model.synthesize(t, non_streaming_mode=non_streaming_mode, **args, **kwargs).samples)
    return wavs, model.sample_rate


class QwenTTSCompat:
    """Mixed into qtts.Model."""

    def generate_custom_voice(self: _Facade, text: str | list[str], speaker: str | list[str],  # type: ignore[misc]
                              language: str | list[str] | None = None, instruct: str | list[str] | None = None,
                              non_streaming_mode: bool | None = None, **kwargs: Any) -> tuple[list[np.ndarray], int]:
        return _batch(self, text, dict(speaker=speaker, language=language, instruct=instruct),
                      non_streaming_mode, kwargs)

    def generate_voice_design(self: _Facade, text: str | list[str], instruct: str | list[str],  # type: ignore[misc]
                              language: str | list[str] | None = None, non_streaming_mode: bool | None = None,
                              **kwargs: Any) -> tuple[list[np.ndarray], int]:
        return _batch(self, text, dict(instruct=instruct, language=language), non_streaming_mode, kwargs)

    def create_voice_clone_prompt(self: _Facade, ref_audio: Any, ref_text: str | list[str | None] | None = None,  # type: ignore[misc]
                                  x_vector_only_mode: bool | list[bool] = False) -> list[Voice]:
        audios = ref_audio if isinstance(ref_audio, list) else [ref_audio]
        texts = _broadcast("ref_text", ref_text, len(audios))
        modes = _broadcast("x_vector_only_mode", x_vector_only_mode, len(audios))
        return [self.create_voice(a, t, x_vector_only_mode=bool(x))
                for a, t, x in zip(audios, texts, modes, strict=True)]

    def generate_voice_clone(self: _Facade, text: str | list[str],  # type: ignore[misc]
                             language: str | list[str] | None = None, ref_audio: Any = None,
                             ref_text: str | list[str | None] | None = None,
                             x_vector_only_mode: bool | list[bool] = False,
                             voice_clone_prompt: Voice | list[Voice] | None = None,
                             non_streaming_mode: bool | None = None,
                             **kwargs: Any) -> tuple[list[np.ndarray], int]:
        if voice_clone_prompt is None:
            if ref_audio is None:
                raise ValueError("either voice_clone_prompt or ref_audio must be provided")
            voices = self.create_voice_clone_prompt(ref_audio, ref_text, x_vector_only_mode)
        else:
            voices = voice_clone_prompt if isinstance(voice_clone_prompt, list) else [voice_clone_prompt]
        n = 1 if isinstance(text, str) else len(text)
        if len(voices) == 1:
            voices = voices * n
        return _batch(self, text, dict(voice=voices, language=language), non_streaming_mode, kwargs)

    def get_supported_speakers(self: _Facade) -> list[str]:  # type: ignore[misc]
        return sorted(self.speakers)

    def get_supported_languages(self: _Facade) -> list[str]:  # type: ignore[misc]
        return sorted(self.languages)
