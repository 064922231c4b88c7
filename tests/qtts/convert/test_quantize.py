"""qtts-cli quantize / qtts.convert.quantize: the ggml quantizer binding, the per-tensor type policy, the
converter-identical outputs, --keep, refusals and atomic writes."""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES

import qtts
from qtts import _core, cli
from qtts.convert.quantize import FILE_TYPE, TYPES, quantize
from qtts.runtime.synthesis.prompt import build_prompt, resolve_voice
from tests.fixtures.build import MODEL_NAMES

K_QUANTS = ("q4_k", "q5_k", "q6_k")
REQUANT = "re-quantizing an already quantized file loses precision"
# relative RMS error of ggml's reference quantizers on unit Gaussian rows (measured 0.0053,
# 0.070, 0.035, 0.017): each type must land within a factor of about 2 of its own scale
ERROR_SCALE = {"q8_0": (0.003, 0.01), "q4_k": (0.04, 0.12), "q5_k": (0.02, 0.06), "q6_k": (0.01, 0.03)}


def _tensors(path: Path) -> dict[str, object]:
    return {t.name: t for t in GGUFReader(str(path)).tensors}


def _values(t) -> np.ndarray:
    data = np.asarray(t.data)
    if t.tensor_type == QT.F32:
        return data.astype(np.float32)
    return quants.dequantize(data, t.tensor_type)


def _rel_rms(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2)))


def _fields(path: Path) -> dict[str, object]:
    return {k: f.contents() for k, f in GGUFReader(str(path)).fields.items() if not k.startswith("GGUF.")}


def _nothing_written(out: Path) -> bool:
    return not out.exists() and not list(out.parent.glob(out.name + "*.partial"))


# --- the binding --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(ERROR_SCALE))
def test_binding_quantizes_rows(name: str) -> None:
    x = np.random.default_rng(0).standard_normal((8, 512), dtype=np.float32)
    qtype = TYPES[name]
    raw = _core.quantize(x, name)
    block, size = GGML_QUANT_SIZES[qtype]
    assert len(raw) == 8 * 512 // block * size
    assert _core.quantize(x, name, n_threads=3) == raw  # rows split over threads: same bytes
    got = quants.dequantize(np.frombuffer(raw, np.uint8).reshape(8, -1), qtype)
    lo, hi = ERROR_SCALE[name]
    assert lo < _rel_rms(got, x) < hi
    if name == "q8_0":  # the converter writes Q8_0 with gguf-py: the same bytes
        assert raw == quants.quantize(x, QT.Q8_0).tobytes()


