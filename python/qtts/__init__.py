"""qtts: Qwen3-TTS text-to-speech on ggml.

The names below are the public API (docs/python.md); the modules under qtts.runtime are internals.
"""
from __future__ import annotations

from typing import Any

from .convert.info import ModelInfo, inspect
from .errors import QttsError
from .runtime.aligner.aligner import Aligner, load_aligner
from .runtime.audio.audio import Audio, AudioChunk, Timings, pcm16
from .runtime.audio.voice import Voice
from .runtime.model.model import Model, load
from .runtime.scheduling.scheduler import Scheduler
from .runtime.settings.config import GenerationConfig
from .runtime.synthesis.speech import Progress
from .runtime.text.text import split_text
from .runtime.text.words import Word

__all__ = ["Aligner", "Audio", "AudioChunk", "GenerationConfig", "Model", "ModelInfo", "Progress", "QttsError",
           "Scheduler", "Timings", "Voice", "Word", "inspect", "load", "load_aligner", "pcm16", "serve_app",
           "split_text"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """qtts.serve_app (server/ray_serve.py), imported on first use: it needs the serve extra."""
    if name == "serve_app":
        from .server.ray_serve import serve_app

        return serve_app
    raise AttributeError(f"module 'qtts' has no attribute {name!r}")
