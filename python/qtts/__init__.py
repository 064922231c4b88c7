"""qtts: Qwen3-TTS text-to-speech on ggml."""
from __future__ import annotations

from ._native import core as _core
from .inspect import ModelInfo, inspect
from .model import Model, load

__all__ = ["Model", "ModelInfo", "inspect", "load"]
__version__ = "0.1.0"