@pytest.mark.parametrize("rows, qtype, match", [
    (np.zeros((2, 100), np.float32), "q4_k", r"rows of 100 values are not a whole number of q4_K blocks \(256\)"),
    (np.zeros((2, 48), np.float32), "q8_0", r"not a whole number of q8_0 blocks \(32\)"),
    (np.zeros(256, np.float32), "q6_k", "expected a 2-D array"),
    (np.zeros((2, 256), np.float32), "f16", "unknown type 'f16'"),
])
def test_binding_rejects(rows: np.ndarray, qtype: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _core.quantize(rows, qtype)


# --- the tiny models (rows of 32-64 values: K-quants fall back) ---------------------------------

@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("out_type", ["f32", "bf16", "q8_0"])
def test_matches_the_converter(name: str, out_type: str, gguf_dir: Path, tmp_path: Path) -> None:
    """From the F32 conversion, the converter's own types give the converter's file, byte for byte."""
    out = quantize(gguf_dir / f"{name}-f32.gguf", tmp_path / "q.gguf", out_type)
    assert out.read_bytes() == (gguf_dir / f"{name}-{out_type}.gguf").read_bytes()


def _expected(name: str, shape: list[int], out_type: str) -> tuple[QT, QT]:
    """(the policy's type, the type after the block-size fallback), restated independently of
    qtts.convert.quantize."""
    if not name.startswith(("talker.", "code_pred.")) or len(shape) != 2 or out_type == "f32":
        return QT.F32, QT.F32
    if out_type == "bf16":
        return QT.BF16, QT.BF16
    if name == "talker.codec_embd.weight" or name.startswith("code_pred.codec_embd."):
        return QT.F32, QT.F32
    sensitive = re.search(r"\.(attn_v|ffn_down)\.weight$|^talker\.codec_head\.|^code_pred\.lm_head\.", name)
    want = (QT.Q8_0 if out_type == "q8_0" or name == "talker.text_embd.weight"
            else QT.Q6_K if sensitive else TYPES[out_type])
    if shape[0] % GGML_QUANT_SIZES[want][0] == 0:
        return want, want
    return want, QT.Q8_0 if want != QT.Q8_0 and shape[0] % 32 == 0 else QT.BF16


@pytest.mark.parametrize("out_type", list(TYPES))
def test_type_policy(out_type: str, gguf_dir: Path, tmp_path: Path) -> None:
    src = gguf_dir / "tiny_base-f32.gguf"  # the base model: it has the speaker encoder too
    log: list[str] = []
    out = quantize(src, tmp_path / "q.gguf", out_type, log=log.append)
    ref, got = _tensors(src), _tensors(out)
    assert list(got) == list(ref) and len(log) == len(ref)
    fallbacks = 0
    for (name, t), line in zip(got.items(), log, strict=True):
        shape = [int(d) for d in t.shape]
        policy, final = _expected(name, shape, out_type)
        assert t.tensor_type == final, name
        assert f" {name} {shape[::-1]} F32 -> {final.name}" in line  # the log shows numpy order
        assert ("fallback" in line) == (final != policy), line
        fallbacks += final != policy
        if final == QT.F32:
            np.testing.assert_array_equal(np.asarray(t.data), np.asarray(ref[name].data))
        else:
            assert _rel_rms(_values(t), _values(ref[name])) < (0.01 if final == QT.Q8_0 else 4e-3), name
    assert (fallbacks > 0) == (out_type not in ("f32", "bf16"))  # tiny rows are 32-64 values wide
    fields, src_fields = _fields(out), _fields(src)
    assert fields.pop("general.file_type") == FILE_TYPE[out_type]
    src_fields.pop("general.file_type")
    assert fields == src_fields


def _prefill_logits(m: qtts.Model) -> np.ndarray:
    voice = resolve_voice(m.context, language="english", speaker="ryan", instruct=None)
    with m.engine.session() as s:
        prompt = build_prompt(m.context, s, "Hello world.", voice, non_streaming_mode=True)
        logits, _ = s.talker_prefill(prompt.embeddings)
    return logits


@pytest.mark.parametrize("out_type", ["bf16", "q8_0", *K_QUANTS])
def test_quantized_tiny_model_loads_and_generates(out_type: str, gguf_dir: Path, tmp_path: Path) -> None:
    out = quantize(gguf_dir / "tiny_custom_voice-f32.gguf", tmp_path / "q.gguf", out_type)
    ref = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1, voice_cache=False)
    m = qtts.Model(out, n_threads=1, voice_cache=False)
    a, b = _prefill_logits(m), _prefill_logits(ref)
    assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) > 0.99
    r = m.generate_codes("Hello world.", speaker="ryan", max_new_tokens=5, do_sample=False, subtalker_dosample=False)
    assert r.codes.shape == (4, 16) and r.stop_reason == "max_new_tokens"
    assert ((r.codes >= 0) & (r.codes < 2048)).all()


# --- a synthetic file whose rows are whole K-quant blocks ---------------------------------------

SYNTH = {  # name: (rows, values per row, source type)
    "talker.blk.0.attn_q.weight": (8, 512, QT.F32),
    "talker.blk.0.attn_norm.weight": (1, 512, QT.F32),
    "talker.text_embd.weight": (16, 256, QT.F32),
    "talker.codec_embd.weight": (16, 256, QT.F32),
    "talker.text_proj.fc1.weight": (8, 96, QT.F32),       # whole Q8_0 blocks only
    "code_pred.blk.0.ffn_down.weight": (4, 80, QT.F32),   # not even those
    "code_pred.lm_head.0.weight": (8, 256, QT.BF16),
    "codec_dec.pre_tfm.input_proj.weight": (8, 256, QT.F32),
}


def _synthetic(path: Path, arch: str = "qwen3-tts") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    w = GGUFWriter(path, arch)
    w.add_custom_alignment(64)
    w.add_string("general.name", "synthetic")
    w.add_uint32("general.file_type", 0)
    w.add_float32("qwen3-tts.talker.rope.freq_base", 1e6)
    w.add_bool("qwen3-tts.generation.do_sample", True)
    w.add_token_list(["a", "é", "<|im_start|>"])
    w.add_array("qwen3-tts.speakers.ids", [3, 1, 2])
    values = {}
    for name, (rows, width, src) in SYNTH.items():
        x = rng.standard_normal((rows, width), dtype=np.float32)
        if rows == 1:
            x = x[0]
        if src == QT.BF16:
            w.add_tensor(name, quants.quantize(x, QT.BF16), raw_dtype=QT.BF16)
            x = quants.dequantize(quants.quantize(x, QT.BF16), QT.BF16)
        else:
            w.add_tensor(name, x)
        values[name] = x
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return values


