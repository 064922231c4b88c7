"""qtts: Qwen3-TTS text-to-speech on ggml."""
from __future__ import annotations

from .runtime.audio import Audio, AudioChunk, Timings
from .convert.info import ModelInfo, inspect
from .errors import QttsError
from .runtime.config import GenerationConfig
from .runtime.model import Model, load
from .runtime.text import split_text
from .runtime.voice import Voice

__all__ = ["Audio", "AudioChunk", "GenerationConfig", "Model", "ModelInfo", "QttsError", "Timings", "Voice", "inspect",
           "load", "split_text"]
__version__ = "0.1.0"
