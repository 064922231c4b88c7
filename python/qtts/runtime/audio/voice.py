"""Cloned voices: what a Base model needs to speak like a reference clip, kept in a small file.

A Voice holds the speaker x-vector and, for in-context (ICL) cloning, the reference clip's codec
codes and transcript. It is tied to the model that made it by a fingerprint of that model's
speaker encoder (which every quantization keeps in F32), so a voice made with one conversion of a
checkpoint works with its others, and a voice from another checkpoint is refused.

The file is a NumPy .npz archive (no pickles) with a JSON header; writes are atomic. The
embedding cache stores the same files, keyed by model fingerprint, audio content and mode.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMAT = "qtts-voice"
VERSION = 1


@dataclass(frozen=True)
class Voice:
    x_vector: np.ndarray            # [hidden] float32, the speaker encoder's output
    ref_codes: np.ndarray | None    # [frames, 16] int32 codes of the reference clip (ICL), else None
    ref_text: str | None            # the reference transcript (ICL), else None
    model_fingerprint: str

    @property
    def x_vector_only_mode(self) -> bool:
        return self.ref_codes is None

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the voice file atomically (nothing is left behind on failure)."""
        p = Path(path)
        header = {"format": FORMAT, "version": VERSION, "model_fingerprint": self.model_fingerprint,
                  "ref_text": self.ref_text, "x_vector_only_mode": self.x_vector_only_mode}
        arrays = {"header": np.array(json.dumps(header)), "x_vector": np.asarray(self.x_vector, np.float32)}
        if self.ref_codes is not None:
            arrays["ref_codes"] = np.asarray(self.ref_codes, np.int32)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Voice:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such voice file")
        try:
            with np.load(p, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
            raise ValueError(f"{p}: not a qtts voice file ({e})") from e
        try:
            header = json.loads(str(arrays["header"]))
        except (KeyError, json.JSONDecodeError) as e:
            raise ValueError(f"{p}: not a qtts voice file (missing or unreadable header)") from e
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ValueError(f"{p}: not a qtts voice file")
        if header.get("version") != VERSION:
            raise ValueError(f"{p}: voice file version {header.get('version')} is not supported (expected {VERSION}); "
                             "create the voice again")
        xv = arrays.get("x_vector")
        if xv is None or xv.dtype != np.float32 or xv.ndim != 1 or not np.isfinite(xv).all():
            raise ValueError(f"{p}: field x_vector must be a finite float32 vector")
        codes = arrays.get("ref_codes")
        text = header.get("ref_text")
        if codes is not None and (codes.dtype != np.int32 or codes.ndim != 2 or not len(codes)):
            raise ValueError(f"{p}: field ref_codes must be a non-empty int32 [frames, groups] matrix")
        if codes is not None and not (isinstance(text, str) and text.strip()):
            raise ValueError(f"{p}: an ICL voice needs its reference text")
        if bool(header.get("x_vector_only_mode")) != (codes is None):
            raise ValueError(f"{p}: header says x_vector_only_mode={header.get('x_vector_only_mode')}, "
                             "which the stored arrays contradict")
        fp = header.get("model_fingerprint")
        if not isinstance(fp, str) or not fp:
            raise ValueError(f"{p}: field model_fingerprint is missing")
        return cls(xv, codes, text if codes is not None else None, fp)


def model_fingerprint(tensors: list[tuple[str, str, bytes]]) -> str:
    """sha256 over the speaker encoder's weights (names, types and data)."""
    h = hashlib.sha256()
    for name, ty, data in sorted(tensors):
        h.update(f"{name}:{ty}:{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


def check_voice(voice: Voice, fingerprint: str, hidden: int, groups: int) -> None:
    if not isinstance(voice, Voice):
        raise TypeError(f"voice must be a qtts.Voice, got {type(voice).__name__}")
    if voice.model_fingerprint != fingerprint:
        raise ValueError("this voice was made with a different model (its speaker encoder differs); "
                         "create it again with this model")
    if voice.x_vector.shape != (hidden,):
        raise ValueError(f"voice x_vector has shape {voice.x_vector.shape}, the model needs ({hidden},)")
    if voice.ref_codes is not None and voice.ref_codes.shape[1] != groups:
        raise ValueError(f"voice ref_codes have {voice.ref_codes.shape[1]} groups, the model needs {groups}")


class VoiceCache:
    """Encoded references on disk, so a repeated reference skips both encoders.

    Keys combine the model fingerprint, the content of the (24 kHz) reference samples and the
    mode; the reference text is not part of the key (it does not change the encodings)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    @staticmethod
    def key(fingerprint: str, audio_digest: str, x_vector_only: bool) -> str:
        mode = "xvec" if x_vector_only else "icl"
        return hashlib.sha256(f"{fingerprint}\n{audio_digest}\n{mode}".encode()).hexdigest()[:32]

    def get(self, key: str) -> Voice | None:
        p = self.root / f"{key}.qvoice"
        if not p.is_file():
            return None
        try:
            return Voice.load(p)
        except ValueError:
            p.unlink(missing_ok=True)  # a damaged entry is rebuilt, not fatal
            return None

    def put(self, key: str, voice: Voice) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            voice.save(self.root / f"{key}.qvoice")
        except OSError:
            pass  # a read-only or full cache only costs speed