@pytest.mark.parametrize("out_type", K_QUANTS)
def test_k_quants_apply_to_whole_blocks(out_type: str, tmp_path: Path) -> None:
    src = tmp_path / "src.gguf"
    values = _synthetic(src)
    out = quantize(src, tmp_path / "q.gguf", out_type)
    got = _tensors(out)
    want_types = {
        "talker.blk.0.attn_q.weight": TYPES[out_type], "talker.blk.0.attn_norm.weight": QT.F32,
        "talker.text_embd.weight": QT.Q8_0, "talker.codec_embd.weight": QT.F32,
        "talker.text_proj.fc1.weight": QT.Q8_0, "code_pred.blk.0.ffn_down.weight": QT.BF16,
        "code_pred.lm_head.0.weight": QT.Q6_K, "codec_dec.pre_tfm.input_proj.weight": QT.F32,
    }
    assert {n: t.tensor_type for n, t in got.items()} == want_types
    lo, hi = ERROR_SCALE[out_type]
    assert lo < _rel_rms(_values(got["talker.blk.0.attn_q.weight"]).reshape(values["talker.blk.0.attn_q.weight"].shape),
                         values["talker.blk.0.attn_q.weight"]) < hi
    lo, hi = ERROR_SCALE["q6_k"]  # an output head (sensitive: Q6_K), from BF16
    head = "code_pred.lm_head.0.weight"
    assert lo < _rel_rms(_values(got[head]).reshape(values[head].shape), values[head]) < hi
    reader = GGUFReader(str(out))
    assert all((reader.data_offset + t.data_offset) % 64 == 0 for t in reader.tensors)
    fields = _fields(out)
    assert fields.pop("general.file_type") == FILE_TYPE[out_type]
    assert fields == {k: v for k, v in _fields(src).items() if k != "general.file_type"}

    # a quantized file: the same type again is a copy, another type is refused before writing
    again = quantize(out, tmp_path / "again.gguf", out_type)
    assert all(np.array_equal(np.asarray(t.data), np.asarray(got[t.name].data)) for t in _tensors(again).values())
    other = tmp_path / "other.gguf"
    with pytest.raises(ValueError, match=rf"attn_q\.weight is {out_type.upper()} and would become .*{REQUANT}"):
        quantize(out, other, "q6_k" if out_type != "q6_k" else "q4_k")
    assert _nothing_written(other)


