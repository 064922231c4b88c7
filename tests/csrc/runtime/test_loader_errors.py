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
from qtts.convert.names import KV, TN
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


# --- hyper-parameters: every bad value refused at load, naming the file and the key ---------------

NETS = (KV.P_TALKER, KV.P_CODE_PRED, KV.P_CODEC_DEC, KV.P_CODEC_ENC)
NAN, INF = float("nan"), float("inf")
# (key, bad value, source); each value once made synthesize abort in ggml or size a giant allocation,
# or would put an id outside its table
BAD_VALUES: list[tuple[str, object, str]] = [
    *[(KV.T_NORM_EPS % net, v, CV) for net in NETS for v in (-1e-6, 0.0, NAN, -INF, INF, 1.0)],
    *[(KV.T_ROPE_FREQ_BASE % net, v, CV) for net in NETS for v in (-10000.0, 0.0, NAN, INF)],
    *[(KV.T_HEAD_COUNT % net, v, CV) for net in NETS for v in (0, 2**31 - 1)],
    *[(KV.T_EMBEDDING_LENGTH % net, v, CV) for net in NETS for v in (0, 2**31 - 1)],
    *[(KV.T_FEED_FORWARD_LENGTH % net, 0, CV) for net in NETS],
    *[(KV.T_KEY_LENGTH % net, v, CV) for net in NETS for v in (0, 15, 2**30)],
    *[(KV.T_CONTEXT_LENGTH % net, v, CV) for net in (KV.P_TALKER, KV.P_CODE_PRED) for v in (0, 2**31 - 1)],
    (KV.T_HEAD_COUNT_KV % KV.P_CODEC_DEC, 3, CV),  # does not divide 2 heads
    (KV.TALKER_TEXT_VOCAB_SIZE, 0, CV), (KV.TALKER_TEXT_VOCAB_SIZE, 2**31 - 1, CV),
    (KV.TALKER_CODEC_VOCAB_SIZE, 0, CV), (KV.TALKER_NUM_CODE_GROUPS, 1, CV), (KV.TALKER_NUM_CODE_GROUPS, 10**6, CV),
    (KV.TALKER_MROPE_SECTION, [4, 2, 3], CV), (KV.TALKER_MROPE_SECTION, [2**31 - 1, 1, 1], CV),
    (KV.CODE_PRED_VOCAB_SIZE, 0, CV), (KV.CODE_PRED_VOCAB_SIZE, 2**30, CV),
    (KV.DEC_SAMPLE_RATE, 1, CV), (KV.DEC_SAMPLE_RATE, 2**31 - 1, CV), (KV.ENC_SAMPLE_RATE, 16000, CV),
    (KV.DEC_HOP_LENGTH, 1919, CV), (KV.ENC_HOP_LENGTH, 960, CV), (KV.DEC_UPSAMPLE_RATES, [8, 5, 4, 0], CV),
    (KV.DEC_HOP_LENGTH, 3840, CV), (KV.DEC_NUM_QUANTIZERS, 8, CV), (KV.ENC_NUM_QUANTIZERS, 8, CV),
    (KV.DEC_CODEBOOK_DIM, 15, CV), (KV.DEC_CODEBOOK_SIZE, 1024, CV), (KV.DEC_SLIDING_WINDOW, 0, CV),
    (KV.DEC_DECODER_DIM, 40, CV), (KV.ENC_COMPRESS, 0, CV), (KV.ENC_COMPRESS, 64, CV),
    (KV.ENC_KERNEL_SIZE, 0, CV), (KV.ENC_UPSAMPLING_RATIOS, [8, 6, 5, 4] * 3, CV), (KV.ENC_NUM_FILTERS, 10**6, CV),
    (KV.SPK_SAMPLE_RATE, 16000, BASE), (KV.SPK_KERNEL_SIZES, [5, 3, 4, 3, 1], BASE),
    (KV.SPK_DILATIONS, [1, 2, 3, 2**20, 1], BASE), (KV.SPK_RES2NET_SCALE, 1, BASE), (KV.SPK_MEL_DIM, 10**6, BASE),
    (KV.SPK_CHANNELS, [16, 16, 16, 16, 47], BASE),
    (KV.GEN_TEMPERATURE, 0.0, CV), (KV.GEN_TEMPERATURE, NAN, CV), (KV.GEN_SUB_TEMPERATURE, -INF, CV),
    (KV.GEN_TOP_P, 0.0, CV), (KV.GEN_TOP_P, 1.5, CV), (KV.GEN_SUB_TOP_P, NAN, CV),
    (KV.GEN_REPETITION_PENALTY, -1.0, CV), (KV.GEN_REPETITION_PENALTY, INF, CV),
    (KV.GEN_TOP_K, 2**31 - 1, CV), (KV.GEN_SUB_TOP_K, 2**31, CV),
    (KV.GEN_MAX_NEW_TOKENS, 0, CV), (KV.GEN_MAX_NEW_TOKENS, 3 * 10**9, CV),
    # the bounds of the same settings as arguments (qtts.runtime.settings.config), so that a file's defaults
    # never fail at synthesis: found by the fuzzer
    (KV.T_ROPE_FREQ_BASE % KV.P_TALKER, 1e-45, CV), (KV.GEN_TEMPERATURE, 1e-7, CV),
    (KV.GEN_SUB_TEMPERATURE, 1e-30, CV), (KV.GEN_REPETITION_PENALTY, 1e-45, CV), (KV.GEN_MAX_NEW_TOKENS, 1, CV),
    (KV.CODEC_EOS_ID, 3072, CV), (KV.CODEC_THINK_ID, 2**31, CV), (KV.TEXT_IM_START_ID, 512, CV),
    (KV.LANGUAGE_IDS, [2055, 2050, 2061, 2053, 2070, 2058, 2064, 2071, 2069, 10**6], CV),
    (KV.LANGUAGE_IDS, [2055], CV), (KV.SPEAKER_IDS, [2878, 3061, 3072], CV),
    (KV.TOKENIZER_TOKEN_TYPE, [1, 1, 1], CV),
]


