"""The generation settings: one frozen, validated GenerationConfig with the qwen-tts names.

Each setting is declared once, as a GenerationConfig field whose metadata (a `Setting`) says
its type and range, its reference default, the native field it fills, its command-line flag and
whether the server takes it. Everything else is derived from those declarations: the checks
here, `SETTINGS`, the CLI flags of speak and batch (cli/speak.py), the server's request body
(server/schemas.py), the manifest fields (bulk/manifest.py), the converter's fallback defaults
(convert/hfconfig.py), and engine.read_defaults / engine.native_params (docs/architecture.md,
"Adding a sampling parameter").

Settings left as None take the model's generation defaults (the GGUF copy of
generation_config.json), as the reference's wrapper merges them; every value is checked here,
before any reaches C++.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_NEW_TOKENS = 32768  # the talker's context (max_position_embeddings); the KV cache is sized from it
INT32_MAX = 2**31 - 1
SEED_LIMIT = 2**64
# The sampler works in float32 and divides logits by these: outside this range they overflow to inf/NaN.
SCALE_RANGE = (1e-6, 1e6)

FrameBudget = int | str | None  # "auto", a number of frames, or None for no limit


@dataclass(frozen=True)
class Setting:
    """One generation setting's declaration (the metadata of its GenerationConfig field)."""
    kind: type               # bool, int or float
    native: str              # the GenerateParams field it fills, dotted below a network: "talker.top_k"
    default: Any             # the reference's value: generation_config.json's, or generate()'s
    lo: float = 0            # the range [lo, hi] ((lo, hi] with open_lo) of an int or float
    hi: float = 0
    open_lo: bool = False
    # generation_config.json holds it: a model's own value is stored in its GGUF and read back
    # (engine.read_defaults); `default` is then the converter's fallback. Otherwise `default` is
    # the value of every call that leaves the setting out.
    in_model: bool = True
    cli: bool = False        # a command-line flag of speak and batch: --top-k for top_k
    help: str = ""           # the flag's help; {default} stands for `default`
    server: bool = True      # a field of the server's request body (through extra_body)


def flag_of(name: str) -> str:
    """A setting's command-line flag: its name with dashes (top_k: --top-k)."""
    return "--" + name.replace("_", "-")


def setting(kind: type, native: str, default: Any, *, lo: float = 0, hi: float = 0, open_lo: bool = False,
            in_model: bool = True, cli: bool = False, help: str = "", server: bool = True) -> Any:
    """A GenerationConfig field declared as a generation setting."""
    return dataclasses.field(metadata={"setting": Setting(kind, native, default, lo, hi, open_lo, in_model, cli,
                                                          help, server)})


@dataclass(frozen=True, kw_only=True)
class GenerationConfig:
    """Validated settings of one generation. Build it with `resolve`; a request's config keeps the
    caller's frame_budget ("auto", an integer or None) and `for_piece` turns it into the piece's
    own frame count (None: no limit) and seed.

    Declaring a field with `setting(...)` is all it takes to add a setting on the Python side."""
    do_sample: bool = setting(bool, "talker.do_sample", True)
    # 0 passes for greedy decoding, which ignores it (resolve)
    temperature: float = setting(float, "talker.temperature", 0.9, lo=0.0, hi=SCALE_RANGE[1], cli=True,
                                 help="talker sampling temperature: lower is steadier, higher more varied "
                                      "(model default {default})")
    # above the vocabulary it keeps every token, as torch
    top_k: int = setting(int, "talker.top_k", 50, lo=0, hi=INT32_MAX, cli=True,
                         help="sample the talker's first codebook from the K most likely codes (0: all)")
    top_p: float = setting(float, "talker.top_p", 1.0, lo=0.0, hi=1.0, open_lo=True, cli=True,
                           help="nucleus sampling: the smallest set of codes whose probability reaches P, in (0, 1]")
    repetition_penalty: float = setting(float, "repetition_penalty", 1.05, lo=SCALE_RANGE[0], hi=SCALE_RANGE[1],
                                        cli=True, help="above 1 discourages repeating first-codebook codes "
                                                       "(model default {default})")
    subtalker_dosample: bool = setting(bool, "subtalker.do_sample", True)
    subtalker_temperature: float = setting(float, "subtalker.temperature", 0.9, lo=0.0, hi=SCALE_RANGE[1])
    subtalker_top_k: int = setting(int, "subtalker.top_k", 50, lo=0, hi=INT32_MAX)
    subtalker_top_p: float = setting(float, "subtalker.top_p", 1.0, lo=0.0, hi=1.0, open_lo=True)
    # the reference emits at most max_new_tokens - 1 frames: 1 would always give empty audio
    max_new_tokens: int = setting(int, "max_new_tokens", 2048, lo=2, hi=MAX_NEW_TOKENS, cli=True,
                                  help="at most this many frames - 1 (12.5 frames per second; at least 2)")
    # generate()'s default, not in generation_config.json: EOS is masked until two frames exist
    # (docs/model.md, "Generation loop")
    min_new_tokens: int = setting(int, "min_new_tokens", 2, lo=0, hi=MAX_NEW_TOKENS, in_model=False,
                                  server=False)
    seed: int
    frame_budget: FrameBudget = "auto"

    @classmethod
    def resolve(cls, defaults: dict[str, Any], given: dict[str, Any], seed: int | None = None,
                frame_budget: Any = "auto") -> GenerationConfig:
        """Merge explicit settings over the defaults and check them all: TypeError for a wrong type
        (bool is not an integer), ValueError for a value out of range, each naming the setting.
        `defaults` holds the model's values of the settings generation_config.json has."""
        specs = settings_of(cls)
        s: dict[str, Any] = {}
        for k, spec in specs.items():
            v = given.get(k)
            if v is None:
                v = defaults[k] if spec.in_model else defaults.get(k, spec.default)
                if spec.kind is bool:
                    v = bool(v)  # a GGUF may store the flag as an integer
            s[k] = check_value(k, spec, v)
        for prefix, sampling in (("", s["do_sample"]), ("subtalker_", s["subtalker_dosample"])):
            if sampling and s[prefix + "temperature"] < SCALE_RANGE[0]:
                raise ValueError(f"{prefix}temperature must be at least {SCALE_RANGE[0]:g} when sampling, "
                                 f"got {s[prefix + 'temperature']}")
        s["seed"] = check_seed(secrets.randbits(63) if seed is None else seed)
        return cls(**s, frame_budget=parse_frame_budget(frame_budget))

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


