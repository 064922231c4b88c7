"""Malformed model files: the native loader raises a ValueError naming the file, the problem and
(where there is one) the tensor or key; nothing crashes the process. The corrupt files are made
from the good tiny GGUFs by tests/corrupt.py, one deliberate defect each."""
from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as GT
from gguf import GGUFValueType as VT

import qtts
from qtts.names import KV, TN
from tests import corrupt
from tests.fixtures.build import MODEL_NAMES

Make = Callable[[Path, Path], Path]  # (good source, destination) -> the corrupt file

CV, BASE, Q8 = "tiny_custom_voice-f32", "tiny_base-f32", "tiny_custom_voice-q8_0"
ATTN_Q = TN.L_ATTN_Q % (TN.TALKER, 0)  # a talker linear (MATMUL kind)
BLOCKS = KV.T_BLOCK_COUNT % KV.P_TALKER
EPS = KV.T_NORM_EPS % KV.P_TALKER


def kv(key: str, value: object = corrupt.DROP, vtype: VT | None = None, sub: VT | None = None) -> Make:
    return lambda s, d: corrupt.with_kv(s, d, key, value, vtype, sub)


def retype(name: str, gtype: GT) -> Make:
    return lambda s, d: corrupt.retype_tensor(s, d, name, gtype)


