"""Voice aliases: OpenAI's voice names, and names an operator adds, standing for a voice of the
served model (docs/integrations.md, "Voice aliases"). Clients written for OpenAI send only its
names (Pipecat refuses any other before sending; Open WebUI falls back to them), so the servers
(`qtts-cli serve`, `qtts-cli wyoming`) resolve a requested voice through these first.

What an alias stands for depends on the variant: a built-in speaker (CustomVoice, a default per
OpenAI name below), a saved voice (Base: none by default, the operator names one with
`--voice-alias alloy=VOICE_ID`), or a voice description (VoiceDesign, a default per name below).
"""
from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

# OpenAI's voice names (its speech API and its Realtime voices), in its documentation's order.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
                 "marin", "cedar")
# CustomVoice speakers by kind, in order of preference; the dialect speakers (eric, dylan) are
# left out: with language auto they speak their dialect (docs/model.md, "Dialects and languages").
FEMALE = ("serena", "vivian", "sohee", "ono_anna")
MALE = ("ryan", "aiden", "uncle_fu")
# OpenAI's name -> the official speaker of its kind it stands for on a CustomVoice model; a model
# without that speaker takes the first of the same kind it has (FEMALE, MALE).
CUSTOM_VOICE = {"alloy": "serena", "ash": "aiden", "ballad": "uncle_fu", "coral": "ono_anna", "echo": "ryan",
                "fable": "aiden", "nova": "vivian", "onyx": "uncle_fu", "sage": "serena", "shimmer": "sohee",
                "verse": "ryan", "marin": "vivian", "cedar": "ryan"}
# OpenAI's name -> the voice description it stands for on a VoiceDesign model.
VOICE_DESIGN = {
    "alloy": "A balanced adult female voice, warm and neutral, speaking clearly at a moderate pace.",
    "ash": "A young adult male voice, clear and direct, with an even, confident delivery.",
    "ballad": "A soft-spoken male voice with a gentle, melodic and expressive delivery.",
    "coral": "A cheerful young female voice, bright and friendly, speaking with warmth.",
    "echo": "A calm adult male voice with a resonant, steady tone.",
    "fable": "A male storyteller's voice, expressive and animated, with a light British accent.",
    "nova": "An energetic young female voice, bright and upbeat.",
    "onyx": "A deep, low male voice, slow and authoritative.",
    "sage": "A calm, mature female voice, thoughtful and reassuring.",
    "shimmer": "A soft, gentle female voice, quiet and soothing.",
    "verse": "A versatile male voice, natural and conversational, with lively intonation.",
    "marin": "A natural, relaxed female voice, conversational and clear.",
    "cedar": "A warm, grounded male voice, relaxed and friendly.",
}
# what an alias's VOICE is, by variant (for messages)
TARGETS = {"custom_voice": "a speaker", "base": "the id of a saved voice", "voice_design": "a voice description"}
MAX_TARGET_CHARS = 4096  # a description is a prompt text, bounded as the server's texts are
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def parse_alias(text: str) -> tuple[str, str]:
    """`ALIAS=VOICE` (a flag's word) as a pair; the voice may hold further '=' and spaces."""
    name, sep, target = text.partition("=")
    if not sep:
        raise ValueError(f"expected ALIAS=VOICE, got {text!r}")
    return name.strip(), target.strip()


def check_aliases(name: str, value: Any) -> Any:
    """The voice_alias option: a tuple of (alias, voice) pairs, each alias named once."""
    if not isinstance(value, tuple):
        raise TypeError(f"{name} must be a tuple of (alias, voice) pairs, got {type(value).__name__}")
    seen: set[str] = set()
    for pair in value:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise TypeError(f"{name}: each alias must be an (alias, voice) pair of str, got {pair!r}")
        alias, target = pair
        if not _NAME.fullmatch(alias):
            raise ValueError(f"{name}: alias {alias!r} must be 1-64 letters, digits, '_', '-' or '.', starting with "
                             "a letter or digit")
        if not target or len(target) > MAX_TARGET_CHARS:
            raise ValueError(f"{name}: {alias}'s voice must be 1-{MAX_TARGET_CHARS} characters")
        if alias.lower() in seen:
            raise ValueError(f"{name}: alias {alias!r} is given twice")
        seen.add(alias.lower())
    return value


@dataclass(frozen=True)
class Alias:
    name: str
    target: str  # a speaker, a saved voice's id or a voice description, by the model's variant
    default: bool  # from the documented table (not set by the operator)


def _custom_voice_default(name: str, speakers: Sequence[str]) -> str | None:
    preferred = CUSTOM_VOICE[name]
    kind = FEMALE if preferred in FEMALE else MALE
    return next((s for s in (preferred, *kind) if s in speakers), None)


class VoiceAliases:
    """The aliases of one served model: the documented defaults of its variant, overridden or
    extended by the operator's (`given`). Names match case-insensitively, as speakers do."""

    def __init__(self, variant: str, speakers: Sequence[str], given: Sequence[tuple[str, str]] = ()) -> None:
        check_aliases("voice_alias", tuple(given))
        self.variant = variant
        lowered = {s.lower() for s in speakers}
        table: dict[str, Alias] = {}
        for name in OPENAI_VOICES:
            target = (_custom_voice_default(name, speakers) if variant == "custom_voice"
                      else VOICE_DESIGN[name] if variant == "voice_design" else None)
            if target is not None:
                table[name] = Alias(name, target, True)
        for alias, target in given:
            if alias.lower() in lowered:
                raise ValueError(f"voice_alias: {alias!r} is a built-in speaker of this model; choose another name")
            if variant == "custom_voice" and target.lower() not in lowered:
                raise ValueError(f"voice_alias: {alias}={target}: {target!r} is not a speaker of this model "
                                 f"(speakers: {', '.join(speakers)})")
            table[alias.lower()] = Alias(alias, target.lower() if variant == "custom_voice" else target, False)
        self._table = table

    def __iter__(self) -> Iterator[Alias]:
        return iter(self._table.values())

    def get(self, voice: str) -> Alias | None:
        return self._table.get(voice.lower())

    def resolve(self, voice: str | None, saved: Collection[str] = ()) -> str | None:
        """`voice` with an alias replaced by what it stands for. An alias the operator set wins over
        a saved voice of the same name, which wins over a default alias. One of OpenAI's names
        that stands for nothing here (a Base model whose operator set no alias for it) raises
        ValueError saying how to set one."""
        if voice is None:
            return None
        alias = self.get(voice)
        if alias is not None and (not alias.default or voice not in saved):
            return alias.target
        if voice.lower() in OPENAI_VOICES and voice not in saved:
            raise ValueError(f"voice {voice!r} is one of OpenAI's voice names, which stands for no voice of this "
                             f"model until the server is started with --voice-alias {voice.lower()}=VOICE "
                             f"(VOICE {TARGETS.get(self.variant, 'a voice')})")
        return voice
