"""The aligner's converter against the tiny Qwen3-ForcedAligner checkpoint: every tensor, every
key, every type, the quantizer's agreement, and the refusals (docs/aligner.md, "The file")."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, quants
from safetensors.numpy import load_file

from qtts.convert.checkpoint import convert
from qtts.convert.gguf_meta import read_fields
from qtts.convert.info import inspect
from qtts.convert.names import KV
from qtts.convert.quantize import quantize

# The checkpoint's name for each GGUF tensor, written out independently of the converter's tables.
_ENC = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.out_proj", "attn_norm": "self_attn_layer_norm", "ffn_norm": "final_layer_norm",
        "ffn_up": "fc1", "ffn_down": "fc2"}
_DEC = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
        "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_PLAIN = {"aenc.conv_out.weight": "thinker.audio_tower.conv_out.weight",
          "aenc.output_norm.weight": "thinker.audio_tower.ln_post.weight",
          "aenc.output_norm.bias": "thinker.audio_tower.ln_post.bias",
          "adec.token_embd.weight": "thinker.model.embed_tokens.weight",
          "adec.output_norm.weight": "thinker.model.norm.weight",
          "adec.timestamp_head.weight": "thinker.lm_head.weight"}


def _source(name: str) -> str:
    if name in _PLAIN:
        return _PLAIN[name]
    parts = name.split(".")
    if parts[1] == "conv":
        return f"thinker.audio_tower.conv2d{int(parts[2]) + 1}.{parts[3]}"
    if parts[1] in ("proj1", "proj2"):
        return f"thinker.audio_tower.{parts[1]}.{parts[2]}"
    net, layer, what, leaf = parts[0], parts[2], parts[3], parts[4]
    if net == "aenc":
        return f"thinker.audio_tower.layers.{layer}.{_ENC[what]}.{leaf}"
    return f"thinker.model.layers.{layer}.{_DEC[what]}.{leaf}"


def _tensors(path: Path) -> dict[str, tuple[QT, np.ndarray]]:
    out = {}
    for t in GGUFReader(str(path)).tensors:
        data = np.array(t.data)
        if t.tensor_type != QT.F32:
            data = quants.dequantize(data, t.tensor_type)
        out[t.name] = (t.tensor_type, data.reshape([int(x) for x in reversed(t.shape)]))
    return out


def test_every_tensor_is_the_checkpoints(reference_aligner_dir: Path, aligner_gguf: dict[str, Path]) -> None:
    ck = load_file(reference_aligner_dir / "model.safetensors")
    got = _tensors(aligner_gguf["f32"])
    assert sorted(_source(n) for n in got) == sorted(ck)
    for name, (qtype, data) in got.items():
        assert qtype == QT.F32, name
        want = ck[_source(name)]
        if name in ("aenc.conv.1.weight", "aenc.conv.2.weight"):  # stored as the matrix [out, in * 9]
            want = want.reshape(want.shape[0], -1)
        np.testing.assert_array_equal(data, want, err_msg=name)


def test_metadata(reference_aligner_dir: Path, aligner_gguf: dict[str, Path]) -> None:
    config = json.loads((reference_aligner_dir / "config.json").read_text())
    t = config["thinker_config"]
    a, x = t["audio_config"], t["text_config"]
    _, f = read_fields(aligner_gguf["f32"])
    assert f[KV.ARCHITECTURE] == KV.ALIGNER_ARCH_NAME
    assert f[KV.ALIGNER_FORMAT_VERSION] == KV.ALIGNER_FORMAT
    expected = {
        KV.ALIGNER_AUDIO_START_ID: t["audio_start_token_id"], KV.ALIGNER_AUDIO_END_ID: t["audio_end_token_id"],
        KV.ALIGNER_AUDIO_PAD_ID: t["audio_token_id"], KV.ALIGNER_TIMESTAMP_ID: config["timestamp_token_id"],
        KV.ALIGNER_TIMESTAMP_MS: config["timestamp_segment_time"], KV.ALIGNER_CLASS_COUNT: t["classify_num"],
        KV.ALIGNER_VOCAB_SIZE: x["vocab_size"], KV.AENC_SAMPLE_RATE: 16000, KV.AENC_N_FFT: 400,
        KV.AENC_HOP_LENGTH: 160, KV.AENC_MEL_BINS: a["num_mel_bins"],
        KV.AENC_CONV_CHANNELS: a["downsample_hidden_size"],
        KV.AENC_OUTPUT_LENGTH: a["output_dim"], KV.AENC_CHUNK_FRAMES: 2 * a["n_window"],
        KV.AENC_WINDOW_FRAMES: a["n_window_infer"],
        KV.T_BLOCK_COUNT % KV.P_ALIGNER_AUDIO: a["encoder_layers"],
        KV.T_HEAD_COUNT % KV.P_ALIGNER_AUDIO: a["encoder_attention_heads"],
        KV.T_EMBEDDING_LENGTH % KV.P_ALIGNER_DEC: x["hidden_size"],
        KV.T_HEAD_COUNT_KV % KV.P_ALIGNER_DEC: x["num_key_value_heads"],
        KV.T_KEY_LENGTH % KV.P_ALIGNER_DEC: x["head_dim"],
        KV.T_ROPE_FREQ_BASE % KV.P_ALIGNER_DEC: x["rope_theta"],
        KV.T_CONTEXT_LENGTH % KV.P_ALIGNER_DEC: x["max_position_embeddings"],
    }
    for key, value in expected.items():
        assert f[key] == pytest.approx(value), key
    assert f[KV.ALIGNER_LANGUAGES] == config["support_languages"]
    assert f[KV.T_NORM_EPS % KV.P_ALIGNER_AUDIO] == pytest.approx(1e-5)  # torch's LayerNorm default
    tokenizer = json.loads((reference_aligner_dir / "tokenizer_config.json").read_text())
    for key in ("<|audio_start|>", "<|audio_pad|>", "<|audio_end|>", "<timestamp>"):
        i = next(int(k) for k, v in tokenizer["added_tokens_decoder"].items() if v["content"] == key)
        assert f[KV.TOKENIZER_TOKENS][i] == key


@pytest.mark.parametrize("out_type", ["bf16", "q8_0", "q4_k"])
def test_type_policy(out_type: str, aligner_gguf: dict[str, Path]) -> None:
    """The projections, the second and third convs, the conv output projection and the head change
    type; the token table is a table (Q8_0 at the K-quants); norms, biases and the first conv stay
    F32."""
    types = {name: q for name, (q, _) in _tensors(aligner_gguf[out_type]).items()}
    for name, qtype in types.items():
        is_matrix = name.endswith(".weight") and name != "aenc.conv.0.weight" and "norm" not in name
        if not is_matrix:
            assert qtype == QT.F32, name
        elif out_type == "bf16":
            assert qtype == QT.BF16, name
        elif name.startswith("aenc.conv."):  # the tiny convs' rows of 8 x 9 values: no whole blocks
            assert qtype == QT.BF16, name
        elif out_type == "q8_0" or name == "adec.token_embd.weight":
            assert qtype == QT.Q8_0, name
        elif name.endswith((".attn_v.weight", ".ffn_down.weight")) or name == "adec.timestamp_head.weight":
            # the tiny widths are no whole K-quant blocks: the policy's fallback to Q8_0
            assert qtype in (QT.Q6_K, QT.Q8_0), name
        else:
            assert qtype in (QT.Q4_K, QT.Q8_0), name


def test_quantizer_writes_what_the_converter_writes(aligner_gguf: dict[str, Path], tmp_path: Path) -> None:
    for out_type in ("q8_0", "q4_k"):
        out = quantize(aligner_gguf["f32"], tmp_path / f"{out_type}.gguf", out_type)
        assert out.read_bytes() == aligner_gguf[out_type].read_bytes(), out_type


def test_info_describes_the_aligner(aligner_gguf: dict[str, Path]) -> None:
    info = inspect(aligner_gguf["q8_0"])
    assert info.architecture == KV.ALIGNER_ARCH_NAME and info.variant == "forced_aligner"
    assert "english" in info.languages and "chinese" in info.languages
    assert info.hparams["decoder"]["timestamp_classes"] == 5000
    assert info.hparams["decoder"]["timestamp_ms"] == 80.0
    assert info.hparams["audio_encoder"]["chunk_frames"] == 100
    assert info.tensors_by_type == {"F32": 37, "Q8_0": 31, "BF16": 2}
    text = info.format()
    assert "qwen3-forced-aligner" in text and "timestamp_classes=5000" in text and "speakers" not in text


def _copy(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_refuses_a_speech_recognizer(reference_aligner_dir: Path, tmp_path: Path) -> None:
    def asr(config: dict) -> None:
        config["thinker_config"]["model_type"] = "qwen3_asr_thinker"

    src = _copy(reference_aligner_dir, tmp_path / "asr", asr)
    with pytest.raises(ValueError, match="a Qwen3-ASR speech recognizer, not the forced aligner"):
        convert(src, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


def test_refuses_dither_and_other_activations(reference_aligner_dir: Path, tmp_path: Path) -> None:
    def act(config: dict) -> None:
        config["thinker_config"]["audio_config"]["activation_function"] = "relu"

    with pytest.raises(ValueError, match="activation_function is 'relu'"):
        convert(_copy(reference_aligner_dir, tmp_path / "relu", act), tmp_path / "a.gguf")
    src = _copy(reference_aligner_dir, tmp_path / "dither", lambda c: None)
    pre = json.loads((src / "preprocessor_config.json").read_text())
    (src / "preprocessor_config.json").write_text(json.dumps({**pre, "dither": 0.5}))
    with pytest.raises(ValueError, match="dither"):
        convert(src, tmp_path / "b.gguf")


def test_refuses_an_unknown_tensor(reference_aligner_dir: Path, tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    src = _copy(reference_aligner_dir, tmp_path / "extra", lambda c: None)
    ck = load_file(src / "model.safetensors")
    save_file({**ck, "thinker.audio_tower.extra.weight": np.zeros((2, 2), np.float32)}, src / "model.safetensors")
    with pytest.raises(ValueError, match="unexpected tensor 'thinker.audio_tower.extra.weight'"):
        convert(src, tmp_path / "c.gguf")
