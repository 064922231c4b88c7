"""Read a released Qwen3-TTS checkpoint's configs and turn them into GGUF metadata.

Only config.json is trusted for hyper-parameters: the reference's Python class defaults differ
from the released models (docs/model.md, "Configuration").
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime.settings.config import model_defaults
from .names import KV

VARIANTS = ("base", "custom_voice", "voice_design")
# The released models' generation_config.json values, for a checkpoint without the file or some
# of its keys: declared with the settings (runtime/settings/config.py), their one home.
GENERATION_DEFAULTS: dict[str, Any] = model_defaults()


@dataclass(frozen=True)
class Checkpoint:
    root: Path
    config: dict[str, Any]
    codec: dict[str, Any]
    generation: dict[str, Any]

    @property
    def variant(self) -> str:
        return self.config["tts_model_type"]

    @property
    def talker(self) -> dict[str, Any]:
        return self.config["talker_config"]


def _load_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ValueError(f"{path}: file not found (expected a Qwen3-TTS checkpoint directory)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


class _Fields:
    """Typed access to nested config fields with errors that name the file and the field."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path, self.data = path, data

    def get(self, dotted: str, kind: type | tuple[type, ...] = int) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ValueError(f"{self.path}: field {dotted!r} is missing")
            node = node[part]
        if kind is float and isinstance(node, int) and not isinstance(node, bool):
            node = float(node)
        if not isinstance(node, kind) or (kind is int and isinstance(node, bool)):
            raise ValueError(f"{self.path}: field {dotted!r} has type {type(node).__name__}, expected {kind}")
        return node

    def ints(self, dotted: str) -> list[int]:
        vals = self.get(dotted, list)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            raise ValueError(f"{self.path}: field {dotted!r} must be a list of integers")
        return vals


def read_checkpoint(root: str | Path) -> Checkpoint:
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory")
    cfg = _load_json(root / "config.json")
    codec = _load_json(root / "speech_tokenizer" / "config.json")
    gen_path = root / "generation_config.json"
    gen = dict(GENERATION_DEFAULTS)
    if gen_path.exists():
        gen.update({k: v for k, v in _load_json(gen_path).items() if k in GENERATION_DEFAULTS})
    f = _Fields(root / "config.json", cfg)
    variant = f.get("tts_model_type", str)
    if variant not in VARIANTS:
        raise ValueError(f"{root / 'config.json'}: tts_model_type {variant!r} is not one of {VARIANTS}")
    tok_type = f.get("tokenizer_type", str)
    if tok_type != "qwen3_tts_tokenizer_12hz":
        raise ValueError(f"{root / 'config.json'}: tokenizer_type {tok_type!r} is not supported "
                         "(only the 12 Hz models are)")
    if variant == "base":
        f.get("speaker_encoder_config", dict)
    return Checkpoint(root, cfg, codec, gen)


