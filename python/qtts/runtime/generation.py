"""Generation settings and results. Settings left as None take the model's generation
defaults (the GGUF copy of generation_config.json), as the reference's wrapper merges them."""
from __future__ import annotations

import math
import numbers
import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._native import core as _core

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


MAX_NEW_TOKENS = 32768  # the talker's context (max_position_embeddings); the KV cache is sized from it
INT32_MAX = 2**31 - 1
# The sampler works in float32 and divides logits by these: outside this range they overflow to inf/NaN.
SCALE_RANGE = (1e-6, 1e6)


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
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return int(seed)


def check_setting(name: str, value: Any) -> Any:
    """One generation setting, checked and normalised (TypeError / ValueError naming it)."""
    base = name.removeprefix("subtalker_")
    if base in ("do_sample", "dosample"):
        return check_bool(name, value)
    if base == "temperature":  # 0 passes for greedy decoding, which ignores it (resolve_settings)
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


def resolve_settings(defaults: dict[str, Any], given: dict[str, Any], seed: int | None) -> dict[str, Any]:
    """Merge explicit settings over the defaults and check them all before any reaches C++:
    TypeError for a wrong type (bool is not an integer), ValueError for a value out of range."""
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
    return s


def generate_params(settings: dict[str, Any]) -> _core.GenerateParams:
    """The native parameters of checked settings (resolve_settings, plus "frame_budget")."""
    return _core.GenerateParams(
        talker=_core.SamplingParams(do_sample=settings["do_sample"], temperature=settings["temperature"],
                                    top_k=settings["top_k"], top_p=settings["top_p"]),
        subtalker=_core.SamplingParams(do_sample=settings["subtalker_dosample"],
                                       temperature=settings["subtalker_temperature"],
                                       top_k=settings["subtalker_top_k"], top_p=settings["subtalker_top_p"]),
        repetition_penalty=settings["repetition_penalty"], max_new_tokens=settings["max_new_tokens"],
        min_new_tokens=settings["min_new_tokens"], frame_budget=settings["frame_budget"], seed=settings["seed"])


def defaults_dict(d: _core.GenerationDefaults) -> dict[str, float | int | bool]:
    """A model's generation defaults under the reference's generation_config.json names."""
    return {"do_sample": d.talker.do_sample, "temperature": d.talker.temperature, "top_k": d.talker.top_k,
            "top_p": d.talker.top_p, "repetition_penalty": d.repetition_penalty,
            "subtalker_dosample": d.subtalker.do_sample, "subtalker_temperature": d.subtalker.temperature,
            "subtalker_top_k": d.subtalker.top_k, "subtalker_top_p": d.subtalker.top_p,
            "max_new_tokens": d.max_new_tokens}


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
    if isinstance(budget, str):
        raise ValueError(f"frame_budget must be 'auto', None or a positive integer, got {budget!r}")
    return check_int("frame_budget", budget, 1, INT32_MAX)


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (0x3040 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF
            or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FA1F)


def per_frame_timings(raw: dict[str, float]) -> dict[str, float]:
    frames = int(raw["frames"])
    per = max(frames, 1)
    return {"prefill_ms": raw["prefill_ms"], "talker_ms_per_frame": raw["talker_ms"] / per,
            "predictor_ms_per_frame": raw["predictor_ms"] / per, "frames": frames}
