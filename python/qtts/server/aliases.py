"""Voice aliases on the HTTP server (qtts/aliases.py): a requested voice resolved before the
request is checked, and the voice list in the two shapes clients read: OpenAI-style `data` and
`voices` of `{"id", "name"}` (Open WebUI, Kokoro-FastAPI's shape; docs/integrations.md)."""
from __future__ import annotations

from typing import Any

from ..aliases import VoiceAliases
from .errors import ApiError
from .voices import VoiceStore


def resolve_voice(aliases: VoiceAliases, voice: str | None, voices: VoiceStore) -> str | None:
    """`voice` with an alias replaced by the voice it stands for; a 400 naming `voice` for one of
    OpenAI's names that stands for nothing here, or an alias of a saved voice that is gone."""
    saved = voices.ids()
    try:
        resolved = aliases.resolve(voice, saved)
    except ValueError as e:
        raise ApiError(400, str(e), param="voice", code="voice_not_found") from None
    if aliases.variant == "base" and resolved != voice and resolved not in saved:
        raise ApiError(400, f"voice {voice!r} is an alias of {resolved!r}, which is not a saved voice (saved voices: "
                            f"{', '.join(saved) or 'none'}; POST /v1/audio/voices creates one)", param="voice",
                       code="voice_not_found")
    return resolved


def _alias_entry(aliases: VoiceAliases, name: str, target: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": name, "object": "voice", "type": "alias"}
    if aliases.variant == "voice_design":
        return {**entry, "name": name, "description": target}
    return {**entry, "name": f"{name} ({target})", "voice": target}


def voice_list(speakers: list[str], voices: VoiceStore, aliases: VoiceAliases) -> dict[str, Any]:
    """GET /v1/audio/voices: built-in speakers, saved voices and aliases, each with an id and a
    name, under both `data` and `voices`."""
    entries = [{"id": s, "object": "voice", "type": "builtin", "name": s.replace("_", " ").title()} for s in speakers]
    entries += [{**voices.describe(v), "name": v} for v in voices.ids()]
    entries += [_alias_entry(aliases, a.name, a.target) for a in aliases]
    return {"object": "list", "data": entries, "voices": entries}
