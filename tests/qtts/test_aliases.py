"""Voice aliases (qtts/aliases.py): OpenAI's names per variant, the operator's over them, and
the refusals that say what to do."""
from __future__ import annotations

import pytest

from qtts.aliases import CUSTOM_VOICE, OPENAI_VOICES, VOICE_DESIGN, VoiceAliases

OFFICIAL = ["serena", "vivian", "uncle_fu", "ryan", "aiden", "ono_anna", "sohee", "eric", "dylan"]


def test_custom_voice_defaults_on_the_official_speakers() -> None:
    aliases = VoiceAliases("custom_voice", OFFICIAL)
    assert {a.name: a.target for a in aliases} == CUSTOM_VOICE
    assert set(CUSTOM_VOICE) == set(OPENAI_VOICES) == set(VOICE_DESIGN)
    assert not {"eric", "dylan"} & set(CUSTOM_VOICE.values())  # the dialect speakers


def test_a_missing_speaker_falls_back_to_one_of_its_kind() -> None:
    aliases = VoiceAliases("custom_voice", ["dylan", "ryan", "vivian"])
    assert aliases.resolve("alloy") == "vivian" and aliases.resolve("onyx") == "ryan"
    assert aliases.resolve("Nova") == "vivian"  # names match as speakers do, in any case
    assert aliases.resolve("ryan") == "ryan" and aliases.resolve("somebody") == "somebody" and not aliases.resolve(None)


def test_the_operator_overrides_and_adds() -> None:
    aliases = VoiceAliases("custom_voice", ["dylan", "ryan", "vivian"], [("alloy", "Ryan"), ("narrator", "dylan")])
    assert aliases.resolve("alloy") == "ryan" and aliases.resolve("NARRATOR") == "dylan"
    assert [a.name for a in aliases if not a.default] == ["alloy", "narrator"]
    with pytest.raises(ValueError, match="'nobody' is not a speaker of this model"):
        VoiceAliases("custom_voice", ["ryan"], [("alloy", "nobody")])
    with pytest.raises(ValueError, match="'ryan' is a built-in speaker"):
        VoiceAliases("custom_voice", ["ryan"], [("ryan", "ryan")])
    with pytest.raises(ValueError, match="given twice"):
        VoiceAliases("base", [], [("a", "x"), ("A", "y")])


def test_base_models_have_no_defaults_and_say_how_to_set_one() -> None:
    aliases = VoiceAliases("base", [], [("echo", "me")])
    assert aliases.resolve("echo", saved=["me"]) == "me"
    assert aliases.resolve("alloy", saved=["alloy"]) == "alloy"  # a saved voice of that name
    with pytest.raises(ValueError, match="--voice-alias alloy=VOICE \\(VOICE the id of a saved voice\\)"):
        aliases.resolve("alloy", saved=["me"])


def test_voice_design_aliases_are_descriptions() -> None:
    aliases = VoiceAliases("voice_design", [], [("narrator", "A calm, deep voice.")])
    assert aliases.resolve("onyx") == VOICE_DESIGN["onyx"] and aliases.resolve("narrator") == "A calm, deep voice."
    assert aliases.resolve("A bright young voice.") == "A bright young voice."  # a description as before