def metadata(ck: Checkpoint) -> list[tuple[str, Any, str]]:
    """GGUF key/value/kind triples (kind: u32, f32, bool, str, arr_i32, arr_str)."""
    f = _Fields(ck.root / "config.json", ck.config)
    c = _Fields(ck.root / "speech_tokenizer" / "config.json", ck.codec)
    kv: list[tuple[str, Any, str]] = [
        (KV.FORMAT_VERSION, KV.FORMAT, "u32"),
        (KV.VARIANT, ck.variant, "str"),
        (KV.SIZE, f.get("tts_model_size", str), "str"),
        (KV.TEXT_IM_START_ID, f.get("im_start_token_id"), "u32"),
        (KV.TEXT_IM_END_ID, f.get("im_end_token_id"), "u32"),
        (KV.TEXT_PAD_ID, f.get("tts_pad_token_id"), "u32"),
        (KV.TEXT_BOS_ID, f.get("tts_bos_token_id"), "u32"),
        (KV.TEXT_EOS_ID, f.get("tts_eos_token_id"), "u32"),
    ]
    t = "talker_config."
    for key, field in ((KV.CODEC_PAD_ID, "codec_pad_id"), (KV.CODEC_BOS_ID, "codec_bos_id"),
                       (KV.CODEC_EOS_ID, "codec_eos_token_id"), (KV.CODEC_THINK_ID, "codec_think_id"),
                       (KV.CODEC_NOTHINK_ID, "codec_nothink_id"), (KV.CODEC_THINK_BOS_ID, "codec_think_bos_id"),
                       (KV.CODEC_THINK_EOS_ID, "codec_think_eos_id")):
        kv.append((key, f.get(t + field), "u32"))

    langs = f.get(t + "codec_language_id", dict)
    kv.append((KV.LANGUAGE_NAMES, list(langs), "arr_str"))
    kv.append((KV.LANGUAGE_IDS, [_int_id(f, f"{t}codec_language_id.{k}", v) for k, v in langs.items()], "arr_i32"))
    spk = ck.talker.get("spk_id") or {}
    dialect = ck.talker.get("spk_is_dialect") or {}
    if spk:
        for name in spk:
            d = dialect.get(name, False)
            if d and d not in langs:
                raise ValueError(f"{f.path}: speaker {name!r} has dialect {d!r} missing from codec_language_id")
        kv.append((KV.SPEAKER_NAMES, list(spk), "arr_str"))
        kv.append((KV.SPEAKER_IDS, [_int_id(f, f"{t}spk_id.{k}", v) for k, v in spk.items()], "arr_i32"))
        kv.append((KV.SPEAKER_DIALECTS, [dialect.get(k) or "" for k in spk], "arr_str"))

    kv += _transformer(f, KV.P_TALKER, t)
    kv += [(KV.TALKER_TEXT_VOCAB_SIZE, f.get(t + "text_vocab_size"), "u32"),
           (KV.TALKER_TEXT_EMBEDDING_LENGTH, f.get(t + "text_hidden_size"), "u32"),
           (KV.TALKER_CODEC_VOCAB_SIZE, f.get(t + "vocab_size"), "u32"),
           (KV.TALKER_NUM_CODE_GROUPS, f.get(t + "num_code_groups"), "u32"),
           (KV.TALKER_MROPE_SECTION, f.ints(t + "rope_scaling.mrope_section"), "arr_i32")]
    p = t + "code_predictor_config."
    kv += _transformer(f, KV.P_CODE_PRED, p)
    kv.append((KV.CODE_PRED_VOCAB_SIZE, f.get(p + "vocab_size"), "u32"))
    if f.get(p + "num_code_groups") != f.get(t + "num_code_groups"):
        raise ValueError(f"{f.path}: code_predictor_config.num_code_groups differs from talker_config's")

    if ck.variant == "base":
        s = "speaker_encoder_config."
        kv += [(KV.SPK_EMBEDDING_LENGTH, f.get(s + "enc_dim"), "u32"),
               (KV.SPK_MEL_DIM, ck.config[s[:-1]].get("mel_dim", 128), "u32"),
               (KV.SPK_CHANNELS, ck.config[s[:-1]].get("enc_channels", [512, 512, 512, 512, 1536]), "arr_i32"),
               (KV.SPK_KERNEL_SIZES, ck.config[s[:-1]].get("enc_kernel_sizes", [5, 3, 3, 3, 1]), "arr_i32"),
               (KV.SPK_DILATIONS, ck.config[s[:-1]].get("enc_dilations", [1, 2, 3, 4, 1]), "arr_i32"),
               (KV.SPK_ATTENTION_CHANNELS, ck.config[s[:-1]].get("enc_attention_channels", 128), "u32"),
               (KV.SPK_RES2NET_SCALE, ck.config[s[:-1]].get("enc_res2net_scale", 8), "u32"),
               (KV.SPK_SE_CHANNELS, ck.config[s[:-1]].get("enc_se_channels", 128), "u32"),
               (KV.SPK_SAMPLE_RATE, f.get(s + "sample_rate"), "u32")]

    d = "decoder_config."
    kv += _transformer(c, KV.P_CODEC_DEC, d, context=False)
    kv += [(KV.DEC_CODEBOOK_SIZE, c.get(d + "codebook_size"), "u32"),
           (KV.DEC_CODEBOOK_DIM, c.get(d + "codebook_dim"), "u32"),
           (KV.DEC_LATENT_DIM, c.get(d + "latent_dim"), "u32"),
           (KV.DEC_DECODER_DIM, c.get(d + "decoder_dim"), "u32"),
           (KV.DEC_NUM_QUANTIZERS, c.get(d + "num_quantizers"), "u32"),
           (KV.DEC_SLIDING_WINDOW, c.get(d + "sliding_window"), "u32"),
           (KV.DEC_UPSAMPLE_RATES, c.ints(d + "upsample_rates"), "arr_i32"),
           (KV.DEC_UPSAMPLING_RATIOS, c.ints(d + "upsampling_ratios"), "arr_i32"),
           (KV.DEC_SAMPLE_RATE, c.get("output_sample_rate"), "u32"),
           (KV.DEC_HOP_LENGTH, c.get("decode_upsample_rate"), "u32")]
    e = "encoder_config."
    kv += _transformer(c, KV.P_CODEC_ENC, e, eps="norm_eps", context=False)
    kv += [(KV.ENC_NUM_FILTERS, c.get(e + "num_filters"), "u32"),
           (KV.ENC_KERNEL_SIZE, c.get(e + "kernel_size"), "u32"),
           (KV.ENC_LAST_KERNEL_SIZE, c.get(e + "last_kernel_size"), "u32"),
           (KV.ENC_RESIDUAL_KERNEL_SIZE, c.get(e + "residual_kernel_size"), "u32"),
           (KV.ENC_DILATION_GROWTH_RATE, c.get(e + "dilation_growth_rate"), "u32"),
           (KV.ENC_COMPRESS, c.get(e + "compress"), "u32"),
           (KV.ENC_UPSAMPLING_RATIOS, c.ints(e + "upsampling_ratios"), "arr_i32"),
           (KV.ENC_CODEBOOK_SIZE, c.get(e + "codebook_size"), "u32"),
           (KV.ENC_CODEBOOK_DIM, c.get(e + "codebook_dim"), "u32"),
           (KV.ENC_NUM_QUANTIZERS, c.get("encoder_valid_num_quantizers"), "u32"),
           (KV.ENC_SAMPLE_RATE, c.get("input_sample_rate"), "u32"),
           (KV.ENC_HOP_LENGTH, c.get("encode_downsample_rate"), "u32")]
    if c.get(e + "num_residual_layers") != 1:
        raise ValueError(f"{c.path}: encoder_config.num_residual_layers must be 1")

    g = ck.generation
    kv += [(KV.GEN_DO_SAMPLE, bool(g["do_sample"]), "bool"),
           (KV.GEN_TEMPERATURE, float(g["temperature"]), "f32"),
           (KV.GEN_TOP_K, int(g["top_k"]), "u32"),
           (KV.GEN_TOP_P, float(g["top_p"]), "f32"),
           (KV.GEN_REPETITION_PENALTY, float(g["repetition_penalty"]), "f32"),
           (KV.GEN_SUB_DO_SAMPLE, bool(g["subtalker_dosample"]), "bool"),
           (KV.GEN_SUB_TEMPERATURE, float(g["subtalker_temperature"]), "f32"),
           (KV.GEN_SUB_TOP_K, int(g["subtalker_top_k"]), "u32"),
           (KV.GEN_SUB_TOP_P, float(g["subtalker_top_p"]), "f32"),
           (KV.GEN_MAX_NEW_TOKENS, int(g["max_new_tokens"]), "u32")]
    return kv


