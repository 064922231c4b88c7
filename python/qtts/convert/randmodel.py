"""Full-size random-weight Qwen3-TTS checkpoints, written with numpy (no torch).

Benchmarks of speed, memory and quantization quality need the released shapes and weights that
keep every network numerically sane, not the released weights. Names, shapes, dtypes and
configs come from committed tables (data/releases/<release>.json), generated from the
reference's own classes and checked against them by tests/qtts/convert/test_randmodel.py. Values follow the
init of the test tooling (tests/fixtures/refmodels.py, build.py):

* talker and code predictor: the reference's init, N(0, 0.02) matrices;
* speaker encoder and speech tokenizer: std 1/sqrt(fan_in), biases N(0, 0.02), because
  N(0, 0.02) makes their deep conv stacks collapse to a constant output;
* a tensor the reference initialises to a constant c (norms, other biases, LayerScale,
  ConvNeXt gamma, SnakeBeta's log-scale alpha/beta) gets N(c, max(|c|, 0.1) / 10), so that no
  code path is degenerate; codebook sums N(0, 1), cluster usage U(0.5, 1.5);
* the codec's last conv is scaled so that random codes give a waveform of std ~0.2 instead of
  saturating the final clamp.

Every tensor draws from its own generator seeded by (seed, name): its values do not depend on
the order of the file or on the other tensors. Files are written one chunk at a time.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

RELEASES = ("0.6B-Base", "1.7B-Base", "0.6B-CustomVoice", "1.7B-CustomVoice", "1.7B-VoiceDesign")

_DATA = Path(__file__).resolve().parent / "data"
_HF_STD = 0.02      # the reference's initializer_range default; the released configs do not set it
_BIAS_STD = 0.02    # refmodels.reinit_fan_in
# refmodels.calibrate_codec_output's scale of the codec's last conv, measured once: random codes
# then decode to a waveform of std 0.21 with seed 0 (0.16 with seed 1) instead of ~100, which the
# vocoder's residual stacks make of the fan-in init.
_CODEC_OUTPUT_GAIN = 2e-3
_CHUNK = 1 << 22    # elements drawn at once: 16 MB of float32 bounds the memory
_POOL = 1 << 16     # see _draw
_ITEMSIZE = {"BF16": 2, "F32": 4}
_BPE_VOCAB = 1600
_ENDOFTEXT_ID = 151643  # Qwen2 vocabulary; the config names the other special ids
_SPEECH_PREPROCESSOR = {
    "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1, "sampling_rate": 24000,
    "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
    "chunk_length_s": None, "overlap": None,
}


@dataclass(frozen=True)
class Init:
    """How a tensor is drawn: "normal" (a = mean, b = std), "uniform" on [a, b), "constant" a."""
    kind: str
    a: float
    b: float = 0.0


def release_table(release: str) -> dict[str, Any]:
    """The committed table: config, generation_config, speech_tokenizer_config, and for
    "model" and "speech_tokenizer" {name: [shape, dtype]} in file order."""
    if release not in RELEASES:
        raise ValueError(f"unknown release {release!r}; choose one of {RELEASES}")
    return json.loads((_DATA / "releases" / f"{release}.json").read_text(encoding="utf-8"))


def tensor_init(table: dict[str, Any], section: str, name: str) -> Init:
    """The distribution of tensor `name` of `section` ("model" or "speech_tokenizer")."""
    shapes = table[section]
    shape = shapes[name][0]
    if name.endswith(("embedding_sum", "embed_sum")):
        return Init("normal", 0.0, 1.0)
    if name.endswith("cluster_usage"):
        return Init("uniform", 0.5, 1.5)
    if name.endswith(".initialized"):  # a trained codebook's flag
        return Init("constant", 1.0)
    codec = table["speech_tokenizer_config"]
    fan_in_init = section == "speech_tokenizer" or name.startswith("speaker_encoder.")
    gain = _CODEC_OUTPUT_GAIN if name.rsplit(".", 1)[0] == _output_conv(codec) else 1.0
    if len(shape) >= 2:
        std = gain / math.sqrt(_fan_in(codec, name, shape)) if fan_in_init else _HF_STD
        return Init("normal", 0.0, std)
    weight = shapes.get(name.rsplit(".", 1)[0] + ".weight")
    if fan_in_init and name.endswith(".bias") and weight is not None and len(weight[0]) >= 2:
        return Init("normal", 0.0, _BIAS_STD * gain)
    # refmodels.randomize_constant_tensors: noise around the reference's constant, so that no
    # code path is degenerate (a kernel ignoring a norm's weight would go unnoticed at 1.0)
    part = "encoder_config" if name.startswith("encoder.") else "decoder_config"
    c = _constant(name, float(codec[part]["layer_scale_initial_scale"]))
    return Init("normal", c, max(abs(c), 0.1) * 0.1)


def _output_conv(codec: dict[str, Any]) -> str:
    return f"decoder.decoder.{len(codec['decoder_config']['upsample_rates']) + 2}.conv"


def _fan_in(codec: dict[str, Any], name: str, shape: list[int]) -> float:
    if len(shape) == 2:  # Linear [out, in]
        return float(shape[1])
    dec = codec["decoder_config"]
    m = re.fullmatch(r"decoder\.upsample\.(\d+)\.0\.conv\.weight", name)
    stride = dec["upsampling_ratios"][int(m.group(1))] if m else None
    m = re.fullmatch(r"decoder\.decoder\.(\d+)\.block\.1\.conv\.weight", name)
    if m:
        stride = dec["upsample_rates"][int(m.group(1)) - 1]
    if stride is not None:  # ConvTranspose1d [in, out, k]: each output sees in * k / stride taps
        return shape[0] * shape[2] / stride
    return float(shape[1] * shape[2])  # Conv1d [out, in / groups, k]


def _constant(name: str, layer_scale: float) -> float:
    """The reference's initial value of a 1-D tensor that is not a fan-in-initialised bias."""
    if name.endswith("norm.weight"):
        return 1.0
    if name.endswith(".bias"):
        return 0.0
    if name.endswith("layer_scale.scale"):
        return layer_scale
    if name.endswith(".gamma"):  # ConvNeXt layer scale, fixed in the reference's code
        return 1e-6
    if name.endswith((".alpha", ".beta")):  # SnakeBeta, log scale
        return 0.0
    raise ValueError(f"no init rule for tensor {name!r}")


