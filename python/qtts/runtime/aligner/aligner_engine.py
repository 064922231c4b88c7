"""The forced aligner's engine: the one holder of its native handles (qtts._core.AlignerModel and
AlignerSession, docs/aligner.md) and of the lock that runs one alignment at a time on them, as
runtime/engine/engine.py is for a text-to-speech model (docs/architecture.md, "Layers")."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..._native import core, forward_ggml_log
from ...convert.names import KV

ARCHITECTURE = KV.ALIGNER_ARCH_NAME
CLOSED = "this qtts.Aligner is closed (close() was called): load it again to use it"


def file_architecture(path: str) -> str:
    """general.architecture of a GGUF file ("" where it has none or cannot be read)."""
    return str(core.file_architecture(path))


class AlignerEngine:
    """The aligner's native model and session; metadata reads take no lock (the model is
    immutable once loaded), computation takes it."""

    def __init__(self, path: str, device: str = "auto", n_threads: int = 1, ops: str = "auto",
                 precision: str = "auto", *, compute: bool = True) -> None:
        self._lock = threading.Lock()
        self._session: Any = None
        self.closed = False
        try:
            self._model = core.AlignerModel(path, device, core.Ops.__members__[ops],
                                            core.Precision.__members__[precision])
            if compute:
                self._session = core.AlignerSession(self._model, n_threads)
        finally:
            forward_ggml_log()

    @classmethod
    def metadata(cls, path: str) -> AlignerEngine:
        """The model alone, for reading its metadata (no compute session)."""
        return cls(path, "cpu", compute=False)

    def require_open(self) -> None:
        if self.closed:
            raise RuntimeError(CLOSED)

    def close(self) -> None:
        """Free the native model and session now (waits for an alignment in progress); idempotent."""
        with self._lock:
            self._session = self._model = None
            self.closed = True

    # -- metadata ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return str(self._model.name)

    @property
    def device(self) -> str:
        return str(self._model.device)

    @property
    def ops(self) -> str:
        return str(self._model.ops)

    @property
    def weight_bytes(self) -> int:
        return int(self._model.weight_bytes)

    @property
    def languages(self) -> list[str]:
        return [str(s) for s in self._model.languages]

    @property
    def ids(self) -> dict[str, int]:
        return dict(self._model.ids)

    @property
    def segment_ms(self) -> float:
        return float(self._model.segment_ms)

    @property
    def hparams(self) -> dict[str, dict[str, Any]]:
        return dict(self._model.hparams)

    def read_tokenizer(self) -> tuple[list[str], list[int], list[str]]:
        """(tokens, token types, merges) of the aligner's file."""
        tokens, types, merges = core.read_tokenizer(str(self._model.path), ARCHITECTURE)
        return list(tokens), list(types), list(merges)

    def audio_tokens(self, n_frames: int) -> int:
        """The prompt's audio positions for n_frames log-mel frames."""
        return int(self._model.tokens(n_frames))

    def tensor_info(self) -> list[tuple[str, str, int]]:
        return list(self._model.tensor_info())

    # -- computation ------------------------------------------------------------------------
    def _compute(self) -> Any:
        self.require_open()
        if self._session is None:
            raise RuntimeError("this aligner was opened for its metadata only (AlignerEngine.metadata)")
        return self._session

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """The audio encoder's rows [tokens, width] of a log-mel [mel_bins, frames]."""
        with self._lock:
            try:
                return np.asarray(self._compute().encode(mel))
            finally:
                forward_ggml_log()

    def timestamp_logits(self, ids: list[int], audio: np.ndarray) -> np.ndarray:
        """The decoder's logits [slots, classes] at the prompt's timestamp slots."""
        with self._lock:
            try:
                return np.asarray(self._compute().timestamp_logits(ids, audio))
            finally:
                forward_ggml_log()

    def memory(self) -> dict[str, int]:
        with self._lock:
            return {k: int(v) for k, v in self._compute().memory().items()}