def _int_id(f: _Fields, field: str, v: Any) -> int:
    # spk_id values may be plain ints or 1-element lists (docs/model.md, "Configuration")
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"{f.path}: field {field!r} must be an integer id")
    return v


def _transformer(f: _Fields, prefix: str, base: str, eps: str = "rms_norm_eps",
                 context: bool = True) -> list[tuple[str, Any, str]]:
    def key(pattern: str) -> str:
        return pattern.replace("%s", prefix)

    heads = f.get(base + "num_attention_heads")
    hidden = f.get(base + "hidden_size")
    head_dim = f.get(base + "head_dim") if "head_dim" in _node(f, base) else hidden // heads
    out = [(key(KV.T_EMBEDDING_LENGTH), hidden, "u32"),
           (key(KV.T_FEED_FORWARD_LENGTH), f.get(base + "intermediate_size"), "u32"),
           (key(KV.T_BLOCK_COUNT), f.get(base + "num_hidden_layers"), "u32"),
           (key(KV.T_HEAD_COUNT), heads, "u32"),
           (key(KV.T_HEAD_COUNT_KV), f.get(base + "num_key_value_heads"), "u32"),
           (key(KV.T_KEY_LENGTH), head_dim, "u32"),
           (key(KV.T_NORM_EPS), f.get(base + eps, float), "f32"),
           (key(KV.T_ROPE_FREQ_BASE), f.get(base + "rope_theta", float), "f32")]
    if context:
        out.append((key(KV.T_CONTEXT_LENGTH), f.get(base + "max_position_embeddings"), "u32"))
    return out


def _node(f: _Fields, base: str) -> dict[str, Any]:
    node: Any = f.data
    for part in base.rstrip(".").split("."):
        node = node[part]
    return node