def _rng(seed: int, name: str) -> np.random.Generator:
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, key])


def _to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to BF16 bit patterns (overwrites x)."""
    u = x.view(np.uint32)
    u += np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))  # round to nearest even (values are finite)
    return (u >> 16).astype(np.uint16)


def _draw(rng: np.random.Generator, init: Init, m: int, dtype: str) -> np.ndarray:
    """m elements drawn from `init`, in the stored dtype (BF16 as uint16 bit patterns)."""
    if init.kind == "constant":
        return _stored(np.full(m, init.a, dtype=np.float32), dtype)
    if init.kind == "uniform":
        x = rng.random(m, dtype=np.float32)
        x *= np.float32(init.b - init.a)
        x += np.float32(init.a)
        return _stored(x, dtype)
    x = rng.standard_normal(min(m, _POOL), dtype=np.float32)
    x *= np.float32(init.b)
    x += np.float32(init.a)
    x = _stored(x, dtype)
    # standard_normal draws ~50 M/s on the 2-core development machine: 0.6B alone would take
    # 20 s. A large chunk instead picks its elements, independently and uniformly, from a fresh
    # pool of 65536 normal values (an empirical N(a, b)), which is ~3x faster.
    return x if m <= _POOL else x[rng.integers(0, _POOL, m, dtype=np.uint16)]


def _stored(x: np.ndarray, dtype: str) -> np.ndarray:
    return _to_bf16(x) if dtype == "BF16" else x


def _chunks(table: dict[str, Any], section: str, name: str, seed: int) -> Iterator[np.ndarray]:
    """The tensor's stored elements, flat, in chunks."""
    return _chunks_of(table[section][name], tensor_init(table, section, name), seed, name)


