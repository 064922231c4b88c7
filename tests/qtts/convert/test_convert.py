"""The converter against the tiny reference checkpoints: every tensor, every key, every type."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, quants
from safetensors.numpy import load_file

from qtts.convert.checkpoint import convert
from qtts.convert.gguf_meta import read_fields
from qtts.convert.names import KV
from tests.fixtures.build import MODEL_NAMES

# Checkpoint tensors the 12 Hz inference never reads (documented in qtts/convert.py).
DROPPED = re.compile(r"decoder\.quantizer\.rvq_(first|rest)\.input_proj\.weight"
                     r"|encoder\.quantizer\.\w+\.output_proj\.weight"
                     r"|encoder\.quantizer\.\w+\.layers\.\d+\.codebook\.initialized"
                     r"|encoder\.quantizer\.acoustic_residual_vector_quantizer\.layers\.(1[5-9]|[23]\d)\..*")


def _checkpoint(root: Path) -> dict[str, np.ndarray]:
    return {**load_file(root / "model.safetensors"), **load_file(root / "speech_tokenizer" / "model.safetensors")}


def _gguf_tensors(path: Path) -> dict[str, np.ndarray]:
    out = {}
    for t in GGUFReader(str(path)).tensors:
        data = np.array(t.data)
        if t.tensor_type != QT.F32:
            data = quants.dequantize(data, t.tensor_type)
        out[t.name] = data.reshape([int(x) for x in reversed(t.shape)])
    return out


def _expected(ck: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The GGUF content each checkpoint tensor should become, written out independently of the
    converter's rule tables for the irregular parts (codebooks, SnakeBeta, squeezed convs)."""
    exp: dict[str, np.ndarray] = {}
    for name, v in ck.items():
        if DROPPED.fullmatch(name):
            continue
        m = re.fullmatch(r"(.*)\.(embedding_sum|embed_sum)", name)
        if m:
            exp[name] = v / np.maximum(ck[m.group(1) + ".cluster_usage"], 1e-5)[:, None]
        elif name.endswith("cluster_usage"):
            continue
        elif re.search(r"\.(alpha)$", name):
            exp[name] = np.exp(v)
        elif re.search(r"\.(beta)$", name):
            exp[name] = 1.0 / (np.exp(v) + 1e-9)
        elif name.startswith("decoder.") and not name.startswith("decoder.quantizer.") and v.ndim == 3:
            exp[name] = _codec_decoder_conv(name, v)
        elif name == "speaker_encoder.asp.tdnn.conv.weight":  # input [x; mean; std], split in two
            c = v.shape[1] // 3
            exp[name] = _panels(v[:, :c, 0].T[None])
            exp[name + " (stats part)"] = v[:, c:, 0]
        elif re.fullmatch(r"encoder\.encoder_transformer\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.fc[12])\.weight"
                          r"|decoder\.pre_transformer\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.\w+_proj)\.weight"
                          r"|decoder\.upsample\.\d+\.1\.pwconv[12]\.weight", name):
            exp[name] = _panels(v.T[None])
        elif _GEMM_CONV.fullmatch(name):
            exp[name] = _panels(np.stack([v[:, :, j].T for j in range(v.shape[-1])]))
        elif v.ndim == 3 and v.shape[-1] == 1:
            exp[name] = v[..., 0]
        elif "dwconv" in name and v.ndim == 3:
            exp[name] = v[:, 0, :]
        else:
            exp[name] = v
    return exp


# Encoder-side convolutions that run as conv-GEMMs (format version 3); the speaker encoder's SE
# and final layers, which see one frame, stay 2-D.
_GEMM_CONV = re.compile(r"encoder\.(encoder\.layers\.\d+\.(conv|block\.[13]\.conv)|downsample\.conv)\.weight"
                        r"|speaker_encoder\.(blocks\.\d+\.(conv|tdnn[12]\.conv|res2net_block\.blocks\.\d+\.conv)"
                        r"|mfa\.conv|asp\.conv)\.weight")


