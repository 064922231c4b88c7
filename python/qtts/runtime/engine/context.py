"""What the request helpers need to know about a loaded model, gathered once at load.

Model builds one ModelContext and hands it to request.py, prompt.py, cloning.py, speech.py,
speech_text.py and the Scheduler, which never see the Model facade (docs/architecture.md,
"Layers"). It is immutable: the metadata is read from the engine once, and the engine is the
only thing in it that computes.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from ..audio.timestamps import Aligns
from ..audio.voice import VoiceCache, model_fingerprint
from ..text.tokenizer import Tokenizer
from .engine import Engine


def supported_languages(table: Mapping[str, int]) -> list[str]:
    """Languages a user may ask for, as the reference lists them: dialect ids are reached only
    through a dialect speaker (docs/model.md, "Configuration")."""
    return ["auto", *sorted(name for name in table if "dialect" not in name)]


@dataclass(frozen=True)
class ModelContext:
    engine: Engine
    tokenizer: Tokenizer
    variant: str  # "custom_voice", "voice_design" or "base"
    size: str
    sample_rate: int
    frame_rate: float  # codec frames per second of audio
    hidden_size: int
    num_code_groups: int
    mel_dim: int | None  # the speaker encoder's mel bands (base models)
    text_ids: Mapping[str, int]
    codec_ids: Mapping[str, int]
    language_ids: Mapping[str, int]  # every language's codec id, dialects included
    languages: tuple[str, ...]  # what a request may ask for ("auto" first)
    speakers: tuple[tuple[str, int, str], ...]  # (name, codec id, dialect or "")
    defaults: Mapping[str, Any]  # the generation defaults (generation_config.json)
    voice_cache: VoiceCache | None
    aligner: Aligns | None = None  # the forced aligner of word timestamps (load option aligner)

    @classmethod
    def build(cls, engine: Engine, tokenizer: Tokenizer, voice_cache: VoiceCache | None,
              aligner: Aligns | None = None) -> ModelContext:
        hparams = engine.hparams
        return cls(engine=engine, tokenizer=tokenizer, variant=engine.variant, size=engine.size,
                   sample_rate=engine.sample_rate, frame_rate=engine.frame_rate,
                   hidden_size=int(hparams["talker"]["embedding_length"]), num_code_groups=engine.num_code_groups,
                   mel_dim=hparams.get("speaker_encoder", {}).get("mel_dim"),
                   text_ids=MappingProxyType(engine.text_ids), codec_ids=MappingProxyType(engine.codec_ids),
                   language_ids=MappingProxyType(engine.languages),
                   languages=tuple(supported_languages(engine.languages)), speakers=tuple(engine.speakers),
                   defaults=MappingProxyType(engine.generation_defaults), voice_cache=voice_cache,
                   aligner=aligner)

    @cached_property
    def fingerprint(self) -> str:
        """Identifies the speaker encoder voices are made with (the same for every quantization
        of one checkpoint); empty for models without one. Read on first use: it hashes the
        speaker encoder's weights."""
        tensors = self.engine.tensor_data("spk_enc.")
        return model_fingerprint(tensors) if tensors else ""

    @property
    def speaker_names(self) -> list[str]:
        return [name for name, _, _ in self.speakers]

    def empty_codes(self) -> np.ndarray:
        return np.zeros((0, self.num_code_groups), dtype=np.int32)
