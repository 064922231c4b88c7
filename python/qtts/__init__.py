"""qtts: Qwen3-TTS text-to-speech on ggml."""
from __future__ import annotations

from ._native import core as _core
from .audio import Audio, AudioChunk, Timings
from .inspect import ModelInfo, inspect
from .model import Model, load
from .text import split_text
from .voice import Voice

__all__ = ["Audio", "AudioChunk", "Model", "ModelInfo", "Timings", "Voice", "inspect", "load", "split_text"]
__version__ = "0.1.0"
