"""bench speed's figures: the bytes a generated frame reads per stage and the bandwidth fractions
printed from them (qtts.bench.speed)."""
from __future__ import annotations

import pytest

from qtts.bench import common
from qtts.bench.speed import _analysis, format_speed, stage_bytes

HPARAMS = {"talker": {"block_count": 2, "head_count_kv": 1, "head_dim": 4, "num_code_groups": 16}}
TENSORS = [
    ("talker.blk.0.attn_q.weight", "q8_0", 320),      # 340 bytes
    ("talker.blk.1.ffn_down.weight", "q4_K", 512),    # 288
    ("talker.codec_head.weight", "f32", 10),          # 40
    ("talker.token_embd.weight", "f32", 1000),        # embedding rows: left out
    ("code_pred.blk.0.attn_k.weight", "q6_K", 256),   # 210, read 15 times
    ("code_pred.output_norm.weight", "f32", 2),       # 8, read 15 times
    ("code_pred.lm_head.3.weight", "bf16", 100),      # 200, once
]


def test_stage_bytes() -> None:
    got = stage_bytes(TENSORS, HPARAMS, context=10.0)
    kv = 10 * 2 * 1 * 4 * 2 * 4  # positions x layers x kv heads x head_dim x (K, V) x F32
    assert got == {"talker": 340 + 288 + 40 + kv, "predictor": 15 * (210 + 8) + 200}


def test_stage_fractions_are_printed() -> None:
    r = {"bytes_per_frame": 3e9, "generation_ms_per_frame": 100.0, "vocoder_flop_per_frame": 1e9,
         "vocoder_ms_per_frame": 10.0, "vocoder_threads": 0, "talker_ms_per_frame": 40.0,
         "predictor_ms_per_frame": 60.0, "stage_bytes_per_frame": {"talker": 1e9, "predictor": 2e9}}
    _analysis(r, bandwidth=50.0, peak=None, threads=2)
    assert r["talker_gb_per_s"] == pytest.approx(25.0) and r["talker_bandwidth_fraction"] == pytest.approx(0.5)
    assert r["predictor_gb_per_s"] == pytest.approx(33.3333, rel=1e-4)
    assert r["bandwidth_fraction"] == pytest.approx(0.6)
    out = format_speed({"release": "0.6B-Base", "frames": 100, "threads": 2, "matmul": "native", "load_avg": 0.5,
                        "load_avg_end": 0.7, "cpu": "Some CPU", "l3_mb": 32.0,
                        "bandwidth_gb_per_s": {"1": 30.0, "2": 50.0}, "results": {"q4_k": r}})
    lines = out.splitlines()
    assert lines[1] == "Some CPU, 32 MB last-level cache"
    talker = next(i for i, line in enumerate(lines) if line.startswith("talker GB/s"))
    assert lines[talker].split()[-1] == "25.0" and lines[talker + 1].split()[-1] == "0.50"
    assert lines[talker + 2].split()[-1] == "33.3"


def test_machine_reports_the_cpu_and_its_cache() -> None:
    m = common.machine()
    assert isinstance(m["cpu"], str)
    assert m["l3_mb"] is None or m["l3_mb"] > 0
