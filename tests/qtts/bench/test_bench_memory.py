"""bench memory's report (qtts.bench.memory): a row per type and mode, with the precision the
worker resolved, and results recorded before that column still print."""
from __future__ import annotations

from qtts.bench.memory import format_memory


def _row(mode: str, rss: float, **extra: str) -> dict:
    return {"mode": mode, "file_mb": 1514.0, "peak_rss_mb": rss, "kv_cache_mb": 25.7, "compute_buffers_mb": 147.6,
            **extra}


def test_memory_report_names_the_precision() -> None:
    r = {"release": "0.6B-Base", "threads": 2,
         "results": {"q4_k": [_row("load", 564.0, precision="fast"), _row("synthesize", 1018.0, precision="fast")]}}
    lines = format_memory(r).splitlines()
    assert lines[0] == "0.6B-Base random weights, 2 threads"
    assert lines[1].split() == ["type", "mode", "precision", "file", "MB", "peak", "RSS", "MB", "KV", "MB", "compute",
                                "MB"]
    assert lines[2].split() == ["q4_k", "load", "fast", "1514", "564", "25.7", "147.6"]
    assert lines[3].split() == ["q4_k", "synthesize", "fast", "1514", "1018", "25.7", "147.6"]


def test_memory_report_of_older_results() -> None:
    r = {"release": "0.6B-Base", "threads": 2, "results": {"q8_0": [_row("load", 179.0)]}}
    assert format_memory(r).splitlines()[2].split() == ["q8_0", "load", "-", "1514", "179", "25.7", "147.6"]
