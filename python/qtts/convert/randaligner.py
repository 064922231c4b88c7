"""A full-size random-weight Qwen3-ForcedAligner-0.6B checkpoint, written with numpy (no torch),
for the aligner's benchmark (`qtts-cli bench align`, docs/aligner.md "Cost").

The configuration is the released one (its architecture fields); the tensor names and shapes
follow from it as the reference's classes lay them out (checked against them by
tests/qtts/convert/test_randaligner.py). Values as the tiny test fixture draws them
(tests/fixtures/aligner.py): fan-in weights (std 1/sqrt(fan_in), biases N(0, 0.02)) in the audio
encoder, whose conv stack would otherwise collapse, N(0, 0.02) in the decoder, and norms around
their constant. Each tensor draws from its own generator (randmodel's), so a seed gives the same
bytes.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .randmodel import _BIAS_STD, _DATA, _HF_STD, Init, _chunks_of, _write_json, _write_tensors

RELEASE = "0.6B-ForcedAligner"
# The ids of the released tokenizer's tokens the prompt uses.
_SPECIAL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|audio_start|>": 151669,
            "<|audio_end|>": 151670, "<|audio_pad|>": 151676, "<timestamp>": 151705}
CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3ASRForConditionalGeneration"], "model_type": "qwen3_asr",
    "timestamp_token_id": 151705, "timestamp_segment_time": 80,
    "support_languages": ["Chinese", "Cantonese", "English", "German", "Spanish", "French", "Italian", "Portuguese",
                          "Russian", "Korean", "Japanese"],
    "thinker_config": {
        "model_type": "qwen3_forced_aligner", "classify_num": 5000, "audio_token_id": 151676,
        "audio_start_token_id": 151669, "audio_end_token_id": 151670,
        "audio_config": {"num_mel_bins": 128, "encoder_layers": 24, "encoder_attention_heads": 16,
                         "encoder_ffn_dim": 4096, "d_model": 1024, "output_dim": 1024, "downsample_hidden_size": 480,
                         "max_source_positions": 1500, "n_window": 50, "n_window_infer": 800,
                         "activation_function": "gelu", "scale_embedding": False},
        "text_config": {"vocab_size": 152064, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu",
                        "rms_norm_eps": 1e-6, "rope_theta": 1000000, "max_position_embeddings": 65536,
                        "rope_scaling": {"interleaved": True, "mrope_interleaved": True, "mrope_section": [24, 20, 20],
                                         "rope_type": "default"},
                        "tie_word_embeddings": False},
    },
}
PREPROCESSOR = {"feature_extractor_type": "WhisperFeatureExtractor", "processor_class": "Qwen3ASRProcessor",
                "feature_size": 128, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400, "chunk_length": 30,
                "padding_side": "right", "padding_value": 0.0, "dither": 0.0, "return_attention_mask": True}


def tensor_table(config: dict[str, Any]) -> dict[str, tuple[list[int], str]]:
    """{name: (shape, "BF16")} of an aligner checkpoint with this config, in the reference's order."""
    t = config["thinker_config"]
    a, x = t["audio_config"], t["text_config"]
    d, c, ff = a["d_model"], a["downsample_hidden_size"], a["encoder_ffn_dim"]
    bins = a["num_mel_bins"]
    for _ in range(3):
        bins = (bins + 1) // 2
    out: dict[str, list[int]] = {}
    at = "thinker.audio_tower."
    for i in range(a["encoder_layers"]):
        p = f"{at}layers.{i}."
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            out[f"{p}self_attn.{proj}.weight"] = [d, d]
            out[f"{p}self_attn.{proj}.bias"] = [d]
        out[f"{p}self_attn_layer_norm.weight"] = out[f"{p}self_attn_layer_norm.bias"] = [d]
        out[f"{p}fc1.weight"], out[f"{p}fc1.bias"] = [ff, d], [ff]
        out[f"{p}fc2.weight"], out[f"{p}fc2.bias"] = [d, ff], [d]
        out[f"{p}final_layer_norm.weight"] = out[f"{p}final_layer_norm.bias"] = [d]
    out[f"{at}ln_post.weight"] = out[f"{at}ln_post.bias"] = [d]
    for i in (1, 2, 3):
        out[f"{at}conv2d{i}.weight"], out[f"{at}conv2d{i}.bias"] = [c, 1 if i == 1 else c, 3, 3], [c]
    out[f"{at}conv_out.weight"] = [d, c * bins]
    out[f"{at}proj1.weight"], out[f"{at}proj1.bias"] = [d, d], [d]
    out[f"{at}proj2.weight"], out[f"{at}proj2.bias"] = [a["output_dim"], d], [a["output_dim"]]
    h, hd, f = x["hidden_size"], x["head_dim"], x["intermediate_size"]
    q, kv = x["num_attention_heads"] * hd, x["num_key_value_heads"] * hd
    out["thinker.model.embed_tokens.weight"] = [x["vocab_size"], h]
    for i in range(x["num_hidden_layers"]):
        p = f"thinker.model.layers.{i}."
        out[f"{p}self_attn.q_proj.weight"], out[f"{p}self_attn.k_proj.weight"] = [q, h], [kv, h]
        out[f"{p}self_attn.v_proj.weight"], out[f"{p}self_attn.o_proj.weight"] = [kv, h], [h, q]
        out[f"{p}self_attn.q_norm.weight"] = out[f"{p}self_attn.k_norm.weight"] = [hd]
        out[f"{p}mlp.gate_proj.weight"] = out[f"{p}mlp.up_proj.weight"] = [f, h]
        out[f"{p}mlp.down_proj.weight"] = [h, f]
        out[f"{p}input_layernorm.weight"] = out[f"{p}post_attention_layernorm.weight"] = [h]
    out["thinker.model.norm.weight"] = [h]
    out["thinker.lm_head.weight"] = [t["classify_num"], h]
    return {name: (shape, "BF16") for name, shape in out.items()}


