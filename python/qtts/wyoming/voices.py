"""The voices the Wyoming server offers (docs/integrations.md, "Home Assistant"): a CustomVoice
model's speakers, a Base model's saved voices (the `--voices` folder that `qtts-cli serve` writes,
read again at each look so voices saved there since appear), the aliases the operator set (and,
on a VoiceDesign model, whose only named voices they are, the default ones), each with the
model's languages as ISO 639-1 codes, which is what Home Assistant matches its language against.
"""
from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wyoming.info import Attribution, TtsVoice

from ..aliases import TARGETS, VoiceAliases
from ..runtime.audio.voice import Voice

SUFFIX = ".qvoice"  # a saved voice's file, as the HTTP server's voice store writes it (server/voices.py)
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Qwen3-TTS's language names by ISO 639-1 code; the dialects come with their speakers (eric, dylan).
LANGUAGE_CODES = {"chinese": "zh", "english": "en", "german": "de", "italian": "it", "portuguese": "pt",
                  "spanish": "es", "japanese": "ja", "korean": "ko", "french": "fr", "russian": "ru"}
QWEN_ATTRIBUTION = Attribution(name="Qwen3-TTS (Alibaba Qwen)", url="https://github.com/QwenLM/Qwen3-TTS")


class VoiceError(ValueError):
    """A request's voice or language that this server cannot take."""


class Voices:
    def __init__(self, variant: str, speakers: Sequence[str], languages: Sequence[str], aliases: VoiceAliases,
                 folder: Path | None, default_voice: str | None) -> None:
        self.variant, self.speakers, self.aliases, self.folder = variant, list(speakers), aliases, folder
        self.languages = [LANGUAGE_CODES[lang] for lang in languages if lang in LANGUAGE_CODES]
        self._loaded: dict[str, tuple[float, Voice]] = {}  # saved voices by id, with their file's mtime
        self.default_voice = default_voice
        if default_voice is not None:
            self.check(default_voice)

    def saved(self) -> list[str]:
        """The saved voices' ids, as the folder holds them now."""
        if self.folder is None or not self.folder.is_dir():
            return []
        ids = (p.name[:-len(SUFFIX)] for p in self.folder.glob(f"*{SUFFIX}"))
        return sorted(i for i in ids if _ID.fullmatch(i))

    def names(self) -> list[str]:
        """Every voice a request may name, in the order info lists them."""
        listed = [a.name for a in self.aliases if not a.default or self.variant == "voice_design"]
        return [*self.speakers, *self.saved(), *listed]

    def info(self, version: str) -> list[TtsVoice]:
        voices = []
        for name in self.names():
            alias = self.aliases.get(name)
            description = name if alias is None else f"{name}: {alias.target}"
            voices.append(TtsVoice(name=name, attribution=QWEN_ATTRIBUTION, installed=True, description=description,
                                   version=version, languages=self.languages))
        return voices

    def check(self, voice: str) -> None:
        """Raise VoiceError unless a request may name `voice`."""
        self.args(voice, None)

    def args(self, voice: str | None, language: str | None) -> dict[str, Any]:
        """A request's voice (or the default) and language as Model.stream's keyword arguments."""
        args: dict[str, Any] = {"language": self._language(language)} if language is not None else {}
        name = voice if voice is not None else self.default_voice if self.default_voice is not None else next(
            iter(self.names()), None)
        if name is None:
            raise VoiceError(f"no voice named, and this {self.variant} model has none to offer: save one "
                             "(POST /v1/audio/voices, or qtts-cli voice create -o DIR/NAME.qvoice) in --voices DIR")
        saved = self.saved()
        try:
            target = self.aliases.resolve(name, saved)
        except ValueError as e:
            raise VoiceError(str(e)) from None
        if self.variant == "voice_design":
            alias = self.aliases.get(name)
            if alias is None:
                raise VoiceError(f"unknown voice {name!r}; a voice_design model's voices are its aliases: "
                                 f"{', '.join(a.name for a in self.aliases)} (--voice-alias NAME=DESCRIPTION adds one)")
            return {**args, "instruct": target}
        if self.variant == "custom_voice":
            if target is None or target.lower() not in self.speakers:
                raise VoiceError(f"unknown voice {name!r}; speakers: {', '.join(self.speakers)}")
            return {**args, "speaker": target.lower()}
        if target not in saved:
            raise VoiceError(f"unknown voice {name!r}; saved voices: {', '.join(saved) or 'none'} "
                             f"(aliases stand for {TARGETS['base']})")
        return {**args, "voice": self._load(target)}

    def _language(self, code: str) -> str:
        """A request's language: an ISO code (en, en-US) or one of the model's language names."""
        lowered = code.lower()
        for language, iso in LANGUAGE_CODES.items():
            if lowered in (language, iso) or lowered.startswith(iso + "-") or lowered.startswith(iso + "_"):
                if iso in self.languages:
                    return language
        raise VoiceError(f"unsupported language {code!r}; this model speaks {', '.join(self.languages)}")

    def _load(self, voice_id: str) -> Voice:
        assert self.folder is not None
        path = self.folder / f"{voice_id}{SUFFIX}"
        try:
            mtime = os.stat(path).st_mtime
            cached = self._loaded.get(voice_id)
            if cached is None or cached[0] != mtime:
                cached = (mtime, Voice.load(path))
                self._loaded[voice_id] = cached
        except (OSError, ValueError) as e:
            raise VoiceError(f"saved voice {voice_id!r} cannot be read: {e}") from None
        return cached[1]
