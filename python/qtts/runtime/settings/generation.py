"""What a generation returns, and the check of the texts it takes (settings: config.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class GenerationResult:
    codes: np.ndarray  # [frames, code groups] int32, codebook 0 first
    stop_reason: str   # "eos", "max_new_tokens", "budget" (runaway guard) or "cancelled"
    seed: int          # the sampling seed used (drawn at random when none was given)
    timings: dict[str, float] = field(default_factory=dict)


def check_text(value: Any, name: str = "text", *, optional: bool = False, allow_empty: bool = False) -> str | None:
    """A str the tokenizer can take: TypeError for another type, ValueError when empty or when it
    holds a lone surrogate (refused rather than replaced: the caller decoded bytes wrongly)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name} is not valid Unicode: lone surrogate {value[e.start]!r} at index {e.start} "
                         "(bytes decoded with errors='surrogateescape'?)") from None
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} is empty")
    return value


def per_frame_timings(raw: dict[str, float]) -> dict[str, float]:
    frames = int(raw["frames"])
    per = max(frames, 1)
    return {"prefill_ms": raw["prefill_ms"], "talker_ms_per_frame": raw["talker_ms"] / per,
            "predictor_ms_per_frame": raw["predictor_ms"] / per, "frames": frames}
