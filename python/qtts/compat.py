"""The official qwen-tts method names and return shapes, for code written against it.

`generate_custom_voice` and `generate_voice_design` return `(list of float32 waveforms, sample_rate)`
and accept a single text or a list (each item synthesized in turn); language None means "auto".
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .model import Model


def _broadcast(name: str, value: Any, n: int) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} items but text has {n}")
        return list(value)
    return [value] * n


def _batch(model: Model, text: str | list[str], per_item: dict[str, Any], non_streaming_mode: bool,
           kwargs: dict[str, Any]) -> tuple[list[np.ndarray], int]:
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

    def generate_custom_voice(self: Model, text: str | list[str], speaker: str | list[str],  # type: ignore[misc]
                              language: str | list[str] | None = None, instruct: str | list[str] | None = None,
                              non_streaming_mode: bool = True, **kwargs: Any) -> tuple[list[np.ndarray], int]:
        return _batch(self, text, dict(speaker=speaker, language=language, instruct=instruct),
                      non_streaming_mode, kwargs)

    def generate_voice_design(self: Model, text: str | list[str], instruct: str | list[str],  # type: ignore[misc]
                              language: str | list[str] | None = None, non_streaming_mode: bool = True,
                              **kwargs: Any) -> tuple[list[np.ndarray], int]:
        return _batch(self, text, dict(instruct=instruct, language=language), non_streaming_mode, kwargs)

    def get_supported_speakers(self: Model) -> list[str]:  # type: ignore[misc]
        return sorted(self.speakers)

    def get_supported_languages(self: Model) -> list[str]:  # type: ignore[misc]
        return sorted(self.languages)
