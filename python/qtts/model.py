"""The loaded model: the native weights, the tokenizer and a compute session."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from ._native import core
from .generation import GenerationResult, per_frame_timings, resolve_settings
from .generation import frame_budget as frame_budget_for
from .gguf_meta import read_tokenizer
from .prompt import build_prompt, resolve_voice
from .threads import resolve_threads
from .tokenizer import Tokenizer


class Model:
    """A Qwen3-TTS model loaded from a qtts GGUF file (see `qtts-cli convert`)."""

    def __init__(self, path: str | os.PathLike[str], *, n_threads: int | None = None, device: str = "auto"):
        self.path = Path(path)
        check_gguf_path(self.path)
        self._native = core.Model(str(self.path), device)
        self.tokenizer: Tokenizer = Tokenizer.from_data(read_tokenizer(self.path))
        self.n_threads = resolve_threads(n_threads)
        self._session = core.Session(self._native, self.n_threads)
        self._lock = threading.Lock()

    @property
    def variant(self) -> str:
        return str(self._native.variant)

    @property
    def size(self) -> str:
        return str(self._native.size)

    @property
    def device(self) -> str:
        return str(self._native.device)

    @property
    def devices(self) -> dict[str, str]:
        """The device each network's weights live on."""
        return dict(self._native.component_devices)

    @property
    def speakers(self) -> list[str]:
        return [name for name, _, _ in self._native.speakers]

    @property
    def languages(self) -> list[str]:
        return supported_languages(self._native.languages)

    @property
    def generation_defaults(self) -> dict[str, float | int | bool]:
        return dict(self._native.generation_defaults)

    @property
    def hparams(self) -> dict[str, dict]:
        return dict(self._native.hparams)

    def text_embedding(self, ids: list[int] | np.ndarray) -> np.ndarray:
        """The talker's projected text embedding P(ids), shape [len(ids), hidden]."""
        with self._lock:
            return self._session.text_embed([int(i) for i in ids])

    @property
    def codec_ids(self) -> dict[str, int]:
        """Codec-stream control ids (pad, bos, eos, think, nothink, think_bos, think_eos)."""
        return dict(self._native.codec_ids)

    def codec_embedding(self, ids: list[int] | np.ndarray) -> np.ndarray:
        """Rows C(ids) of the talker's codec embedding, shape [len(ids), hidden]."""
        with self._lock:
            return self._session.codec_embed([int(i) for i in ids])

    def generate_codes(self, text: str, *, language: str = "auto", speaker: str | None = None,
                       instruct: str | None = None, do_sample: bool | None = None, top_k: int | None = None,
                       top_p: float | None = None, temperature: float | None = None,
                       repetition_penalty: float | None = None, subtalker_dosample: bool | None = None,
                       subtalker_top_k: int | None = None, subtalker_top_p: float | None = None,
                       subtalker_temperature: float | None = None, max_new_tokens: int | None = None,
                       non_streaming_mode: bool | None = None, seed: int | None = None,
                       frame_budget: int | str | None = "auto") -> GenerationResult:
        """Codec codes [frames, 16] for `text` (CustomVoice: a speaker; VoiceDesign: an instruct).

        Settings left as None take the model's generation_defaults; non_streaming_mode defaults
        to True, as in the reference's generate_custom_voice / generate_voice_design. At most
        max_new_tokens - 1 frames come out. The same seed gives the same codes.

        frame_budget guards against runaway generation (a lost EOS): "auto" derives a generous
        limit from the text, an integer sets one, None disables it. Ctrl-C or cancel() from
        another thread stops the loop within one frame (KeyboardInterrupt / stop_reason
        "cancelled").
        """
        settings = dict(do_sample=do_sample, top_k=top_k, top_p=top_p, temperature=temperature,
                        repetition_penalty=repetition_penalty, subtalker_dosample=subtalker_dosample,
                        subtalker_top_k=subtalker_top_k, subtalker_top_p=subtalker_top_p,
                        subtalker_temperature=subtalker_temperature, max_new_tokens=max_new_tokens)
        voice = resolve_voice(self, language=language, speaker=speaker, instruct=instruct)
        s = resolve_settings(self.generation_defaults, settings, seed)
        s["max_frames"] = frame_budget_for(text, frame_budget)
        prompt = build_prompt(self, text, voice,
                              non_streaming_mode=True if non_streaming_mode is None else non_streaming_mode)
        with self._lock:
            codes, stop_reason, raw = self._session.generate(prompt.embeddings, prompt.trailing, s)
        return GenerationResult(codes, stop_reason, s["seed"], per_frame_timings(raw))

    def cancel(self) -> None:
        """Stop a generation running in another thread after its current frame."""
        self._session.cancel()

    def __repr__(self) -> str:
        return f"qtts.Model({str(self.path)!r}, variant={self.variant!r}, size={self.size!r}, device={self.device!r})"


def supported_languages(table: dict[str, int]) -> list[str]:
    """Languages a user may ask for, as the reference lists them: dialect ids are reached only
    through a dialect speaker (spec G13)."""
    return ["auto", *sorted(name for name in table if "dialect" not in name)]


def check_gguf_path(path: Path) -> None:
    if path.is_dir():
        raise ValueError(f"{path} is a directory: convert a Hugging Face checkpoint first with "
                         f"`qtts-cli convert {path} -o model.gguf`")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such model file")


def load(model: str | os.PathLike[str], *, n_threads: int | None = None, device: str = "auto") -> Model:
    """Load a qtts GGUF model. n_threads defaults to the physical cores available."""
    return Model(model, n_threads=n_threads, device=device)
