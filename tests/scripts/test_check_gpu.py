"""The GPU check's CPU dry run (scripts/check_gpu.py, docs/gpu.md): the same goldens from the
reference and the same parity checks, on this machine's CPU through the portable graphs a GPU
runs (the code predictor sampling in its frame graph, as there), so the script a GPU machine gets
once is known to work."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_check_gpu_dry_run_on_the_cpu(fixture_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "check_gpu.py"), "run", "--device", "cpu",
                        "--no-build", "--ops", "portable", "--sampling", "device", "--out", str(out),
                        "--work", str(tmp_path / "work"),
                        "--phases", "info,goldens,parity_exact,parity_fast,batch_parity_exact,ops",
                        "--budget-s", "3600"],  # a budget no busy machine runs out of: phases never skipped
                       capture_output=True, text=True, timeout=3900)  # a hang guard
    res = json.loads((out / "check_gpu.json").read_text())
    assert p.returncode == 0, (out / "logs.txt").read_text()[-3000:]
    exact = res["phases"]["parity_exact"]["result"]
    assert exact["passed"] and exact["encoder_codes_equal"] and len(exact["cases"]) == 5
    assert set(exact["devices"].values()) == {"CPU/portable"} and exact["resolved_precision"] == "exact"
    for case in exact["cases"]:
        assert case["codes_equal"] and case["wav_max_abs"] <= 1e-4
        # the device and the CPU's portable path are the same process here: the same sums
        assert case["logits_cosine_min"] >= 0.9999999 and case["codec_snr_db"] > 60
    # the seeded top-k request sampled in the frame graph: the host sampler's codes, one split a graph
    sampled = exact["sampled"]
    assert sampled["codes_equal"] and sampled["frames"] > 1
    assert set(sampled["splits_per_graph"].values()) == {1.0}, sampled
    assert res["phases"]["parity_fast"]["result"]["passed"]
    # every op the portable graphs compute (the aligner's included) is in docs/gpu.md's Metal table, no get_rows operand
    # starts off a 256-byte boundary, and the causal mask is built from stock ops every backend has
    census = res["phases"]["ops"]["result"]
    assert census["unchecked_ops"] == [] and census["get_rows_misaligned"] == [], census
    assert "ARGSORT i32 <- f32" in census["census"] and "TRI f32 <- f32" in census["census"]
    # the forced aligner's graphs too (its encoder's convolutions as im2col and a product)
    assert census["aligner"] and "IM2COL f32 <- f32, f32" in census["census"], census
    batched = res["phases"]["batch_parity_exact"]["result"]
    assert batched["passed"] and [len(m["requests"]) for m in batched["models"]] == [4, 4, 4]
    assert {x["frames"] for m in batched["models"] for x in m["requests"]} == {20, 7, 14, 4}
    assert "| tiny_base (x_vector_only_mode=False" in (out / "check_gpu.md").read_text()
