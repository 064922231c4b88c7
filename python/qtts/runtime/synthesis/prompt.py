"""Talker prompts, built exactly as the reference's `Qwen3TTSForConditionalGeneration.generate`
does (docs/model.md, "Prompt layouts"): CustomVoice (a named speaker), VoiceDesign (an instruct)
and Base voice clones (an x-vector in the speaker slot, plus the reference transcript and codes
for ICL). A prompt is the embedding matrix for the prefill and the trailing text vectors the
generation loop adds one per frame."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..audio.voice import Voice, check_voice
from ..engine.context import ModelContext
from ..engine.engine import SessionHandle


@dataclass(frozen=True)
class Conditioning:
    """A validated request: what the codec prefill and the instruct block will hold."""
    language_id: int | None  # None: "auto" without a dialect speaker (the nothink block)
    speaker_id: int | None
    instruct: str | None
    clone: Voice | None = None  # Base models: the x-vector (and ICL reference)


@dataclass(frozen=True)
class Prompt:
    embeddings: np.ndarray  # [L, D] float32, the prefill input
    trailing: np.ndarray    # [T, D] float32, added to the decode steps 0..T-1 (then PAD)
    tokenize_ms: float = 0.0


def resolve_voice(ctx: ModelContext, *, language: str, speaker: str | None, instruct: str | None,
                  voice: Voice | None = None) -> Conditioning:
    """Check a request against the model the way the reference's wrapper does, raising ValueError
    where the reference would fail or silently ignore an argument."""
    variant = ctx.variant
    if variant == "base":
        if voice is None:
            raise ValueError("a base model clones a voice: pass voice= (from create_voice) or ref_audio=")
        if speaker:
            raise ValueError("speaker is for custom_voice models; a base model speaks with the cloned voice")
        if instruct:
            raise ValueError("base models take no instruct (the reference's generate_voice_clone has none)")
        check_voice(voice, ctx.fingerprint, ctx.hidden_size, ctx.num_code_groups)
    elif voice is not None:
        raise ValueError(f"voice cloning needs a base model; this one is {variant!r}")
    lang = str(language).lower()
    if lang not in ctx.languages:
        raise ValueError(f"unsupported language {language!r}; supported: {', '.join(ctx.languages)}")
    table = ctx.language_ids
    language_id = None if lang == "auto" else table[lang]

    speaker_id = None
    if variant == "custom_voice":
        if not speaker:
            raise ValueError(f"a custom_voice model needs a speaker; available: {', '.join(ctx.speaker_names)}")
        known = {name: (sid, dialect) for name, sid, dialect in ctx.speakers}
        if speaker.lower() not in known:
            raise ValueError(f"unknown speaker {speaker!r}; available: {', '.join(ctx.speaker_names)}")
        speaker_id, dialect = known[speaker.lower()]
        # A dialect speaker overrides chinese/auto with its dialect's language id, as the reference's
        # generate does (docs/model.md, "Prompt layouts").
        if dialect and lang in ("chinese", "auto"):
            if dialect not in table:
                raise ValueError(f"speaker {speaker!r} has dialect {dialect!r}, which the model has no id for")
            language_id = table[dialect]
        # The reference's generate_custom_voice tests `tts_model_size in "0b6"`, a substring test:
        # 0.6B models drop instruct (docs/model.md, "Reference quirks").
        if instruct and ctx.size in "0b6":
            raise ValueError(f"this {ctx.size} custom_voice model ignores instruct; pass instruct=None")
    elif speaker:
        raise ValueError("speaker is only for custom_voice models; describe the voice with instruct")
    # The reference's wrapper treats an empty instruct as none (generate_custom_voice, generate_voice_design).
    return Conditioning(language_id, speaker_id, instruct or None, voice)


def build_prompt(ctx: ModelContext, s: SessionHandle, text: str, cond: Conditioning, *, non_streaming_mode: bool,
                 text_ids: list[int] | None = None, text_open: bool = False) -> Prompt:
    """The prompt of one text piece, computed in the caller's engine session. Streamed text
    (docs/model.md, "Text streamed in") passes the piece's final tokens so far as text_ids with
    text_open: the trailing text then lacks its EOS (and an ICL prompt needs more text tokens
    than the reference has frames, beyond its transcript's)."""
    tok = ctx.tokenizer
    t0 = time.perf_counter()
    if text_ids is None:
        text_ids = tok.prompt_text_ids(text)  # validates: non-empty, template slices intact
    role = tok.assistant_ids(text)[:3]
    tid = ctx.text_ids
    instruct_ids = tok.instruct_ids(cond.instruct) if cond.instruct else []
    icl = cond.clone is not None and not cond.clone.x_vector_only_mode
    ref_ids = tok.ref_prompt_ids(cond.clone.ref_text or "") if icl else []
    tokenize_ms = (time.perf_counter() - t0) * 1e3
    # One projection call for every text vector the prompt needs.
    specials = [tid["tts_bos"], tid["tts_eos"], tid["tts_pad"]]
    p = s.text_embed(role + specials + ref_ids + text_ids + instruct_ids)
    p_role, (bos, eos, pad), p_ref, p_text, p_instruct = np.split(
        p, np.cumsum([3, 3, len(ref_ids), len(text_ids)]))

    cid = ctx.codec_ids
    think = ([cid["nothink"], cid["think_bos"], cid["think_eos"]] if cond.language_id is None
             else [cid["think"], cid["think_bos"], cond.language_id, cid["think_eos"]])
    speaker = [] if cond.speaker_id is None else [cond.speaker_id]
    seq = think + speaker + [cid["pad"], cid["bos"]]
    c = s.codec_embed(seq)
    if cond.clone is not None:  # the x-vector takes the speaker slot
        c = np.concatenate([c[:len(think)], cond.clone.x_vector[None].astype(np.float32), c[len(think):]])
    c_pad, c_bos = c[-2], c[-1]

    # The codec prefill without its final BOS, under PAD text with BOS text on the last slot.
    codec_text = np.concatenate([np.repeat(pad[None], len(c) - 2, axis=0), bos[None]]) + c[:-1]
    parts = [p_instruct, p_role, codec_text]
    if icl:
        assert cond.clone is not None and cond.clone.ref_codes is not None
        txt = np.concatenate([p_ref, p_text] if text_open else [p_ref, p_text, eos[None]])
        block, trailing = _icl_block(s, txt, cond.clone.ref_codes, c_bos, c_pad, pad, non_streaming_mode,
                                     text_open)
        parts.append(block)
    elif non_streaming_mode:
        parts += [np.concatenate([p_text, eos[None]]) + c_pad, (pad + c_bos)[None]]
        trailing = pad[None]
    else:
        parts.append((p_text[0] + c_bos)[None])
        trailing = p_text[1:] if text_open else np.concatenate([p_text[1:], eos[None]])
    return Prompt(np.ascontiguousarray(np.concatenate(parts), dtype=np.float32),
                  np.ascontiguousarray(trailing, dtype=np.float32), tokenize_ms)


def _icl_block(s: SessionHandle, txt: np.ndarray, ref_codes: np.ndarray, c_bos: np.ndarray, c_pad: np.ndarray,
               pad: np.ndarray, non_streaming_mode: bool, text_open: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The ICL block and trailing vectors, as the reference's `generate_icl_prompt`: the reference
    and target text against C(bos) followed by the reference frames (docs/model.md, "Prompt layouts").
    Open (streamed) text without its EOS must already cover every frame slot."""
    frames = s.frame_embed(ref_codes)
    cod = np.concatenate([c_bos[None], frames])
    t1, t2 = len(txt), len(cod)
    if non_streaming_mode:
        return np.concatenate([txt + c_pad, cod + pad]), pad[None]
    if text_open:
        if t1 < t2:
            raise ValueError(f"streamed ICL text needs {t2} text tokens before the generation starts, got {t1}")
        return txt[:t2] + cod, txt[t2:]
    if t1 > t2:
        return txt[:t2] + cod, txt[t2:]
    return np.concatenate([txt, np.repeat(pad[None], t2 - t1, axis=0)]) + cod, pad[None]