def _bad_value_id(case: tuple[str, object, str]) -> str:
    key, value, _ = case
    return f"{key.removeprefix('qwen3-tts.')}={str(value)[:24]}"


@pytest.mark.parametrize("case", BAD_VALUES, ids=[_bad_value_id(c) for c in BAD_VALUES])
def test_bad_hyper_parameter_is_refused(gguf_dir: Path, tmp_path: Path, case: tuple[str, object, str]) -> None:
    key, value, source = case
    bad = corrupt.with_kv(gguf_dir / f"{source}.gguf", tmp_path / "bad.gguf", key, value)
    pattern = all_of(str(bad), f"metadata key '{key}'")
    with pytest.raises(ValueError, match=pattern):
        qtts._core.Model(str(bad), "cpu")
    with pytest.raises(ValueError, match=pattern):
        qtts.inspect(bad)


def test_merge_not_a_pair_is_refused(gguf_dir: Path, tmp_path: Path) -> None:
    merges = corrupt.read(gguf_dir / f"{CV}.gguf").kv[KV.TOKENIZER_MERGES][0]
    bad = corrupt.with_kv(gguf_dir / f"{CV}.gguf", tmp_path / "bad.gguf", KV.TOKENIZER_MERGES,
                          [*merges[:3], b"abc", *merges[4:]])
    with pytest.raises(ValueError, match=all_of(str(bad), f"'{KV.TOKENIZER_MERGES}' element 3", "'a b'")):
        qtts.load(bad)


def test_duplicate_token_is_refused(gguf_dir: Path, tmp_path: Path) -> None:
    tokens = corrupt.read(gguf_dir / f"{CV}.gguf").kv[KV.TOKENIZER_TOKENS][0]
    bad = corrupt.with_kv(gguf_dir / f"{CV}.gguf", tmp_path / "bad.gguf", KV.TOKENIZER_TOKENS,
                          [*tokens[:9], tokens[4], *tokens[10:]])
    with pytest.raises(ValueError, match=all_of(str(bad), f"'{KV.TOKENIZER_TOKENS}' holds token 9 twice (also at 4)")):
        qtts.load(bad)