@functools.cache
def settings_of(cls: type) -> dict[str, Setting]:
    """The settings a config class declares, in declaration order, by name."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}


# Every generation setting, by name: the list the CLI, the server, manifests and the engine derive
# theirs from (they read it when they build their pieces, so a test may patch it).
SETTING_SPECS = settings_of(GenerationConfig)
# The sampling keyword arguments synthesize/stream/generate_codes take (seed and frame_budget
# are arguments of their own).
SETTINGS = tuple(SETTING_SPECS)


def model_defaults(specs: dict[str, Setting] | None = None) -> dict[str, Any]:
    """The reference's generation_config.json values: the converter's fallback for a checkpoint
    without one (or without some of its keys)."""
    return {k: s.default for k, s in (specs or SETTING_SPECS).items() if s.in_model}


def frame_budget_of(text: str, budget: FrameBudget) -> int | None:
    """The runaway guard: the most frames a text may plausibly need, or None for no limit.

    "auto" allows 128 frames (10 s) plus 1.4 frames per character and 8 per CJK or digit
    character (digits expand into words); spoken text needs well under half of that, while a
    generation that lost its EOS (about 1 in 200 sampled runs) runs to the cap
    (docs/model.md, "Generation loop").
    """
    budget = parse_frame_budget(budget)
    if budget == "auto":
        heavy = sum(1 for ch in text if ch.isdigit() or _is_cjk(ch))
        return int(128 + 1.4 * (len(text) - heavy) + 8 * heavy)
    return budget  # type: ignore[return-value]


def parse_frame_budget(value: Any) -> FrameBudget:
    """The one reader of a frame budget, whatever it comes from (the API, --frame-budget, a
    manifest field): "auto"; no limit as None or "none"; or a number of frames in [1, 2**31),
    an integer or its decimal text. Case and surrounding blanks of text do not matter.
    ValueError for another text or a number out of range, TypeError for another type."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("auto", "none"):
            return None if text == "none" else "auto"
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"frame_budget must be 'auto', 'none' or an integer in [1, 2**31), got {value!r}") \
                from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"frame_budget must be 'auto', 'none' or a positive integer, got {type(value).__name__} "
                        f"{value!r}")
    return check_int("frame_budget", value, 1, INT32_MAX)


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
    """One generation setting, checked and normalised (TypeError / ValueError naming it); KeyError
    for a name that is no setting."""
    return check_value(name, SETTING_SPECS[name], value)


def check_value(name: str, spec: Setting, value: Any) -> Any:
    """A value of the declared setting `spec`: its type and range."""
    if spec.kind is bool:
        return check_bool(name, value)
    if spec.kind is int:
        return check_int(name, value, int(spec.lo), int(spec.hi))
    return check_float(name, value, spec.lo, spec.hi, open_lo=spec.open_lo)
