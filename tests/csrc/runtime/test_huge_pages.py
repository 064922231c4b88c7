"""The weights every frame streams read into transparent huge pages (docs/architecture.md, "Weights
in huge pages"): which tensors and how many bytes, the same results as the file mapping, and the
option from the Python API to the CLI."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

import qtts
from qtts._native import core

# every layer's projections of the talker and the code predictor, the talker's codec head, the
# code predictor's heads and input projection
STREAMED = re.compile(r"(talker|code_pred)\.blk\.\d+\."
                      r"(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight"
                      r"|talker\.codec_head\.weight|code_pred\.lm_head\.\d+\.weight|code_pred\.mtp_proj\.weight")


def _thp_available() -> bool:
    """What the loader reads: Linux with transparent huge pages "always" or "madvise"."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


def _streamed_bytes(path: Path) -> tuple[int, int]:
    """The streamed tensors' bytes, and with each padded to 64 bytes (a joined weight's parts,
    docs/architecture.md "Fused projections", are placed end to end: only the run is padded)."""
    tensors = gguf.GGUFReader(path).tensors
    assert any(STREAMED.fullmatch(t.name) for t in tensors)
    sizes = [int(t.n_bytes) for t in tensors if STREAMED.fullmatch(t.name)]
    return sum(sizes), sum(-(-n // 64) * 64 for n in sizes)


@pytest.mark.parametrize("out_type", ["f32", "q8_0"])
def test_the_streamed_matrices_and_only_they_are_read_into_huge_pages(gguf_dir: Path, out_type: str) -> None:
    path = gguf_dir / f"tiny_base-{out_type}.gguf"
    m = qtts.Model(path, n_threads=1, device="cpu", voice_cache=False)
    if _thp_available():
        low, high = _streamed_bytes(path)
        assert low <= m.engine.huge_page_bytes <= high
    else:
        assert m.engine.huge_page_bytes == 0
    mapped = qtts.Model(path, n_threads=1, device="cpu", voice_cache=False, huge_pages=False)
    assert mapped.engine.huge_page_bytes == 0
    # counted once, in the huge pages (their rows padded to 64 bytes), not also in the mapping
    assert 0 <= m.engine.weight_bytes - mapped.engine.weight_bytes < 64 * len(
        [t for t in gguf.GGUFReader(path).tensors if STREAMED.fullmatch(t.name)])


def _packed_bytes(path: Path) -> int:
    return sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors
               if STREAMED.fullmatch(t.name) and t.tensor_type.name == "Q8_0")


@pytest.mark.parametrize("out_type", ["f32", "q8_0"])
def test_the_q8_0_matrices_in_huge_pages_are_packed(gguf_dir: Path, out_type: str) -> None:
    """Packed for the quantized matmul where the CPU has AVX-512 VNNI (docs/kernels.md, "Packed
    Q8_0"); the file's mapped pages never."""
    path = gguf_dir / f"tiny_base-{out_type}.gguf"
    m = qtts.Model(path, n_threads=1, device="cpu", voice_cache=False)
    packs = _thp_available() and core.ops.q8_0_packs()
    assert m.engine.packed_bytes == (_packed_bytes(path) if packs else 0)
    assert (m.engine.packed_bytes > 0) == (packs and out_type == "q8_0")
    mapped = qtts.Model(path, n_threads=1, device="cpu", voice_cache=False, huge_pages=False)
    assert mapped.engine.packed_bytes == 0


@pytest.mark.parametrize("simd", ["best", "scalar"])
def test_packed_weights_give_the_mapped_weights_results(gguf_dir: Path, simd: str) -> None:
    """Bit for bit with the VNNI kernel. On a lowered SIMD path the packed weights take the plain
    C++ kernel and the mapped ones ggml's mul_mat (kernels.md): the same logits to rounding."""
    path = gguf_dir / "tiny_custom_voice-q8_0.gguf"
    models = {huge: qtts.Model(path, n_threads=2, device="cpu", voice_cache=False, huge_pages=huge)
              for huge in (True, False)}
    embeddings = np.random.default_rng(0).standard_normal((7, 32)).astype(np.float32) * 0.1
    if simd == "scalar":
        core.ops.set_simd_path("scalar")
    try:
        logits = {}
        for huge, m in models.items():
            with m.engine.session() as s:
                logits[huge], _ = s.talker_prefill(embeddings)
        codes = {huge: m.generate_codes("Packed or not.", speaker="ryan", seed=3, max_new_tokens=10).codes
                 for huge, m in models.items()}
    finally:
        core.ops.set_simd_path(core.ops.simd_paths()[-1])
    if simd == "best":
        np.testing.assert_array_equal(logits[True], logits[False])
        np.testing.assert_array_equal(codes[True], codes[False])
    else:
        a, b = logits[True].astype(np.float64), logits[False].astype(np.float64)
        assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.9999


@pytest.mark.parametrize("name,kw", [("tiny_custom_voice", {"speaker": "ryan"}),
                                     ("tiny_voice_design", {"instruct": "A calm voice."})])
def test_huge_pages_give_the_mapped_weights_results(gguf_dir: Path, name: str, kw: dict) -> None:
    path = gguf_dir / f"{name}-q8_0.gguf"
    out = {}
    for huge in (True, False):
        m = qtts.Model(path, n_threads=2, device="cpu", voice_cache=False, huge_pages=huge)
        out[huge] = m.synthesize("Huge pages or not, the same audio.", seed=7, max_new_tokens=12, **kw)
        out[(huge, "batch")] = m.synthesize_batch(["One.", "Two, longer."], seed=[1, 2], max_new_tokens=9, **kw)
    np.testing.assert_array_equal(out[True].codes, out[False].codes)
    np.testing.assert_array_equal(out[True].samples, out[False].samples)
    for a, b in zip(out[(True, "batch")], out[(False, "batch")], strict=True):
        np.testing.assert_array_equal(a.samples, b.samples)


def test_metadata_reads_no_weights_into_huge_pages(gguf_dir: Path) -> None:
    from qtts.runtime.engine.engine import Engine

    assert Engine.metadata(str(gguf_dir / "tiny_base-q8_0.gguf")).huge_page_bytes == 0


def test_huge_pages_must_be_a_bool(gguf_dir: Path) -> None:
    with pytest.raises(TypeError, match="huge_pages must be True or False, got str"):
        qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", voice_cache=False, huge_pages="yes")


def test_cli_no_huge_pages(gguf_dir: Path, tmp_path: Path) -> None:
    cv = str(gguf_dir / "tiny_custom_voice-q8_0.gguf")
    wavs = []
    for flag in ([], ["--no-huge-pages"]):
        out = tmp_path / f"out{len(wavs)}.wav"
        r = subprocess.run([sys.executable, "-m", "qtts.cli", "speak", "-m", cv, "--speaker", "ryan", "--seed", "3",
                            "--max-new-tokens", "8", "-o", str(out), "-q", "-p", "Hello.", *flag],
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        wavs.append(out.read_bytes())
    assert wavs[0] == wavs[1]


def test_batch_no_huge_pages(gguf_dir: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "items.jsonl"
    manifest.write_text('{"id": "a", "text": "Hello.", "speaker": "ryan", "seed": 5, "max_new_tokens": 8}\n')
    outs = []
    for flag in ([], ["--no-huge-pages"]):
        out = tmp_path / f"out{len(outs)}"
        r = subprocess.run([sys.executable, "-m", "qtts.cli", "batch", str(manifest), "-m",
                            str(gguf_dir / "tiny_custom_voice-q8_0.gguf"), "--output-dir", str(out), "-t", "1", *flag],
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        outs.append((out / "a.wav").read_bytes())
    assert outs[0] == outs[1]
