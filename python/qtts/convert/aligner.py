"""Convert a Qwen3-ForcedAligner checkpoint (Hugging Face layout, `qwen3_asr` config) into one GGUF
file of its own architecture (docs/aligner.md, "The file").

The file holds the audio encoder, the decoder with its timestamp head, the ids the prompt needs,
the time one timestamp class stands for, the log-mel front end the encoder expects (from
preprocessor_config.json) and the text tokenizer. Tensors keep their checkpoint layout; nothing
is folded. The first convolution (one input channel) stays torch's [out, 1, 3, 3], the two
others are stored as the matrices [out, in * 9] they are multiplied as (the same values in the
same order: ggml_im2col's columns are (in, row, column)). Weight types follow the converter's and
the quantizer's policy (convert/quantize.py): the projections of both transformers, the second
and third convolutions, the encoder's conv output projection and the head change type, the token
table is read as a table, norms, biases and the first convolution stay F32.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter

from ..runtime.text.tokenizer import tokenizer_metadata
from ..threads import resolve_threads
from . import hfconfig
from .gguf_write import OutTensor, write_gguf
from .names import KV, TN
from .safetensors_io import TensorRef, open_checkpoint
from .tensors import Entry, choose_types, encode, nbytes, write_metadata
from .weight_types import FILE_TYPE, WEIGHT_TYPES

MODEL_TYPE = "qwen3_asr"
THINKER_TYPE = "qwen3_forced_aligner"
# The Whisper feature extractor's defaults, for a checkpoint without preprocessor_config.json.
_FRONT_END = {"sampling_rate": 16000, "n_fft": 400, "hop_length": 160}
# torch's nn.LayerNorm default, which the reference's audio encoder keeps
_LAYER_NORM_EPS = 1e-5

_ENC_LAYER = {
    "self_attn.q_proj.weight": TN.L_ATTN_Q, "self_attn.q_proj.bias": TN.L_ATTN_Q_B,
    "self_attn.k_proj.weight": TN.L_ATTN_K, "self_attn.k_proj.bias": TN.L_ATTN_K_B,
    "self_attn.v_proj.weight": TN.L_ATTN_V, "self_attn.v_proj.bias": TN.L_ATTN_V_B,
    "self_attn.out_proj.weight": TN.L_ATTN_OUT, "self_attn.out_proj.bias": TN.L_ATTN_OUT_B,
    "self_attn_layer_norm.weight": TN.L_ATTN_NORM, "self_attn_layer_norm.bias": TN.L_ATTN_NORM_B,
    "fc1.weight": TN.L_FFN_UP, "fc1.bias": TN.L_FFN_UP_B, "fc2.weight": TN.L_FFN_DOWN, "fc2.bias": TN.L_FFN_DOWN_B,
    "final_layer_norm.weight": TN.L_FFN_NORM, "final_layer_norm.bias": TN.L_FFN_NORM_B,
}
_DEC_LAYER = {
    "self_attn.q_proj.weight": TN.L_ATTN_Q, "self_attn.k_proj.weight": TN.L_ATTN_K,
    "self_attn.v_proj.weight": TN.L_ATTN_V, "self_attn.o_proj.weight": TN.L_ATTN_OUT,
    "self_attn.q_norm.weight": TN.L_ATTN_Q_NORM, "self_attn.k_norm.weight": TN.L_ATTN_K_NORM,
    "input_layernorm.weight": TN.L_ATTN_NORM, "post_attention_layernorm.weight": TN.L_FFN_NORM,
    "mlp.gate_proj.weight": TN.L_FFN_GATE, "mlp.up_proj.weight": TN.L_FFN_UP, "mlp.down_proj.weight": TN.L_FFN_DOWN,
}
_PLAIN = {
    "thinker.audio_tower.conv_out.weight": (TN.AENC_CONV_OUT, "linear"),
    "thinker.audio_tower.ln_post.weight": (TN.AENC_OUTPUT_NORM, "f32"),
    "thinker.audio_tower.ln_post.bias": (TN.AENC_OUTPUT_NORM_B, "f32"),
    "thinker.audio_tower.proj1.weight": (TN.AENC_PROJ1, "linear"),
    "thinker.audio_tower.proj1.bias": (TN.AENC_PROJ1_B, "f32"),
    "thinker.audio_tower.proj2.weight": (TN.AENC_PROJ2, "linear"),
    "thinker.audio_tower.proj2.bias": (TN.AENC_PROJ2_B, "f32"),
    "thinker.model.embed_tokens.weight": (TN.ADEC_TOKEN_EMBD, "text_embd"),
    "thinker.model.norm.weight": (TN.ADEC_OUTPUT_NORM, "f32"),
    "thinker.lm_head.weight": (TN.ADEC_TIMESTAMP_HEAD, "linear"),
}


def is_aligner(hf_dir: str | os.PathLike[str]) -> bool:
    """Whether `hf_dir` holds a Qwen3-ASR-family checkpoint (config.json model_type qwen3_asr)."""
    path = Path(hf_dir) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False  # the TTS converter reports what is wrong with it
    return isinstance(config, dict) and config.get("model_type") == MODEL_TYPE


def metadata(root: Path) -> list[tuple[str, Any, str]]:
    """GGUF key/value/kind triples of an aligner checkpoint (kinds as hfconfig.metadata's)."""
    config = hfconfig._load_json(root / "config.json")
    f = hfconfig._Fields(root / "config.json", config)
    kind = f.get("thinker_config.model_type", str)
    if kind != THINKER_TYPE:
        raise ValueError(f"{f.path}: thinker_config.model_type is {kind!r}: a Qwen3-ASR speech recognizer, not the "
                         f"forced aligner ({THINKER_TYPE!r}); qtts runs only the aligner")
    front = dict(_FRONT_END)
    pre_path = root / "preprocessor_config.json"
    pre: dict[str, Any] = hfconfig._load_json(pre_path) if pre_path.exists() else {}
    p = hfconfig._Fields(pre_path, {**front, **pre})
    if float(pre.get("dither", 0.0)) != 0.0:
        raise ValueError(f"{pre_path}: dither {pre['dither']} adds noise to every log-mel; qtts computes it without")
    t, a, x = "thinker_config.", "thinker_config.audio_config.", "thinker_config.text_config."
    for field, want in ((a + "activation_function", "gelu"), (x + "hidden_act", "silu")):
        if f.get(field, str) != want:
            raise ValueError(f"{f.path}: {field} is {f.get(field, str)!r}; the released aligner's {want!r} only")
    mels = f.get(a + "num_mel_bins")
    if "feature_size" in pre and p.get("feature_size") != mels:
        raise ValueError(f"{pre_path}: feature_size {p.get('feature_size')} differs from the encoder's "
                         f"num_mel_bins {mels}")

    def key(pattern: str, prefix: str) -> str:
        return pattern.replace("%s", prefix)

    kv: list[tuple[str, Any, str]] = [
        (KV.ALIGNER_FORMAT_VERSION, KV.ALIGNER_FORMAT, "u32"),
        (KV.ALIGNER_AUDIO_START_ID, f.get(t + "audio_start_token_id"), "u32"),
        (KV.ALIGNER_AUDIO_END_ID, f.get(t + "audio_end_token_id"), "u32"),
        (KV.ALIGNER_AUDIO_PAD_ID, f.get(t + "audio_token_id"), "u32"),
        (KV.ALIGNER_TIMESTAMP_ID, f.get("timestamp_token_id"), "u32"),
        (KV.ALIGNER_TIMESTAMP_MS, f.get("timestamp_segment_time", float), "f32"),
        (KV.ALIGNER_VOCAB_SIZE, f.get(x + "vocab_size"), "u32"),
        (KV.ALIGNER_CLASS_COUNT, f.get(t + "classify_num"), "u32"),
        (KV.AENC_SAMPLE_RATE, p.get("sampling_rate"), "u32"),
        (KV.AENC_N_FFT, p.get("n_fft"), "u32"),
        (KV.AENC_HOP_LENGTH, p.get("hop_length"), "u32"),
        (KV.AENC_MEL_BINS, mels, "u32"),
        (KV.AENC_CONV_CHANNELS, f.get(a + "downsample_hidden_size"), "u32"),
        (key(KV.T_EMBEDDING_LENGTH, KV.P_ALIGNER_AUDIO), f.get(a + "d_model"), "u32"),
        (key(KV.T_FEED_FORWARD_LENGTH, KV.P_ALIGNER_AUDIO), f.get(a + "encoder_ffn_dim"), "u32"),
        (key(KV.T_BLOCK_COUNT, KV.P_ALIGNER_AUDIO), f.get(a + "encoder_layers"), "u32"),
        (key(KV.T_HEAD_COUNT, KV.P_ALIGNER_AUDIO), f.get(a + "encoder_attention_heads"), "u32"),
        (key(KV.T_NORM_EPS, KV.P_ALIGNER_AUDIO), _LAYER_NORM_EPS, "f32"),
        (KV.AENC_OUTPUT_LENGTH, f.get(a + "output_dim"), "u32"),
        (KV.AENC_CHUNK_FRAMES, 2 * f.get(a + "n_window"), "u32"),
        (KV.AENC_WINDOW_FRAMES, f.get(a + "n_window_infer"), "u32"),
    ]
    languages = config.get("support_languages")
    if languages:
        if not isinstance(languages, list) or not all(isinstance(s, str) for s in languages):
            raise ValueError(f"{f.path}: support_languages must be a list of names")
        kv.append((KV.ALIGNER_LANGUAGES, languages, "arr_str"))
    kv += hfconfig._transformer(f, KV.P_ALIGNER_DEC, x)
    return kv


def _flatten_kernel(refs: list[np.ndarray]) -> np.ndarray:
    """A Conv2d kernel [out, in, kh, kw] as the matrix [out, in * kh * kw] it is multiplied as."""
    return refs[0].reshape(refs[0].shape[0], -1)


def plan(model: dict[str, TensorRef]) -> list[Entry]:
    """Every checkpoint tensor's GGUF entry; an unknown tensor is an error."""
    entries = []
    for name, ref in model.items():
        entry = _entry(name, ref)
        if entry is None:
            raise ValueError(f"{ref.file}: unexpected tensor {name!r} (not part of the Qwen3-ForcedAligner layout)")
        entries.append(entry)
    return entries


def _entry(name: str, ref: TensorRef) -> Entry | None:
    if name in _PLAIN:
        gname, role = _PLAIN[name]
        return Entry(gname, [ref], ref.shape, role)
    m = re.fullmatch(r"thinker\.audio_tower\.conv2d([123])\.(weight|bias)", name)
    if m:
        i = int(m.group(1)) - 1
        if m.group(2) == "bias" or i == 0:
            return Entry((TN.AENC_CONV_B if m.group(2) == "bias" else TN.AENC_CONV) % i, [ref], ref.shape, "f32")
        out, cin, kh, kw = ref.shape
        return Entry(TN.AENC_CONV % i, [ref], (out, cin * kh * kw), "linear", _flatten_kernel)
    for prefix, net, table in (("thinker.audio_tower.layers.", TN.AENC, _ENC_LAYER),
                               ("thinker.model.layers.", TN.ADEC, _DEC_LAYER)):
        if name.startswith(prefix):
            idx, _, rest = name[len(prefix):].partition(".")
            if idx.isdigit() and rest in table:
                gname = table[rest] % (net, int(idx))
                return Entry(gname, [ref], ref.shape, "linear" if len(ref.shape) == 2 else "f32")
    return None


def convert_aligner(hf_dir: str | os.PathLike[str], out_path: str | os.PathLike[str], out_type: str = "f32",
                    name: str | None = None, log: Callable[[str], None] | None = None,
                    n_threads: int | None = None) -> Path:
    """Write `out_path` atomically from the aligner checkpoint in `hf_dir`; returns its path."""
    if out_type not in WEIGHT_TYPES:
        raise ValueError(f"unknown --type {out_type!r}; choose one of {', '.join(WEIGHT_TYPES)}")
    threads = resolve_threads(n_threads)
    hf = Path(hf_dir)
    meta = metadata(hf)
    tok = tokenizer_metadata(hf)
    entries = plan(open_checkpoint(hf))
    choose_types(entries, out_type)

    def add_metadata(writer: GGUFWriter) -> None:
        writer.add_string(KV.MODEL_NAME, name or hf.resolve().name)
        writer.add_uint32(KV.FILE_TYPE, FILE_TYPE[out_type])
        writer.add_string(KV.ALIGNER_SOURCE, hf.resolve().name)
        write_metadata(writer, meta)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("qwen2")
        writer.add_token_list(tok.tokens)
        writer.add_token_types(tok.token_types)
        writer.add_token_merges(tok.merges)

    tensors = [OutTensor(e.name, e.shape, e.qtype, nbytes(e), lambda e=e: encode(e, threads)) for e in entries]
    return write_gguf(out_path, add_metadata, tensors, log, arch=KV.ALIGNER_ARCH_NAME)