# id -> (source file, defect, fragments the message must contain besides the path)
CASES: dict[str, tuple[str, Make, list[str]]] = {
    # byte-level damage
    "truncated-header": (CV, lambda s, d: corrupt.truncated(s, d, 0.001),
                         ["corrupt or truncated GGUF header", "failed to read key-value pairs"]),
    "truncated-data": (CV, lambda s, d: corrupt.truncated(s, d, 0.5),
                       ["tensor '", "data is not within the file bounds", "truncated"]),
    "truncated-tail": (CV, lambda s, d: corrupt.truncated(s, d, 0.99999), ["data is not within the file bounds"]),
    "data-missing": (CV, corrupt.tensor_data_out_of_bounds, ["tensor '", "data is not within the file bounds"]),
    "bad-magic": (CV, corrupt.bad_magic, ["not a GGUF file", "bad magic"]),
    "garbage-after-magic": (CV, lambda s, d: corrupt.header_garbage(s, d, seed=0, keep=4),
                            ["corrupt or truncated GGUF header", "version"]),
    "garbage-after-version": (CV, lambda s, d: corrupt.header_garbage(s, d, seed=1, keep=8),
                              ["corrupt or truncated GGUF header", "number of tensors"]),
    "garbage-after-counts": (CV, lambda s, d: corrupt.header_garbage(s, d, seed=2, keep=24),
                             ["corrupt or truncated GGUF header", "failed to read key-value pairs"]),
    "invalid-type-id": (CV, lambda s, d: corrupt.patch_tensor_type(s, d, ATTN_Q, 99),
                        ["corrupt or truncated GGUF header", f"tensor '{ATTN_Q}'", "invalid ggml type 99"]),
    "deprecated-type": (CV, lambda s, d: corrupt.patch_tensor_type(s, d, ATTN_Q, 4),
                        ["corrupt or truncated GGUF header", f"tensor '{ATTN_Q}'", "type 4"]),
    # metadata
    "architecture-llama": (CV, kv(KV.ARCHITECTURE, "llama"), ["architecture is 'llama'", "expected 'qwen3-tts'"]),
    "architecture-missing": (CV, kv(KV.ARCHITECTURE), ["no general.architecture key", "not a qtts model"]),
    "architecture-not-str": (CV, kv(KV.ARCHITECTURE, 7, VT.UINT32), ["'general.architecture' has type u32"]),
    "format-version-99": (CV, kv(KV.FORMAT_VERSION, 99), ["format version 99 is not supported", "re-convert"]),
    "key-missing": (CV, kv(BLOCKS), [f"metadata key '{BLOCKS}' is missing"]),
    "key-str-not-u32": (CV, kv(BLOCKS, "two", VT.STRING), [f"'{BLOCKS}' has type str, expected u32"]),
    "key-u32-not-f32": (CV, kv(EPS, 1, VT.UINT32), [f"'{EPS}' has type u32, expected f32"]),
    "key-negative": (CV, kv(BLOCKS, -1, VT.INT32), [f"'{BLOCKS}' is negative (-1)"]),
    "array-of-str-not-int": (CV, kv(KV.LANGUAGE_IDS, [b"x"], VT.ARRAY, VT.STRING),
                             [f"'{KV.LANGUAGE_IDS}' is an array of str, expected integers"]),
    "array-of-int-not-str": (CV, kv(KV.LANGUAGE_NAMES, [1, 2], VT.ARRAY, VT.INT32),
                             [f"'{KV.LANGUAGE_NAMES}' is not an array of strings"]),
    "unknown-variant": (CV, kv(KV.VARIANT, "foo"), ["unknown variant 'foo'"]),
    "more-blocks-than-tensors": (CV, kv(BLOCKS, 3), [f"tensor '{TN.L_ATTN_NORM % (TN.TALKER, 2)}' is missing"]),
    # a huge count must not size an allocation (bad_alloc) before the tensors are checked
    "huge-block-count": (CV, kv(BLOCKS, 2**31 - 1), [f"metadata key '{BLOCKS}' = 2147483647 is outside [1, 1024]"]),
    "zero-kv-heads": (CV, kv(KV.T_HEAD_COUNT_KV % KV.P_TALKER, 0),
                      [f"metadata key '{KV.T_HEAD_COUNT_KV % KV.P_TALKER}' = 0 is outside"]),
    "overflowing-rates": (CV, kv(KV.DEC_UPSAMPLE_RATES, [2**30, 2**30, 8, 8]),
                          [f"metadata key '{KV.DEC_UPSAMPLE_RATES}' element 0 = 1073741824 is outside"]),
    # special ids index embedding tables: out of range they would crash generation later
    "codec-id-out-of-range": (CV, kv(KV.CODEC_PAD_ID, 10**9),
                              [f"'{KV.CODEC_PAD_ID}' = 1000000000 is outside the codec vocabulary"]),
    "text-id-out-of-range": (CV, kv(KV.TEXT_PAD_ID, 10**9), [f"'{KV.TEXT_PAD_ID}' = 1000000000", "text vocabulary"]),
    # tensors
    "tensor-missing": (CV, lambda s, d: corrupt.drop_tensor(s, d, ATTN_Q), [f"tensor '{ATTN_Q}' is missing"]),
    "speaker-tensor-missing": (BASE, lambda s, d: corrupt.drop_tensor(s, d, TN.SPK_FC),
                               [f"tensor '{TN.SPK_FC}' is missing"]),
    "speaker-block-tensor-missing": (BASE, lambda s, d: corrupt.drop_tensor(s, d, TN.SPK_RES2NET % (2, 0)),
                                     [f"tensor '{TN.SPK_RES2NET % (2, 0)}' is missing"]),
    "shape-transposed": (CV, lambda s, d: corrupt.reshape_tensor(s, d, TN.TALKER_CODEC_HEAD, (32, 3072)),
                         [f"tensor '{TN.TALKER_CODEC_HEAD}' has shape [3072, 32], expected [32, 3072]"]),
    "shape-extra-dim": (CV, lambda s, d: corrupt.reshape_tensor(s, d, TN.TALKER_CODEC_HEAD, (2, 1536, 32)),
                        [f"tensor '{TN.TALKER_CODEC_HEAD}' has shape [32, 1536, 2], expected [32, 3072]"]),
    "f64-norm": (CV, lambda s, d: corrupt.retype_tensor_f64(s, d, TN.TALKER_OUTPUT_NORM),
                 [f"tensor '{TN.TALKER_OUTPUT_NORM}' has unsupported type f64", "must be F32"]),
    "f64-linear": (CV, lambda s, d: corrupt.retype_tensor_f64(s, d, ATTN_Q),
                   [f"tensor '{ATTN_Q}' has unsupported type f64"]),
    "f16-linear": (CV, lambda s, d: corrupt.retype_tensor_f16(s, d, ATTN_Q),
                   [f"tensor '{ATTN_Q}' has unsupported type f16", "F16 overflows", "bf16"]),
    "f16-embedding": (CV, retype(TN.TALKER_TEXT_EMBD, GT.F16), [f"'{TN.TALKER_TEXT_EMBD}' has unsupported type f16"]),
    "f16-norm": (CV, retype(TN.TALKER_OUTPUT_NORM, GT.F16), [f"'{TN.TALKER_OUTPUT_NORM}' has unsupported type f16"]),
    "q8_0-codec-weight": (Q8, retype(TN.DEC_TFM_IN, GT.Q8_0),
                          [f"tensor '{TN.DEC_TFM_IN}' has unsupported type q8_0", "must be F32"]),
    "i32-linear": (CV, lambda s, d: corrupt.patch_tensor_type(s, d, ATTN_Q, int(GT.I32)),
                   [f"tensor '{ATTN_Q}' has unsupported type i32"]),
    "unexpected-tensor": (CV, corrupt.add_extra_tensor,
                          ["unexpected tensor 'talker.blk.0.attn_bogus.weight'", "not part of this model"]),
}
# a spread of header, metadata and tensor defects, also run through `qtts-cli info`
CLI_CASES = ["truncated-header", "truncated-data", "bad-magic", "garbage-after-version", "invalid-type-id",
             "architecture-llama", "key-str-not-u32", "huge-block-count", "speaker-tensor-missing",
             "shape-transposed", "f64-norm", "f16-linear", "unexpected-tensor"]


