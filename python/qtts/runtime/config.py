"""The generation settings: one frozen, validated GenerationConfig with the qwen-tts names.

Settings left as None take the model's generation defaults (the GGUF copy of
generation_config.json), as the reference's wrapper merges them; every value is checked here,
before any reaches C++ (docs/architecture.md, "Adding a sampling parameter").
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

# The sampling keyword arguments synthesize/stream/generate_codes take (seed and frame_budget
# are arguments of their own).
SETTINGS = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty", "subtalker_dosample",
            "subtalker_temperature", "subtalker_top_k", "subtalker_top_p", "max_new_tokens", "min_new_tokens")
# The reference's generate() default, not part of generation_config.json: EOS is masked until two
# frames exist (docs/model.md, "Generation loop").
MIN_NEW_TOKENS = 2
MAX_NEW_TOKENS = 32768  # the talker's context (max_position_embeddings); the KV cache is sized from it
INT32_MAX = 2**31 - 1
SEED_LIMIT = 2**64
# The sampler works in float32 and divides logits by these: outside this range they overflow to inf/NaN.
SCALE_RANGE = (1e-6, 1e6)

FrameBudget = int | str | None  # "auto", a number of frames, or None for no limit


@dataclass(frozen=True)
class GenerationConfig:
    """Validated settings of one generation. Build it with `resolve`; a request's config keeps the
    caller's frame_budget ("auto", an integer or None) and `for_piece` turns it into the piece's
    own frame count (None: no limit) and seed."""
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float
    subtalker_dosample: bool
    subtalker_temperature: float
    subtalker_top_k: int
    subtalker_top_p: float
    max_new_tokens: int
    min_new_tokens: int
    seed: int
    frame_budget: FrameBudget = "auto"

    @classmethod
    def resolve(cls, defaults: dict[str, Any], given: dict[str, Any], seed: int | None = None,
                frame_budget: FrameBudget = "auto") -> GenerationConfig:
        """Merge explicit settings over the defaults and check them all: TypeError for a wrong type
        (bool is not an integer), ValueError for a value out of range, each naming the setting."""
        defaults = {"min_new_tokens": MIN_NEW_TOKENS, **defaults}
        s: dict[str, Any] = {}
        for k in SETTINGS:
            v = given.get(k)
            if v is None:
                v = defaults[k]
                if k in ("do_sample", "subtalker_dosample"):
                    v = bool(v)  # a GGUF may store the flag as an integer
            s[k] = check_setting(k, v)
        for prefix, sampling in (("", s["do_sample"]), ("subtalker_", s["subtalker_dosample"])):
            if sampling and s[prefix + "temperature"] < SCALE_RANGE[0]:
                raise ValueError(f"{prefix}temperature must be at least {SCALE_RANGE[0]:g} when sampling, "
                                 f"got {s[prefix + 'temperature']}")
        s["seed"] = check_seed(secrets.randbits(63) if seed is None else seed)
        return cls(**s, frame_budget=check_frame_budget(frame_budget))

    def for_piece(self, index: int, text: str) -> GenerationConfig:
        """The config of text piece `index`: a seed of its own derived from the request's, and the
        frame budget of its text."""
        return dataclasses.replace(self, seed=(self.seed + index) % SEED_LIMIT,
                                   frame_budget=frame_budget_of(text, self.frame_budget))

    @property
    def frame_limit(self) -> int:
        """The most frames a piece config may produce: max_new_tokens - 1 (the reference's loop),
        or its frame budget when smaller."""
        most = self.max_new_tokens - 1
        if isinstance(self.frame_budget, int):
            return min(most, self.frame_budget)
        return most


def frame_budget_of(text: str, budget: FrameBudget) -> int | None:
    """The runaway guard: the most frames a text may plausibly need, or None for no limit.

    "auto" allows 128 frames (10 s) plus 1.4 frames per character and 8 per CJK or digit
    character (digits expand into words); spoken text needs well under half of that, while a
    generation that lost its EOS (about 1 in 200 sampled runs) runs to the cap
    (docs/model.md, "Generation loop").
    """
    if budget == "auto":
        heavy = sum(1 for ch in text if ch.isdigit() or _is_cjk(ch))
        return int(128 + 1.4 * (len(text) - heavy) + 8 * heavy)
    return check_frame_budget(budget)  # type: ignore[return-value]


def check_frame_budget(budget: Any) -> FrameBudget:
    if budget is None or budget == "auto":
        return budget
    if isinstance(budget, str):
        raise ValueError(f"frame_budget must be 'auto', None or a positive integer, got {budget!r}")
    return check_int("frame_budget", budget, 1, INT32_MAX)


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF
            or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FA1F)


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """An integer in [lo, hi] (bool refused): TypeError for another type, ValueError out of range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def check_float(name: str, value: Any, lo: float, hi: float, *, open_lo: bool = False) -> float:
    """A finite real number in [lo, hi] (or (lo, hi] with open_lo)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not (math.isfinite(v) and (lo < v if open_lo else lo <= v) and v <= hi):
        raise ValueError(f"{name} must be a finite number in {'(' if open_lo else '['}{lo:g}, {hi:g}], got {value}")
    return v


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an integer, got {type(seed).__name__} {seed!r}")
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return int(seed)


def check_setting(name: str, value: Any) -> Any:
    """One generation setting, checked and normalised (TypeError / ValueError naming it)."""
    base = name.removeprefix("subtalker_")
    if base in ("do_sample", "dosample"):
        return check_bool(name, value)
    if base == "temperature":  # 0 passes for greedy decoding, which ignores it (GenerationConfig.resolve)
        return check_float(name, value, 0.0, SCALE_RANGE[1])
    if base == "top_k":
        return check_int(name, value, 0, INT32_MAX)  # above the vocabulary it keeps every token, as torch
    if base == "top_p":
        return check_float(name, value, 0.0, 1.0, open_lo=True)
    if name == "repetition_penalty":
        return check_float(name, value, *SCALE_RANGE)
    if name == "max_new_tokens":
        # the reference emits at most max_new_tokens - 1 frames: 1 would always give empty audio
        return check_int(name, value, 2, MAX_NEW_TOKENS)
    if name == "min_new_tokens":
        return check_int(name, value, 0, MAX_NEW_TOKENS)
    raise KeyError(name)