def _panels(w: np.ndarray) -> np.ndarray:
    """[k, in, n] -> [n/P, k, in, P], P = 16 if 16 divides n else n: the conv-GEMM panel layout."""
    k, cin, n = w.shape
    p = 16 if n % 16 == 0 else n
    out = np.empty((n // p, k, cin, p), w.dtype)
    for j in range(n // p):
        out[j] = w[:, :, j * p:(j + 1) * p]
    return out


def _codec_decoder_conv(name: str, v: np.ndarray) -> np.ndarray:
    """Codec-decoder convs are stored for its conv-GEMM (format version 2)."""
    if "dwconv" in name:
        return v[:, 0, :].T                      # [C,1,k] -> [k,C]
    if re.fullmatch(r"decoder\.(upsample\.\d+\.0|decoder\.\d+\.block\.1)\.conv\.weight", name):
        cin, cout, k = v.shape                   # ConvTranspose1d: one tap into k*out outputs, tap-major
        return _panels(np.stack([v[:, :, j] for j in range(k)], axis=1).reshape(1, cin, k * cout))
    return _panels(np.stack([v[:, :, j].T for j in range(v.shape[-1])]))   # Conv1d [out,in,k]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_tensor_matches_checkpoint(name: str, fixture_root: Path, gguf_dir: Path) -> None:
    got = _gguf_tensors(gguf_dir / f"{name}-f32.gguf")
    exp = _expected(_checkpoint(fixture_root / name))
    assert len(got) == len(exp)
    unmatched = dict(got)
    for src, value in exp.items():
        # find the GGUF tensor holding exactly this value (names are checked separately below)
        hits = [g for g, arr in unmatched.items() if arr.shape == value.shape and np.array_equal(arr, value)]
        if not hits:
            close = [g for g, arr in unmatched.items()
                     if arr.shape == value.shape and np.allclose(arr, value, rtol=1e-6, atol=0)]
            assert close, f"no GGUF tensor equals checkpoint tensor {src}"
            hits = close
        del unmatched[hits[0]]
    assert not unmatched


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_named_spot_checks(name: str, fixture_root: Path, gguf_dir: Path) -> None:
    got = _gguf_tensors(gguf_dir / f"{name}-f32.gguf")
    ck = _checkpoint(fixture_root / name)
    pairs = {
        "talker.text_embd.weight": "talker.model.text_embedding.weight",
        "talker.blk.1.attn_q.weight": "talker.model.layers.1.self_attn.q_proj.weight",
        "talker.blk.0.attn_k_norm.weight": "talker.model.layers.0.self_attn.k_norm.weight",
        "talker.blk.1.ffn_down.weight": "talker.model.layers.1.mlp.down_proj.weight",
        "talker.codec_head.weight": "talker.codec_head.weight",
        "code_pred.blk.1.ffn_gate.weight": "talker.code_predictor.model.layers.1.mlp.gate_proj.weight",
        "code_pred.codec_embd.14.weight": "talker.code_predictor.model.codec_embedding.14.weight",
        "code_pred.lm_head.7.weight": "talker.code_predictor.lm_head.7.weight",
        "codec_dec.pre_tfm.blk.1.attn_scale": "decoder.pre_transformer.layers.1.self_attn_layer_scale.scale",
    }
    for g, h in pairs.items():
        np.testing.assert_array_equal(got[g], ck[h], err_msg=g)
    up, conv1 = ck["decoder.decoder.4.block.1.conv.weight"], ck["decoder.decoder.3.block.3.conv1.conv.weight"]
    got_up, got_conv1 = got["codec_dec.voc.blk.3.up.weight"], got["codec_dec.voc.blk.2.res.1.conv1.weight"]
    n_up = up.shape[1] * up.shape[2]
    p_up = 16 if n_up % 16 == 0 else n_up
    # output j = tap * out + channel lives in panel j // P, lane j % P
    np.testing.assert_array_equal(got_up[1 // p_up, 0, :, 1 % p_up], up[:, 1, 0])
    np.testing.assert_array_equal(got_conv1[0, 4, :, 1], conv1[1, :, 4])
    # a codec-encoder transformer linear [out, in]: output 1 is lane 1 of panel 0
    np.testing.assert_array_equal(got["codec_enc.tfm.blk.1.ffn_up.weight"][0, 0, :, 1],
                                  ck["encoder.encoder_transformer.layers.1.mlp.fc1.weight"][1])
    np.testing.assert_allclose(got["codec_dec.rvq.codebook.3"],
                               ck["decoder.quantizer.rvq_rest.vq.layers.2._codebook.embedding_sum"]
                               / np.maximum(ck["decoder.quantizer.rvq_rest.vq.layers.2._codebook.cluster_usage"],
                                            1e-5)[:, None], rtol=1e-6)
    np.testing.assert_allclose(got["codec_dec.voc.blk.1.res.2.snake2.exp_alpha"],
                               np.exp(ck["decoder.decoder.2.block.4.act2.alpha"]), rtol=1e-6)
    assert ("code_pred.mtp_proj.weight" in got) == (name != "tiny_base")
    assert ("spk_enc.fc.weight" in got) == (name == "tiny_base")


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_metadata_round_trip(name: str, fixture_root: Path, gguf_dir: Path) -> None:
    cfg = json.loads((fixture_root / name / "config.json").read_text())
    gen = json.loads((fixture_root / name / "generation_config.json").read_text())
    tc = cfg["talker_config"]
    _, f = read_fields(gguf_dir / f"{name}-f32.gguf")
    assert f[KV.ARCHITECTURE] == "qwen3-tts"
    assert f[KV.VARIANT] == cfg["tts_model_type"] and f[KV.SIZE] == cfg["tts_model_size"]
    assert f[KV.TEXT_IM_START_ID] == cfg["im_start_token_id"] and f[KV.TEXT_EOS_ID] == cfg["tts_eos_token_id"]
    assert f[KV.CODEC_EOS_ID] == tc["codec_eos_token_id"] and f[KV.CODEC_THINK_EOS_ID] == tc["codec_think_eos_id"]
    assert dict(zip(f[KV.LANGUAGE_NAMES], f[KV.LANGUAGE_IDS], strict=True)) == tc["codec_language_id"]
    if tc["spk_id"]:
        assert dict(zip(f[KV.SPEAKER_NAMES], f[KV.SPEAKER_IDS], strict=True)) == tc["spk_id"]
        assert dict(zip(f[KV.SPEAKER_NAMES], f[KV.SPEAKER_DIALECTS], strict=True)) == \
            {k: (v or "") for k, v in tc["spk_is_dialect"].items()}
    else:
        assert KV.SPEAKER_NAMES not in f
    assert f["qwen3-tts.talker.block_count"] == tc["num_hidden_layers"]
    assert f["qwen3-tts.talker.attention.key_length"] == tc["head_dim"]
    assert list(f[KV.TALKER_MROPE_SECTION]) == tc["rope_scaling"]["mrope_section"]
    assert f["qwen3-tts.code_predictor.embedding_length"] == tc["code_predictor_config"]["hidden_size"]
    for k in ("top_k", "max_new_tokens", "subtalker_top_k"):
        assert f[f"qwen3-tts.generation.{k}"] == gen[k]
    for k in ("temperature", "top_p", "repetition_penalty", "subtalker_temperature"):
        assert f[f"qwen3-tts.generation.{k}"] == pytest.approx(gen[k])
    assert f["tokenizer.ggml.pre"] == "qwen2"


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("out_type", ["bf16", "q8_0"])
def test_type_policy(name: str, out_type: str, gguf_dir: Path) -> None:
    ref = _gguf_tensors(gguf_dir / f"{name}-f32.gguf")
    reader = GGUFReader(str(gguf_dir / f"{name}-{out_type}.gguf"))
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert QT.F16 not in types.values()
    got = _gguf_tensors(gguf_dir / f"{name}-{out_type}.gguf")
    for tname, t in types.items():
        is_matrix = tname.startswith(("talker.", "code_pred.")) and ref[tname].ndim == 2
        if not is_matrix:
            assert t == QT.F32, tname
            np.testing.assert_array_equal(got[tname], ref[tname])
            continue
        if out_type == "bf16":
            assert t == QT.BF16, tname
        elif tname == "talker.text_embd.weight" or "embd" not in tname:
            # Q8_0 needs whole 32-element blocks per row; narrower rows fall back to BF16
            assert t == (QT.Q8_0 if ref[tname].shape[-1] % 32 == 0 else QT.BF16), tname
        else:
            assert t == QT.F32, tname
        err = np.abs(got[tname] - ref[tname]).max() / np.abs(ref[tname]).max()
        assert err < (1e-2 if t == QT.Q8_0 else 4e-3), tname


def test_failed_conversion_leaves_nothing(fixture_root: Path, tmp_path: Path) -> None:
    bad = tmp_path / "ckpt"
    bad.mkdir()
    for f in (fixture_root / "tiny_voice_design").iterdir():
        if f.is_file():
            (bad / f.name).write_bytes(f.read_bytes())
    (bad / "speech_tokenizer").mkdir()
    st = fixture_root / "tiny_voice_design" / "speech_tokenizer"
    (bad / "speech_tokenizer" / "config.json").write_bytes((st / "config.json").read_bytes())
    data = (st / "model.safetensors").read_bytes()
    (bad / "speech_tokenizer" / "model.safetensors").write_bytes(data[: len(data) // 2])
    out = tmp_path / "out.gguf"
    with pytest.raises(ValueError, match=r"model\.safetensors.*(truncated|bounds)"):
        convert(bad, out)
    assert list(tmp_path.glob("out.gguf*")) == []


@pytest.mark.parametrize("mutate, match", [
    (lambda c: c.update(tts_model_type="other"), r"config\.json.*tts_model_type"),
    (lambda c: c.update(tokenizer_type="qwen3_tts_tokenizer_25hz"), r"tokenizer_type.*not supported"),
    (lambda c: c["talker_config"].pop("hidden_size"), r"config\.json.*talker_config\.hidden_size.*missing"),
    (lambda c: c["talker_config"].update(num_hidden_layers="2"), r"num_hidden_layers.*type str"),
])
def test_bad_config(mutate, match: str, fixture_root: Path, tmp_path: Path) -> None:
    import shutil

    ck = tmp_path / "ckpt"
    shutil.copytree(fixture_root / "tiny_custom_voice", ck)
    cfg = json.loads((ck / "config.json").read_text())
    mutate(cfg)
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=match):
        convert(ck, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


def test_missing_checkpoint_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        convert(tmp_path / "nope", tmp_path / "o.gguf")
    with pytest.raises(ValueError, match=r"config\.json.*not found"):
        convert(tmp_path, tmp_path / "o.gguf")


def test_conversion_streams_large_tensors(fixture_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Peak memory follows the row chunk, not the tensor (a 1.7B checkpoint is 3.9 GB): give the
    checkpoint a 25 MB text embedding and check the Python-side peak stays far below it."""
    import shutil
    import tracemalloc

    from safetensors.numpy import save_file

    import qtts.convert.checkpoint as conv
    import qtts.convert.tensors as tensors_mod

    ck = tmp_path / "ckpt"
    shutil.copytree(fixture_root / "tiny_custom_voice", ck)
    tensors = load_file(ck / "model.safetensors")
    rows = 1 << 17
    big = np.random.default_rng(0).standard_normal((rows, 48), dtype=np.float32)
    tensors["talker.model.text_embedding.weight"] = big
    save_file(tensors, ck / "model.safetensors")
    cfg = json.loads((ck / "config.json").read_text())
    cfg["talker_config"]["text_vocab_size"] = rows
    (ck / "config.json").write_text(json.dumps(cfg))
    del tensors
    monkeypatch.setattr(tensors_mod, "_CHUNK_ELEMS", 1 << 16)
    tracemalloc.start()
    try:
        conv.convert(ck, tmp_path / "x.gguf", "q8_0")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < big.nbytes / 4, (peak, big.nbytes)
    emb = {t.name: t for t in GGUFReader(str(tmp_path / "x.gguf")).tensors}["talker.text_embd.weight"]
    got = quants.dequantize(np.array(emb.data), emb.tensor_type).reshape(rows, 48)
    assert np.abs(got - big).max() < 0.05


def _wide_ffn_checkpoint(fixture_root: Path, dst: Path) -> Path:
    """tiny_base with a 256-wide talker FFN, so that ffn_down has whole K-quant rows."""
    import shutil

    from safetensors.numpy import save_file

    shutil.copytree(fixture_root / "tiny_base", dst)
    tensors = load_file(dst / "model.safetensors")
    cfg = json.loads((dst / "config.json").read_text())
    hidden, n_layers = cfg["talker_config"]["hidden_size"], cfg["talker_config"]["num_hidden_layers"]
    rng = np.random.default_rng(7)
    for i in range(n_layers):
        p = f"talker.model.layers.{i}.mlp."
        for name, shape in (("gate_proj", (256, hidden)), ("up_proj", (256, hidden)), ("down_proj", (hidden, 256))):
            tensors[p + name + ".weight"] = rng.standard_normal(shape, dtype=np.float32) * 0.05
    save_file(tensors, dst / "model.safetensors")
    cfg["talker_config"]["intermediate_size"] = 256
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("out_type", ["q4_k", "q5_k", "q6_k"])
def test_k_quant_conversion_is_f32_then_quantize(out_type: str, fixture_root: Path, gguf_dir: Path,
                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`convert --type q4_k` in one step writes exactly what convert f32 + quantize writes, with
    the quantize policy's types (here ffn_down, a sensitive tensor, at Q6_K), streaming."""
    import qtts.convert.checkpoint as conv
    import qtts.convert.tensors as tensors_mod
    from qtts.convert.quantize import quantize

    for ck in (fixture_root / "tiny_custom_voice", _wide_ffn_checkpoint(fixture_root, tmp_path / "wide")):
        f32 = gguf_dir / "tiny_custom_voice-f32.gguf" if ck.name == "tiny_custom_voice" else \
            convert(ck, tmp_path / "wide-f32.gguf", "f32")
        two_steps = quantize(f32, tmp_path / f"{ck.name}-two.gguf", out_type, n_threads=1)
        monkeypatch.setattr(tensors_mod, "_CHUNK_ELEMS", 512)  # several row chunks per tensor
        one_step = conv.convert(ck, tmp_path / f"{ck.name}-one.gguf", out_type, n_threads=2)
        monkeypatch.undo()
        assert one_step.read_bytes() == two_steps.read_bytes(), ck.name
    types = {t.name: t.tensor_type for t in GGUFReader(str(one_step)).tensors}
    assert types["talker.blk.0.ffn_down.weight"] == QT.Q6_K
    assert types["talker.blk.0.ffn_up.weight"] == QT.Q8_0  # 32-value rows: the Q8_0 fallback
    assert types["talker.codec_embd.weight"] == QT.F32  # codec tables stay F32 as in the q8_0 target
    assert read_fields(one_step)[1][KV.FILE_TYPE] == {"q4_k": 15, "q5_k": 17, "q6_k": 18}[out_type]
    assert list(tmp_path.glob("*.partial")) == []


def test_cli_convert_accepts_k_quants_and_shares_the_type_list() -> None:
    from qtts import cli
    from qtts.convert.quantize import TYPES

    args = cli.build_parser().parse_args(["convert", "ck", "-o", "m.gguf", "--type", "Q4_K", "-t", "1"])
    assert (args.type, args.threads) == ("q4_k", 1)
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    convert_action, quantize_action = (next(a for a in commands[name]._actions if a.dest == "type")
                                       for name in ("convert", "quantize"))
    assert tuple(convert_action.choices) == tuple(quantize_action.choices) == tuple(TYPES)


def test_unknown_type_is_refused(fixture_root: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown --type 'q3_k'; choose one of f32, bf16, q8_0, q4_k"):
        convert(fixture_root / "tiny_base", tmp_path / "o.gguf", "q3_k")
    assert list(tmp_path.iterdir()) == []


_SLOW_CONVERT = """
import sys, time
import qtts.convert.checkpoint as conv

encode = conv.encode
def stalled(e, n_threads):
    for i, chunk in enumerate(encode(e, n_threads)):
        yield chunk
        if e.name == "talker.blk.0.ffn_up.weight":
            print("writing", flush=True)
            time.sleep(600)
conv.encode = stalled
conv.convert(sys.argv[1], sys.argv[2], "q8_0")
"""


def test_killed_conversion_leaves_no_partial_after_the_next_run(fixture_root: Path, gguf_dir: Path,
                                                               tmp_path: Path) -> None:
    """SIGKILL mid-write leaves a partial file (nothing can clean up then); the next run on the
    same output removes it and writes the whole file; the final path never holds a torn file."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "m.gguf"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_CONVERT, str(fixture_root / "tiny_custom_voice"), str(out)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
        partials = list(tmp_path.glob("m.gguf.*.partial"))
        assert len(partials) == 1 and partials[0].stat().st_size > 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not out.exists() and partials[0].exists()
    convert(fixture_root / "tiny_custom_voice", out, "q8_0")
    assert out.read_bytes() == (gguf_dir / "tiny_custom_voice-q8_0.gguf").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def test_load_by_repo_id_converts_to_a_k_quant(fixture_root: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import qtts
    from tests.qtts.convert.test_registry import offline_hub

    repo_id = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
    offline_hub(monkeypatch, tmp_path, repo_id, fixture_root / "tiny_custom_voice")
    with pytest.raises(ValueError, match="convert_type must be one of f32, bf16, q8_0, q4_k, q5_k, q6_k, got 'q3_k'"):
        qtts.load(repo_id, n_threads=1, convert_type="q3_k")
    m = qtts.load(repo_id, n_threads=1, convert_type="q5_k")
    assert m.path == tmp_path / "qtts-cache" / "Qwen3-TTS-12Hz-0.6B-CustomVoice-q5_k.gguf"
    assert read_fields(m.path)[1][KV.FILE_TYPE] == 17