def _chunks_of(entry: tuple[list[int], str], init: Init, seed: int, name: str) -> Iterator[np.ndarray]:
    """The stored elements of a tensor of entry (shape, dtype) drawn from `init`, flat, in chunks
    (also the aligner's, convert/randaligner.py)."""
    shape, dtype = entry
    rng = _rng(seed, name)
    n = math.prod(shape)
    for start in range(0, n, _CHUNK):
        yield _draw(rng, init, min(_CHUNK, n - start), dtype)


def random_tensor(release: str, section: str, name: str, *, seed: int = 0) -> np.ndarray:
    """One tensor as write_random_checkpoint stores it (BF16 as uint16 bit patterns)."""
    table = release_table(release)
    parts = list(_chunks(table, section, name, seed))
    return np.concatenate(parts).reshape(table[section][name][0])


def write_random_checkpoint(release: str, out_dir: str | os.PathLike[str], *, seed: int = 0) -> Path:
    """Write a Hugging Face-layout checkpoint of `release` with random weights into `out_dir`
    (created if needed); qtts.convert.convert accepts it. The same seed gives the same bytes."""
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    table = release_table(release)
    out = Path(out_dir)
    (out / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    _write_json(out / "config.json", table["config"])
    _write_json(out / "generation_config.json", table["generation_config"])
    _write_json(out / "speech_tokenizer" / "config.json", table["speech_tokenizer_config"])
    _write_json(out / "speech_tokenizer" / "preprocessor_config.json", _SPEECH_PREPROCESSOR)
    _write_tokenizer(out, table["config"])
    _write_safetensors(out / "model.safetensors", table, "model", seed)
    _write_safetensors(out / "speech_tokenizer" / "model.safetensors", table, "speech_tokenizer", seed)
    return out


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_safetensors(path: Path, table: dict[str, Any], section: str, seed: int) -> None:
    _write_tensors(path, table[section], lambda name: _chunks(table, section, name, seed))


def _write_tensors(path: Path, tensors: dict[str, Any], chunks: Callable[[str], Iterator[np.ndarray]]) -> None:
    """A safetensors file of `tensors` {name: (shape, dtype)}, each one's data from chunks(name)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (shape, dtype) in tensors.items():
        nbytes = math.prod(shape) * _ITEMSIZE[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data then starts 8-byte aligned
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for name in tensors:
                for chunk in chunks(name):
                    f.write(chunk.data)
            if f.tell() != 8 + len(raw) + offset:
                raise RuntimeError(f"internal error: {path} has {f.tell()} bytes, planned {8 + len(raw) + offset}")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _write_tokenizer(out: Path, config: dict[str, Any]) -> None:
    """A small byte-level BPE (the tests' wide tokenizer: Qwen2 pre-tokenizer, a varied
    multilingual corpus) whose special tokens, and the role token "assistant", have the real
    ids, so that prompts have the released layout: [151644, 77091, 198, ...]."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    from ..runtime.text.tokenizer import QWEN2_REGEX

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=_BPE_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    corpus = json.loads((_DATA / "bpe_corpus.json").read_text(encoding="utf-8"))
    tok.train_from_iterator(corpus * 20, trainer=trainer)
    bpe = json.loads(tok.to_str())["model"]
    if "assistant" not in bpe["vocab"]:
        raise RuntimeError("the BPE corpus no longer makes 'assistant' one token")
    ordered = sorted((t for t in bpe["vocab"] if t != "assistant"), key=bpe["vocab"].__getitem__)
    vocab = {t: i for i, t in enumerate(ordered)}
    vocab["assistant"] = int(config["assistant_token_id"])
    merges = [m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]]
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")

    special = {"<|endoftext|>": _ENDOFTEXT_ID, "<|im_start|>": config["im_start_token_id"],
               "<|im_end|>": config["im_end_token_id"], "<tts_pad>": config["tts_pad_token_id"],
               "<tts_text_bos>": config["tts_bos_token_id"], "<tts_text_eod>": config["tts_eos_token_id"]}
    added = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for t, i in sorted(special.items(), key=lambda x: x[1])}
    _write_json(out / "tokenizer_config.json", {
        "added_tokens_decoder": added, "additional_special_tokens": list(special)[1:], "bos_token": None,
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 32768, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    })