def all_of(*fragments: str) -> str:
    """A pattern that `re.search` matches when the message contains every fragment, in any order."""
    return "(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments)


def make_case(case: str, gguf_dir: Path, out_dir: Path) -> Path:
    source, make, _ = CASES[case]
    bad = make(gguf_dir / f"{source}.gguf", out_dir / f"{case}.gguf")
    assert bad.is_file()
    return bad


def cli_info(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qtts.cli", "info", str(path)], check=False, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("wtype", ["f32", "bf16", "q8_0"])
def test_good_files_load(gguf_dir: Path, name: str, wtype: str) -> None:
    path = gguf_dir / f"{name}-{wtype}.gguf"
    assert qtts._core.Model(str(path), "cpu").variant == name.removeprefix("tiny_")
    assert qtts.inspect(path).tensor_count > 0


def test_rewrite_without_defect_is_byte_identical(gguf_dir: Path, tmp_path: Path) -> None:
    # so every corrupt file differs from a good one by its deliberate defect only
    for name in (CV, BASE, Q8):
        src = gguf_dir / f"{name}.gguf"
        out = corrupt.write(corrupt.read(src), tmp_path / f"{name}.gguf")
        assert out.read_bytes() == src.read_bytes(), name


@pytest.mark.parametrize("case", list(CASES))
def test_corrupt_file_is_rejected(gguf_dir: Path, tmp_path: Path, case: str) -> None:
    bad = make_case(case, gguf_dir, tmp_path)
    pattern = all_of(str(bad), *CASES[case][2])
    with pytest.raises(ValueError, match=pattern):
        qtts._core.Model(str(bad), "cpu")
    with pytest.raises(ValueError, match=pattern):
        qtts.load(bad)
    with pytest.raises(ValueError, match=pattern):
        qtts.inspect(bad)


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli_info_reports_corrupt_file(gguf_dir: Path, tmp_path: Path, case: str) -> None:
    bad = make_case(case, gguf_dir, tmp_path)
    r = cli_info(bad)
    assert r.returncode == 1, f"rc={r.returncode} (negative: killed by a signal)\n{r.stderr}"
    assert r.stderr.startswith("qtts-cli: error: ") and str(bad) in r.stderr, r.stderr
    assert all(f in r.stderr for f in CASES[case][2]), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_cli_info_good_file(gguf_dir: Path) -> None:
    r = cli_info(gguf_dir / f"{CV}.gguf")
    assert r.returncode == 0, r.stderr
    assert "custom_voice" in r.stdout


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.gguf"
    with pytest.raises(ValueError, match=all_of(str(path), "cannot open", "No such file")):
        qtts._core.Model(str(path), "cpu")
    for f in (qtts.load, qtts.inspect):
        with pytest.raises(FileNotFoundError, match=all_of(str(path), "no such model file")):
            f(path)
    r = cli_info(path)
    assert r.returncode == 1 and "qtts-cli: error:" in r.stderr and str(path) in r.stderr
    assert "Traceback" not in r.stderr


def test_directory(fixture_root: Path) -> None:
    ckpt = fixture_root / "tiny_base"  # a Hugging Face checkpoint: the user forgot to convert it
    for load in (lambda p: qtts._core.Model(str(p), "cpu"), qtts.load):
        with pytest.raises(ValueError, match=all_of(str(ckpt), "is a directory", f"qtts-cli convert {ckpt}")):
            load(ckpt)


@pytest.mark.parametrize(("content", "problem"), [(b"", "the file is empty"), (b"GGU", "only 3 bytes")])
def test_too_short_file(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "short.gguf"
    path.write_bytes(content)
    for load in (lambda p: qtts._core.Model(str(p), "cpu"), qtts.load, qtts.inspect):
        with pytest.raises(ValueError, match=all_of(str(path), "not a GGUF file", problem)):
            load(path)
    r = cli_info(path)
    assert r.returncode == 1 and str(path) in r.stderr and problem in r.stderr and "Traceback" not in r.stderr
