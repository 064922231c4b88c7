"""bench align (qtts.bench.align) end to end on the tiny aligner and model: each length measured in
fresh processes, the report's rows (alone, and streamed together with word_timestamps); the prompt
text's length follows the audio's."""
from __future__ import annotations

import argparse
from pathlib import Path

from qtts.bench.align import _text, format_align, run_align


def test_text_grows_with_the_audio() -> None:
    assert len(_text(3.0).split()) == 9 and len(_text(10.0).split()) == 30 and len(_text(0.1).split()) == 1


def test_bench_align_runs(aligner_gguf: dict[str, Path], gguf_dir: Path) -> None:
    a = argparse.Namespace(model=str(aligner_gguf["q8_0"]), type="q8_0", tts_model=str(gguf_dir / "tiny_base-f32.gguf"),
                           tts_type="q4_k", seconds=[1.5], repeat=2, ops="auto", threads=1, seed=0, quiet=True)
    r = run_align(a)
    (row,) = r["results"]
    assert row["seconds"] == 1.5 and row["words"] == 4 and row["frames"] == 19
    assert row["total_ms"] > 0 and row["encoder_ms"] > 0 and row["decoder_ms"] > 0 and row["synth_ms"] > 0
    assert row["ratio"] == row["total_ms"] / row["synth_ms"] and row["peak_rss_mb"] > 0
    # streamed: the words come after the last audio, the aligner's time inside that delay
    assert 0 < row["stream_align_ms"] <= row["words_after_ms"] and row["stream_synth_ms"] > 0
    assert row["stream_ratio"] == row["stream_align_ms"] / row["stream_synth_ms"]
    assert row["stream_encoder_ms"] > 0 and row["stream_decoder_ms"] > 0 and row["stream_peak_rss_mb"] > 0
    lines = format_align(r).splitlines()
    assert lines[0].startswith("aligner file (auto ops), synthesis tiny_base-f32.gguf, 1 threads")
    assert lines[2].split()[:2] == ["1.5", "4"]
    assert lines[-1].split()[0] == "1.5" and "words after ms" in lines[-2]
