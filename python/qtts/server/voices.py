"""Saved voices: one voice file (runtime/audio/voice.py's format) per id under the --voices folder,
written atomically, so they survive restarts; without a folder, voices live in memory only."""
from __future__ import annotations

import logging
import re
import secrets
import threading
from pathlib import Path
from typing import Any

from ..runtime.audio.voice import Voice
from .errors import ApiError

log = logging.getLogger("qtts.server")
SUFFIX = ".qvoice"
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_id(voice_id: str, param: str = "name") -> str:
    if not _ID.fullmatch(voice_id) or voice_id.endswith("."):
        raise ApiError(400, f"{param} must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or "
                            f"digit; got {voice_id!r}", param=param, code="invalid_value")
    return voice_id


class VoiceStore:
    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._voices: dict[str, Voice] = {}
        self._lock = threading.Lock()
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
            for p in sorted(root.glob(f"*{SUFFIX}")):
                voice_id = p.name[:-len(SUFFIX)]
                if not _ID.fullmatch(voice_id):
                    continue
                try:
                    self._voices[voice_id] = Voice.load(p)
                except (ValueError, OSError) as e:  # listed nowhere, left alone
                    log.warning("skipping %s: %s", p, e)

    def get(self, voice_id: str) -> Voice | None:
        with self._lock:
            return self._voices.get(voice_id)

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._voices)

    def describe(self, voice_id: str) -> dict[str, Any]:
        v = self._voices[voice_id]
        return {"id": voice_id, "object": "voice", "type": "saved",
                "mode": "x_vector_only" if v.x_vector_only_mode else "icl", "ref_text": v.ref_text}

    def add(self, voice: Voice, voice_id: str | None) -> str:
        """Store `voice` under `voice_id` (409 if taken) or a new id."""
        with self._lock:
            if voice_id is None:
                voice_id = f"voice-{secrets.token_hex(6)}"
            elif voice_id in self._voices:
                raise ApiError(409, f"a voice named {voice_id!r} exists; delete it first or choose another name",
                               param="name", code="voice_exists")
            if self.root is not None:
                try:
                    voice.save(self.root / f"{voice_id}{SUFFIX}")
                except OSError as e:
                    raise ApiError(500, f"could not save the voice in {self.root}: {e.strerror or e}",
                                   type="server_error", code="storage_error") from None
            self._voices[voice_id] = voice
            return voice_id

    def delete(self, voice_id: str) -> None:
        with self._lock:
            if voice_id not in self._voices:
                raise ApiError(404, f"no saved voice {voice_id!r}", param="voice_id", code="voice_not_found")
            if self.root is not None:
                try:
                    (self.root / f"{voice_id}{SUFFIX}").unlink(missing_ok=True)
                except OSError as e:
                    raise ApiError(500, f"could not delete the voice file: {e.strerror or e}",
                                   type="server_error", code="storage_error") from None
            del self._voices[voice_id]
