"""The released Qwen3-TTS 12 Hz checkpoints and the forced aligner that times their words
(docs/aligner.md), and fetching + converting them.

Downloads go to the standard Hugging Face cache (huggingface_hub, the optional `hub` extra),
so HF_HOME, HF_HUB_OFFLINE and tokens work as users expect.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .weight_types import WEIGHT_TYPES


@dataclass(frozen=True)
class Release:
    repo_id: str
    variant: str
    size: str


MODELS: dict[str, Release] = {r.repo_id: r for r in (
    Release("Qwen/Qwen3-TTS-12Hz-0.6B-Base", "base", "0.6B"),
    Release("Qwen/Qwen3-TTS-12Hz-1.7B-Base", "base", "1.7B"),
    Release("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", "custom_voice", "0.6B"),
    Release("Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "custom_voice", "1.7B"),
    Release("Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign", "voice_design", "1.7B"),
    Release("Qwen/Qwen3-ForcedAligner-0.6B", "forced_aligner", "0.6B"),
)}

# Only what the converter reads; the repositories also hold ModelScope metadata.
_PATTERNS = ["config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
             "model-*.safetensors", "vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.json",
             "speech_tokenizer/config.json", "speech_tokenizer/preprocessor_config.json",
             "speech_tokenizer/model.safetensors", "preprocessor_config.json"]


def cache_dir() -> Path:
    return Path(os.environ.get("QTTS_CACHE") or Path.home() / ".cache" / "qtts")


def is_repo_id(model: str | os.PathLike[str]) -> bool:
    """"owner/name" that is not an existing file: what a Hugging Face repo id looks like."""
    s = str(model)
    return not Path(s).exists() and s.count("/") == 1 and not s.startswith((".", "/")) and not s.endswith(".gguf")


def download(repo_id: str, *, revision: str | None = None) -> Path:
    """The checkpoint directory in the Hugging Face cache (downloaded unless offline). OSError
    when it can be neither downloaded nor found in the cache, saying what to do instead."""
    try:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.utils import LocalEntryNotFoundError
    except ImportError:
        raise ImportError('downloading needs huggingface_hub: pip install "qtts[hub]"') from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=_PATTERNS,
                                      local_files_only=offline))
    except LocalEntryNotFoundError as e:  # huggingface_hub's words are for its Python callers
        raise OSError(not_available(repo_id, offline, e.__cause__, Path(constants.HF_HUB_CACHE))) from None


def not_available(repo_id: str, offline: bool, cause: BaseException | None, cache: Path) -> str:
    """What a user reads when a checkpoint cannot be had: why, where it was looked for, and the
    two ways on."""
    if offline:
        why = "HF_HUB_OFFLINE is set, so nothing is downloaded"
    else:
        reason = f": {type(cause).__name__}" if cause is not None else ""
        why = f"the Hugging Face Hub could not be reached{reason}"
    return (f"cannot get {repo_id}: {why}, and it is not in the local Hugging Face cache "
            f"({cache / ('models--' + repo_id.replace('/', '--'))}). Either run again "
            f"{'without HF_HUB_OFFLINE, ' if offline else ''}connected to the internet (it is downloaded once), or "
            "convert a local copy of the checkpoint with `qtts-cli convert LOCAL_DIR -o model.gguf` and "
            "load that file (`-m model.gguf`)")


def fetch(repo_id: str, out_dir: str | os.PathLike[str], out_type: str = "q8_0", *,
          revision: str | None = None, log: Callable[[str], None] | None = None) -> Path:
    """Download (or find in the cache) a checkpoint and convert it to `<out_dir>/<name>-<type>.gguf`;
    an existing output is reused."""
    from .checkpoint import convert

    if out_type not in WEIGHT_TYPES:
        raise ValueError(f"convert_type must be one of {', '.join(WEIGHT_TYPES)}, got {out_type!r}")
    if repo_id not in MODELS and not Path(repo_id).is_dir():
        known = ", ".join(MODELS)
        raise ValueError(f"{repo_id!r} is not a released Qwen3-TTS 12 Hz checkpoint or aligner; known: {known}")
    out = Path(out_dir) / f"{repo_id.rsplit('/', 1)[-1]}-{out_type}.gguf"
    if out.exists():
        return out
    checkpoint = download(repo_id, revision=revision)
    if log:
        log(f"converting {repo_id} once to {out_type}: {out}")
    return convert(checkpoint, out, out_type, name=repo_id, log=log)
