"""Malformed aligner files: the aligner's loader (runtime/aligner_model.cpp, nets/aligner*.cpp)
raises a ValueError naming the file, the problem and the key or tensor; the two architectures
send each other to their own loader."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as GT
from gguf import GGUFValueType as VT

from qtts._native import core
from qtts.convert.names import KV, TN
from tests import corrupt

Make = Callable[[Path, Path], Path]
CHUNK = KV.AENC_CHUNK_FRAMES
HEADS = KV.T_HEAD_COUNT % KV.P_ALIGNER_AUDIO


def kv(key: str, value: object = corrupt.DROP, vtype: VT | None = None) -> Make:
    return lambda s, d: corrupt.with_kv(s, d, key, value, vtype)


CASES: dict[str, tuple[Make, list[str]]] = {
    "format-version-2": (kv(KV.ALIGNER_FORMAT_VERSION, 2), ["aligner format version 2 is not supported"]),
    "window-shorter-than-chunk": (kv(KV.AENC_WINDOW_FRAMES, 50), [f"'{KV.AENC_WINDOW_FRAMES}' = 50 is outside"]),
    "chunk-missing": (kv(CHUNK), [f"metadata key '{CHUNK}' is missing"]),
    "heads-not-dividing": (kv(HEADS, 3), [f"'{HEADS}' = 3 does not divide the width 32"]),
    "encoder-narrower": (kv(KV.AENC_OUTPUT_LENGTH, 16),
                         [f"tensor '{TN.AENC_PROJ2}' has shape [32, 32], expected [32, 16]"]),
    "timestamp-id-out-of-range": (kv(KV.ALIGNER_TIMESTAMP_ID, 10**6), [f"'{KV.ALIGNER_TIMESTAMP_ID}' = 1000000"]),
    "conv-missing": (lambda s, d: corrupt.drop_tensor(s, d, TN.AENC_CONV % 1),
                     [f"tensor '{TN.AENC_CONV % 1}' is missing"]),
    "conv-reshaped": (lambda s, d: corrupt.reshape_tensor(s, d, TN.AENC_CONV % 0, (8, 1, 9, 1)),
                      [f"tensor '{TN.AENC_CONV % 0}'", "shape"]),
    "bias-f16": (lambda s, d: corrupt.retype_tensor_f16(s, d, TN.L_ATTN_Q_B % (TN.AENC, 0)),
                 [f"tensor '{TN.L_ATTN_Q_B % (TN.AENC, 0)}' has unsupported type f16"]),
    "head-f16": (lambda s, d: corrupt.retype_tensor(s, d, TN.ADEC_TIMESTAMP_HEAD, GT.F16),
                 [f"tensor '{TN.ADEC_TIMESTAMP_HEAD}' has unsupported type f16"]),
    "extra-tensor": (lambda s, d: corrupt.add_extra_tensor(s, d, "aenc.blk.0.bogus.weight"),
                     ["aenc.blk.0.bogus.weight"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refusal_names_the_problem(case: str, aligner_gguf: dict[str, Path], tmp_path: Path) -> None:
    make, fragments = CASES[case]
    bad = make(aligner_gguf["f32"], tmp_path / f"{case}.gguf")
    with pytest.raises(ValueError) as err:
        core.AlignerModel(str(bad), "cpu")
    for fragment in [str(bad), *fragments]:
        assert fragment in str(err.value), (case, str(err.value))


def test_good_files_load(aligner_gguf: dict[str, Path]) -> None:
    for path in aligner_gguf.values():
        m = core.AlignerModel(str(path), "cpu")
        assert m.ops == "native" and m.segment_ms == 80.0 and m.hparams["decoder"]["timestamp_classes"] == 5000


def test_each_architecture_names_its_loader(aligner_gguf: dict[str, Path], gguf_dir: Path) -> None:
    with pytest.raises(ValueError, match="expected 'qwen3-tts': a forced aligner, for qtts.load_aligner"):
        core.Model(str(aligner_gguf["f32"]), "cpu")
    tts = gguf_dir / "tiny_custom_voice-f32.gguf"
    with pytest.raises(ValueError, match="expected 'qwen3-forced-aligner': a text-to-speech model, for qtts.load"):
        core.AlignerModel(str(tts), "cpu")


def test_native_ops_need_the_cpu(aligner_gguf: dict[str, Path]) -> None:
    # there is no second device on the test machines: the CPU takes both paths
    assert core.AlignerModel(str(aligner_gguf["f32"]), "cpu", core.Ops.portable).ops == "portable"
    assert core.file_architecture(str(aligner_gguf["f32"])) == KV.ALIGNER_ARCH_NAME
    assert core.file_architecture("/nonexistent.gguf") == ""


def test_fuzzed_aligner_files_never_crash(aligner_gguf: dict[str, Path], tmp_path: Path) -> None:
    """Mutants of the tiny aligner (tests/fuzz_gguf.py: bit flips, truncations, header, metadata
    and tensor-info edits), each loaded and, when it loads, aligning a clip in a worker process:
    none may kill it, hang it or raise anything but a ValueError / OSError."""
    from tests import fuzz_gguf

    report = fuzz_gguf.fuzz([aligner_gguf["f32"], aligner_gguf["q8_0"]], 150, seed=1, save_dir=tmp_path / "failures")
    assert report.counts["rejected"] > 0 and report.counts["ok"] > 0, report.summary()
    assert not report.failures, "\n".join(report.failures)
