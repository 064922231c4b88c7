"""Saved voices on storage that several servers share (the replicas of `qtts-cli serve --ray`):
the folder is the truth, read at each use, so a voice saved through one replica is usable through
every other at once and a deletion is seen everywhere (docs/ray-serve.md)."""
from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from ..runtime.audio.voice import Voice
from .errors import ApiError
from .voices import _ID, SUFFIX, VoiceStore, log

_Key = tuple[int, int, int]  # a file's inode, size and mtime: a new file under the same name differs


class _Folder(MutableMapping[str, Voice]):
    """The voice files of a folder as a mapping; a file read once is kept while it is unchanged."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._read: dict[str, tuple[_Key, Voice]] = {}
        self._lock = threading.Lock()

    def path(self, voice_id: str) -> Path:
        return self.root / f"{voice_id}{SUFFIX}"

    def __getitem__(self, voice_id: str) -> Voice:
        if not _ID.fullmatch(voice_id):
            raise KeyError(voice_id)
        p = self.path(voice_id)
        try:
            st = p.stat()
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            with self._lock:
                known = self._read.get(voice_id)
            if known is not None and known[0] == key:
                return known[1]
            voice = Voice.load(p)
        except FileNotFoundError:
            with self._lock:
                self._read.pop(voice_id, None)
            raise KeyError(voice_id) from None
        except (ValueError, OSError) as e:  # listed nowhere, left alone (as at a single server's start)
            log.warning("skipping %s: %s", p, e)
            raise KeyError(voice_id) from None
        with self._lock:
            self._read[voice_id] = (key, voice)
        return voice

    def __contains__(self, voice_id: object) -> bool:
        return isinstance(voice_id, str) and _ID.fullmatch(voice_id) is not None and self.path(voice_id).is_file()

    def __iter__(self) -> Iterator[str]:
        """The ids of the files that read as voices (a listing then describes each)."""
        for p in self.root.glob(f"*{SUFFIX}"):
            voice_id = p.name[:-len(SUFFIX)]
            try:
                self[voice_id]
            except KeyError:
                continue
            yield voice_id

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __setitem__(self, voice_id: str, voice: Voice) -> None:
        """Write the file under a name no other server can take at the same time: written whole
        beside it, then hard-linked to its name, which fails if the name exists (409)."""
        draft = self.root / f".{voice_id}.{secrets.token_hex(4)}.new"
        voice.save(draft)
        try:
            os.link(draft, self.path(voice_id))
        except FileExistsError:
            raise ApiError(409, f"a voice named {voice_id!r} exists; delete it first or choose another name",
                           param="name", code="voice_exists") from None
        finally:
            draft.unlink(missing_ok=True)

    def __delitem__(self, voice_id: str) -> None:
        try:
            self.path(voice_id).unlink()
        except FileNotFoundError:
            raise KeyError(voice_id) from None


class SharedVoiceStore(VoiceStore):
    """VoiceStore over a folder that other servers write too."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        root.mkdir(parents=True, exist_ok=True)
        self._voices = _Folder(root)  # type: ignore[assignment]

    def add(self, voice: Voice, voice_id: str | None) -> str:
        voice_id = voice_id or f"voice-{secrets.token_hex(6)}"
        try:
            self._voices[voice_id] = voice
        except OSError as e:
            raise ApiError(500, f"could not save the voice in {self.root}: {e.strerror or e}",
                           type="server_error", code="storage_error") from None
        return voice_id

    def delete(self, voice_id: str) -> None:
        try:
            del self._voices[voice_id]
        except KeyError:
            raise ApiError(404, f"no saved voice {voice_id!r}", param="voice_id", code="voice_not_found") from None
        except OSError as e:
            raise ApiError(500, f"could not delete the voice file: {e.strerror or e}", type="server_error",
                           code="storage_error") from None
