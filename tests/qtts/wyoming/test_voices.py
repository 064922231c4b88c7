"""The voices the Wyoming server offers (qtts/wyoming/voices.py), per variant: what info lists
and what a request's voice and language become."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qtts.aliases import VOICE_DESIGN, VoiceAliases
from qtts.runtime.audio.voice import Voice
from qtts.wyoming.voices import VoiceError, Voices

LANGUAGES = ["auto", "chinese", "english", "german"]


def _voices(variant: str, speakers: list[str], folder: Path | None = None, given=(), default=None) -> Voices:
    return Voices(variant, speakers, LANGUAGES, VoiceAliases(variant, speakers, given), folder, default)


def test_custom_voice() -> None:
    v = _voices("custom_voice", ["dylan", "ryan"], given=[("narrator", "ryan")])
    assert v.names() == ["dylan", "ryan", "narrator"] and v.languages == ["zh", "en", "de"]
    assert v.args(None, None) == {"speaker": "dylan"} and v.args("onyx", "en-US") == {"speaker": "ryan",
                                                                                        "language": "english"}
    with pytest.raises(VoiceError, match="unsupported language 'fr'; this model speaks zh, en, de"):
        v.args("ryan", "fr")
    with pytest.raises(VoiceError, match="unknown voice 'nobody'; speakers: dylan, ryan"):
        v.args("nobody", None)
    with pytest.raises(VoiceError):
        _voices("custom_voice", ["ryan"], default="nobody")


def test_voice_design_offers_its_aliases() -> None:
    v = _voices("voice_design", [], default="onyx")
    assert v.names()[:3] == ["alloy", "ash", "ballad"] and v.args(None, None) == {"instruct": VOICE_DESIGN["onyx"]}
    with pytest.raises(VoiceError, match="a voice_design model's voices are its aliases"):
        v.args("A calm voice.", None)


def test_base_reads_its_folder_at_each_look(tmp_path: Path) -> None:
    with pytest.raises(VoiceError, match="none to offer"):
        _voices("base", [], folder=tmp_path).args(None, None)
    v = _voices("base", [], folder=tmp_path, given=[("echo", "me")])
    voice = Voice(np.ones(4, np.float32), None, None, "fp")
    voice.save(tmp_path / "me.qvoice")
    (tmp_path / "bad name!.qvoice").write_bytes(b"")  # not an id: never listed
    assert v.names() == ["me", "echo"] and v.args("echo", None)["voice"].model_fingerprint == "fp"
    with pytest.raises(VoiceError, match="--voice-alias alloy=VOICE"):
        v.args("alloy", None)
    (tmp_path / "broken.qvoice").write_bytes(b"not a voice")
    with pytest.raises(VoiceError, match="saved voice 'broken' cannot be read"):
        v.args("broken", None)