# the negative epsilon of the issue, end to end: refused by `qtts-cli info` and by synthesis
@pytest.mark.parametrize("value", [-1e-6, NAN, -INF])
def test_cli_info_refuses_bad_epsilon(gguf_dir: Path, tmp_path: Path, value: float) -> None:
    bad = corrupt.with_kv(gguf_dir / f"{CV}.gguf", tmp_path / "eps.gguf", EPS, value)
    r = cli_info(bad)
    assert r.returncode == 1, f"rc={r.returncode} (negative: killed by a signal)\n{r.stderr}"
    assert r.stderr.startswith(f"qtts-cli: error: {bad}: metadata key '{EPS}' = "), r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    r = subprocess.run([sys.executable, "-m", "qtts.cli", "-m", str(bad), "--speaker", "ryan", "-p", "Hi.",
                        "-o", str(tmp_path / "out.wav"), "--max-new-tokens", "3", "-t", "1"],
                       check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and f"metadata key '{EPS}'" in r.stderr, f"rc={r.returncode}\n{r.stderr}"
    assert not (tmp_path / "out.wav").exists()


def test_nan_weights_fail_cleanly_at_synthesis(gguf_dir: Path, tmp_path: Path) -> None:
    """NaN in a weight loads (no check reads every value) but must not pick an arbitrary token."""
    bad = corrupt.nan_tensor(gguf_dir / f"{CV}.gguf", tmp_path / "nan.gguf", TN.TALKER_OUTPUT_NORM)
    model = qtts.Model(bad, n_threads=1, device="cpu", voice_cache=False)
    for sample in (False, True):
        with pytest.raises(ValueError, match="non-finite logits"):
            model.synthesize("Hi.", speaker="ryan", max_new_tokens=3, do_sample=sample, seed=0)


# --- strings: invalid UTF-8 anywhere is an error naming the file and key -------------------------

def _patched(src: Path, dst: Path, old: bytes, new: bytes) -> Path:
    data = src.read_bytes()
    assert len(old) == len(new) and data.count(old) >= 1
    dst.write_bytes(data.replace(old, new, 1))
    return dst


UTF8_CASES: dict[str, tuple[str, Make, str]] = {
    "token": (CV, lambda s, d: _patched(s, d, b"<|im_start|>", b"<|im_st\xffrt|>"),
              f"metadata key '{KV.TOKENIZER_TOKENS}' element "),
    "merge": (CV, lambda s, d: corrupt.with_kv(s, d, KV.TOKENIZER_MERGES, [b"a \xc0\x80"]),
              f"metadata key '{KV.TOKENIZER_MERGES}' element 0 is not valid UTF-8"),
    "speaker": (CV, lambda s, d: corrupt.with_kv(s, d, KV.SPEAKER_NAMES, [b"dylan", b"ry\xedan", b"vivian"]),
                f"metadata key '{KV.SPEAKER_NAMES}' element 1 is not valid UTF-8"),
    "dialect": (CV, lambda s, d: corrupt.with_kv(s, d, KV.SPEAKER_DIALECTS, [b"beijing\xe2\x82", b"", b""]),
                f"metadata key '{KV.SPEAKER_DIALECTS}' element 0 is not valid UTF-8"),
    "language": (BASE, lambda s, d: _patched(s, d, b"english", b"engl\xedsh"),
                 f"metadata key '{KV.LANGUAGE_NAMES}' element "),
    "surrogate": (CV, lambda s, d: corrupt.with_kv(s, d, KV.MODEL_NAME, b"tiny \xed\xa0\x80"),
                  f"metadata key '{KV.MODEL_NAME}' holds a string that is not valid UTF-8"),
    "variant": (CV, lambda s, d: corrupt.with_kv(s, d, KV.VARIANT, b"custom\xff"),
                f"metadata key '{KV.VARIANT}' holds a string that is not valid UTF-8"),
    "key-name": (CV, lambda s, d: _patched(s, d, KV.SOURCE.encode(), KV.SOURCE.encode()[:-1] + b"\xff"),
                 f"metadata key '{KV.SOURCE[:-1]}\\xff' has a name that is not valid UTF-8"),
    "tensor-name": (CV, lambda s, d: _patched(s, d, TN.TALKER_OUTPUT_NORM.encode(),
                                              TN.TALKER_OUTPUT_NORM.encode()[:-1] + b"\x80"),
                    f"tensor '{TN.TALKER_OUTPUT_NORM[:-1]}\\x80' has a name that is not valid UTF-8"),
}


@pytest.mark.parametrize("case", list(UTF8_CASES))
def test_invalid_utf8_names_file_and_key(gguf_dir: Path, tmp_path: Path, case: str) -> None:
    source, make, message = UTF8_CASES[case]
    bad = make(gguf_dir / f"{source}.gguf", tmp_path / f"{case}.gguf")
    pattern = all_of(str(bad), message)
    for load in (lambda p: qtts._core.Model(str(p), "cpu"), qtts.load, qtts.inspect,
                 lambda p: qtts._core.read_tokenizer(str(p))):
        with pytest.raises(ValueError, match=pattern) as e:
            load(bad)
        assert not isinstance(e.value, UnicodeError)
    r = cli_info(bad)
    assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("case", ["merge", "speaker", "key-name", "tensor-name"])
def test_invalid_utf8_in_python_reader(gguf_dir: Path, tmp_path: Path, case: str) -> None:
    from qtts.convert.gguf_meta import read_fields
    from qtts.convert.quantize import quantize

    source, make, _ = UTF8_CASES[case]
    bad = make(gguf_dir / f"{source}.gguf", tmp_path / f"{case}.gguf")
    for read in (read_fields, lambda p: quantize(p, tmp_path / "q.gguf", "q8_0")):
        with pytest.raises(ValueError, match=all_of(str(bad), "not valid UTF-8")) as e:
            read(bad)
        assert not isinstance(e.value, UnicodeError)
    assert not (tmp_path / "q.gguf").exists()