def tensor_init(name: str, shape: list[int]) -> Init:
    """How tensor `name` is drawn (the module docstring)."""
    audio = name.startswith("thinker.audio_tower.")
    if len(shape) >= 2:
        return Init("normal", 0.0, 1.0 / math.sqrt(math.prod(shape[1:])) if audio else _HF_STD)
    if name.endswith("norm.weight") or name.endswith("ln_post.weight"):
        return Init("normal", 1.0, 0.1)
    return Init("normal", 0.0, _BIAS_STD if audio else 0.01)


def write_random_aligner(out_dir: str | os.PathLike[str], *, seed: int = 0,
                         config: dict[str, Any] | None = None) -> Path:
    """Write a Hugging Face-layout aligner checkpoint with random weights into `out_dir` (the
    released configuration unless `config`); qtts.convert.convert accepts it."""
    cfg = config or CONFIG
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "config.json", cfg)
    _write_json(out / "preprocessor_config.json", PREPROCESSOR)
    _write_tokenizer(out)
    table = tensor_table(cfg)
    _write_tensors(out / "model.safetensors", table,
                   lambda name: _chunks_of(table[name], tensor_init(name, table[name][0]), seed, name))
    return out


def _write_tokenizer(out: Path) -> None:
    """A small byte-level BPE over randmodel's corpus, the prompt's special tokens at their
    released ids."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    from ..runtime.text.tokenizer import QWEN2_REGEX

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=1600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator(json.loads((_DATA / "bpe_corpus.json").read_text(encoding="utf-8")) * 20, trainer=trainer)
    bpe = json.loads(tok.to_str())["model"]
    vocab = {t: i for i, t in enumerate(sorted(bpe["vocab"], key=bpe["vocab"].__getitem__))}
    merges = [m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]]
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    added = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                      "special": True} for t, i in _SPECIAL.items()}
    _write_json(out / "tokenizer_config.json", {
        "added_tokens_decoder": added, "bos_token": None, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 65536, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
        "audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>",
    })