def test_requantizing_a_q8_0_file_is_refused(gguf_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "src.gguf"
    _synthetic(src)
    q8 = quantize(src, tmp_path / "q8.gguf", "q8_0")
    for source, target in ((q8, "q4_k"), (gguf_dir / "tiny_custom_voice-q8_0.gguf", "bf16")):
        out = tmp_path / f"{target}.gguf"
        with pytest.raises(ValueError, match=f"is Q8_0 and would become .*{REQUANT}; quantize from the F32 or BF16"):
            quantize(source, out, target)
        assert _nothing_written(out)


def test_refuses_other_architectures_and_types(tmp_path: Path) -> None:
    src = tmp_path / "llama.gguf"
    _synthetic(src, arch="llama")
    with pytest.raises(ValueError, match="not a qtts model"):
        quantize(src, tmp_path / "o.gguf", "q8_0")
    with pytest.raises(ValueError, match="unknown type 'q3_k'"):
        quantize(src, tmp_path / "o.gguf", "q3_k")
    assert _nothing_written(tmp_path / "o.gguf")


# --- --keep ---------------------------------------------------------------------------------------

def test_keep_overrides(gguf_dir: Path, tmp_path: Path) -> None:
    log: list[str] = []
    keep = ["^(talker|code_pred).*attn_[qkv].weight=bf16", "talker.blk.0.attn_v=f32", "codec_embd=q8_0",
            "^codec_dec=f32"]
    out = quantize(gguf_dir / "tiny_custom_voice-f32.gguf", tmp_path / "q.gguf", "q8_0", keep=keep, log=log.append)
    types = {n: t.tensor_type for n, t in _tensors(out).items()}
    assert types["talker.blk.0.attn_v.weight"] == QT.F32       # the last matching --keep wins
    assert types["talker.blk.1.attn_v.weight"] == QT.BF16
    assert types["code_pred.blk.0.attn_q.weight"] == QT.BF16
    assert types["talker.codec_embd.weight"] == QT.Q8_0
    assert types["code_pred.codec_embd.3.weight"] == QT.Q8_0
    assert types["talker.blk.0.attn_output.weight"] == QT.Q8_0  # untouched: the policy
    assert types["talker.blk.0.attn_q_norm.weight"] == QT.F32
    assert any("talker.blk.0.attn_v.weight" in line and "(--keep 'talker.blk.0.attn_v=f32')" in line for line in log)
    assert qtts.Model(out, n_threads=1, voice_cache=False).variant == "custom_voice"


@pytest.mark.parametrize("keep, match", [
    ("attn_q(=q8_0", r"--keep 'attn_q\(=q8_0': bad regular expression"),
    ("no_such_tensor=q8_0", "'no_such_tensor=q8_0' matches no tensor"),
    ("attn_q=f16", r"'attn_q=f16': F16 is never written .*overflow"),
    ("attn_norm=q8_0", r"'attn_norm=q8_0': \S+\.attn_norm\.weight must stay F32"),
    ("codec_dec.=bf16", r"'codec_dec\.=bf16': codec_dec\..* must stay F32"),
    ("talker.blk.0.attn_q.weight=q4_k",
     r"talker\.blk\.0\.attn_q\.weight has rows of 32 values, not whole Q4_K blocks of 256"),
    ("attn_q=q3_k", r"'attn_q=q3_k': unknown type"),
    ("attn_q", "'attn_q': expected REGEX=TYPE"),
])
def test_invalid_keep_is_refused_before_writing(keep: str, match: str, gguf_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.gguf"
    with pytest.raises(ValueError, match=match):
        quantize(gguf_dir / "tiny_base-f32.gguf", out, "q8_0", keep=["^(talker|code_pred).*attn_v.weight=bf16", keep])
    assert list(tmp_path.iterdir()) == []


def test_large_tensors_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Peak memory follows the row chunk, not the tensor (a 1.7B F32 file is 4 GB)."""
    import tracemalloc

    import qtts.convert.quantize as qz

    rows = 1 << 15
    big = np.random.default_rng(2).standard_normal((rows, 256), dtype=np.float32)
    w = GGUFWriter(tmp_path / "big.gguf", "qwen3-tts")
    w.add_tensor("talker.blk.0.ffn_up.weight", big)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    monkeypatch.setattr(qz, "_CHUNK_ELEMS", 1 << 16)
    tracemalloc.start()
    try:
        out = quantize(tmp_path / "big.gguf", tmp_path / "q.gguf", "q6_k")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < big.nbytes / 8, (peak, big.nbytes)
    t = _tensors(out)["talker.blk.0.ffn_up.weight"]
    assert t.tensor_type == QT.Q6_K and _rel_rms(_values(t), big) < ERROR_SCALE["q6_k"][1]


# --- atomic output ----------------------------------------------------------------------------------

@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_failure_mid_write_leaves_nothing(error: type[BaseException], gguf_dir: Path, tmp_path: Path) -> None:
    seen: list[str] = []

    def log(msg: str) -> None:
        seen.append(msg)
        if len(seen) == 100:
            assert [p.name for p in tmp_path.iterdir()] == [f"q.gguf.{os.getpid()}.partial"]  # the partial name
            raise error("stop")

    with pytest.raises(error, match="stop"):
        quantize(gguf_dir / "tiny_base-f32.gguf", tmp_path / "q.gguf", "q4_k", log=log)
    assert len(seen) == 100 and list(tmp_path.iterdir()) == []


# --- the command line -----------------------------------------------------------------------------

def test_cli_quantize(gguf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = gguf_dir / "tiny_custom_voice-f32.gguf", tmp_path / "q.gguf"
    assert cli.main(["quantize", str(src), str(out), "Q4_K", "--keep", "codec_embd=q8_0"]) == 0
    err = capsys.readouterr().err
    assert "talker.blk.0.attn_q.weight [64, 32] F32 -> Q8_0 (fallback: Q4_K needs rows of whole 256" in err
    assert "talker.codec_embd.weight [3072, 32] F32 -> Q8_0 (--keep 'codec_embd=q8_0')" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"wrote {out} (q4_k): ") and " MB -> " in last
    assert GGUFReader(str(out)).fields["general.file_type"].contents() == 15
    assert qtts.Model(out, n_threads=1, voice_cache=False).variant == "custom_voice"

    assert cli.main_quantize([str(src), str(tmp_path / "q2.gguf"), "q8_0", "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert (tmp_path / "q2.gguf").read_bytes() == (gguf_dir / "tiny_custom_voice-q8_0.gguf").read_bytes()

    assert cli.main(["quantize", str(gguf_dir / "tiny_custom_voice-q8_0.gguf"), str(tmp_path / "x.gguf"), "bf16"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("qtts-cli: error: ") and REQUANT in err and "Traceback" not in err
    assert cli.main_quantize([str(src), str(tmp_path / "x.gguf"), "q8_0", "--keep", "nothing=q8_0"]) == 1
    assert capsys.readouterr().err.startswith("qtts-quantize: error: --keep 'nothing=q8_0' matches no tensor")
    assert _nothing_written(tmp_path / "x.gguf")
    with pytest.raises(SystemExit):
        cli.main(["quantize", str(src), str(tmp_path / "x.gguf"), "f16"])
    assert "invalid choice" in capsys.readouterr().err
    quantize_parser = cli.build_parser()._subparsers._group_actions[0].choices["quantize"]
    type_action = next(a for a in quantize_parser._actions if a.dest == "type")
    assert tuple(type_action.choices) == tuple(TYPES) and "quantize" in cli.COMMANDS
