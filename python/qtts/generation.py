"""Generation settings and results. Settings left as None take the model's generation
defaults (the GGUF copy of generation_config.json), as the reference's wrapper merges them."""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SETTINGS = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty", "subtalker_dosample",
             "subtalker_temperature", "subtalker_top_k", "subtalker_top_p", "max_new_tokens", "min_new_tokens")
# generate()'s own default, not part of generation_config.json
MIN_NEW_TOKENS = 2


@dataclass
class GenerationResult:
    codes: np.ndarray  # [frames, 16] int32, codebook 0 first
    stop_reason: str   # "eos", "max_new_tokens", "budget" (runaway guard) or "cancelled"
    seed: int          # the sampling seed used (drawn at random when none was given)
    timings: dict[str, float] = field(default_factory=dict)


def resolve_settings(defaults: dict[str, Any], given: dict[str, Any], seed: int | None) -> dict[str, Any]:
    """Merge explicit settings over the defaults and check them; ValueError on a bad value."""
    defaults = {"min_new_tokens": MIN_NEW_TOKENS, **defaults}
    s = {k: (given[k] if given.get(k) is not None else defaults[k]) for k in SETTINGS}
    for prefix, sampling in (("", s["do_sample"]), ("subtalker_", s["subtalker_dosample"])):
        temperature, top_k, top_p = s[prefix + "temperature"], s[prefix + "top_k"], s[prefix + "top_p"]
        if sampling and not temperature > 0:  # greedy ignores the temperature, as the reference
            raise ValueError(f"{prefix}temperature must be positive, got {temperature}")
        if int(top_k) != top_k or top_k < 0:
            raise ValueError(f"{prefix}top_k must be a non-negative integer, got {top_k}")
        if not 0 < top_p <= 1:
            raise ValueError(f"{prefix}top_p must be in (0, 1], got {top_p}")
    if not s["repetition_penalty"] > 0:
        raise ValueError(f"repetition_penalty must be positive, got {s['repetition_penalty']}")
    if int(s["max_new_tokens"]) != s["max_new_tokens"] or s["max_new_tokens"] < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {s['max_new_tokens']}")
    if int(s["min_new_tokens"]) != s["min_new_tokens"] or s["min_new_tokens"] < 0:
        raise ValueError(f"min_new_tokens must be a non-negative integer, got {s['min_new_tokens']}")
    if seed is None:
        seed = secrets.randbits(63)
    if int(seed) != seed or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an integer in [0, 2**64), got {seed}")
    s.update(do_sample=bool(s["do_sample"]), subtalker_dosample=bool(s["subtalker_dosample"]),
             top_k=int(s["top_k"]), subtalker_top_k=int(s["subtalker_top_k"]),
             max_new_tokens=int(s["max_new_tokens"]), min_new_tokens=int(s["min_new_tokens"]), seed=int(seed))
    return s


def frame_budget(text: str, budget: int | str | None) -> int:
    """The runaway guard: the most frames a text may plausibly need, or 0 for no limit.

    "auto" allows 128 frames (10 s) plus 1.4 frames per character and 8 per CJK or digit
    character (digits expand into words); spoken text needs well under half of that, while a
    generation that lost its EOS (about 1 in 200 sampled runs, peers.md §6) runs to the cap.
    """
    if budget is None:
        return 0
    if budget == "auto":
        heavy = sum(1 for ch in text if ch.isdigit() or _is_cjk(ch))
        return int(128 + 1.4 * (len(text) - heavy) + 8 * heavy)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"frame_budget must be 'auto', None or a positive integer, got {budget!r}")
    return budget


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF
            or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FA1F)


def per_frame_timings(raw: dict[str, float]) -> dict[str, float]:
    frames = int(raw["frames"])
    per = max(frames, 1)
    return {"prefill_ms": raw["prefill_ms"], "talker_ms_per_frame": raw["talker_ms"] / per,
            "predictor_ms_per_frame": raw["predictor_ms"] / per, "frames": frames}
