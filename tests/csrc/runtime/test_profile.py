"""The code predictor's replayed frame graph (one compute per frame, sampling inside the graph) and
the session profile `bench speed --profile` prints."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.bench.profile import format_profile, plumbing, summarize
from qtts.convert.names import TN
from qtts.runtime.settings.config import GenerationConfig
from qtts.runtime.synthesis.prompt import build_prompt, resolve_voice
from tests import corrupt
from tests.profiling import profiled

CV = "tiny_custom_voice-f32"
TEXT = "Hello world, this is a tiny test."


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / f"{CV}.gguf", n_threads=2, device="cpu", voice_cache=False)


def test_one_predictor_graph_per_frame(cv: qtts.Model) -> None:
    want = cv.generate_codes(TEXT, speaker="ryan", seed=5, max_new_tokens=9).codes
    cv.synthesize("Other graphs in between.", speaker="vivian", max_new_tokens=4)  # the shared scheduler's
    got, prof = profiled(cv, lambda: cv.generate_codes(TEXT, speaker="ryan", seed=5, max_new_tokens=9).codes)
    # node-by-node profiling computes the same values
    np.testing.assert_array_equal(got, want)
    frames = len(got)
    assert frames == 8
    assert prof["predictor/:graphs"] == frames  # replayed: one compute per frame, not one per code group
    assert prof["talker/:graphs"] == frames and prof["prefill/:graphs"] == 1  # the last step samples the stop
    assert prof["predictor/SAMPLE"] > 0 and prof["predictor/MUL_MAT"] > 0
    assert all(k.partition("/")[0] in {"prefill", "talker", "predictor", "vocoder", "other"} for k in prof)
    assert all(v >= 0 for v in prof.values())


def test_batch_graphs_follow_the_profiling_switch(cv: qtts.Model) -> None:
    """A batch's replayed graphs (talker step, predictor frame), built before profiling is turned
    on, are profiled op by op while it is on and leave the profile alone once it is off again."""
    cond = resolve_voice(cv.context, language="english", speaker="ryan", instruct=None, voice=None)
    config = GenerationConfig.resolve(cv.generation_defaults, dict(max_new_tokens=40), 5, frame_budget=None)
    batch = cv.engine.batch(2)
    with cv.engine.session() as s:
        prompt = build_prompt(cv.context, s, TEXT, cond, non_streaming_mode=False)
        for _ in range(2):
            s.batch_add(batch, prompt.embeddings, prompt.trailing, config)
        s.batch_step(batch, 3)  # the replayed graphs exist before profiling starts

    def step() -> None:
        with cv.engine.session() as s:
            s.batch_step(batch, 2)

    _, prof = profiled(cv, step)
    assert prof["talker/MUL_MAT"] > 0 and prof["predictor/SAMPLE"] > 0 and prof["predictor/:graphs"] == 2
    step()
    with cv.engine.session() as s:
        assert s.profile() == {}


def test_profile_without_ops(cv: qtts.Model) -> None:
    """ops=False: the graph counts and the build/alloc/compute times only, graphs computed whole
    (what a GPU's wall-clock split needs), and one scheduler split per graph on the CPU."""
    want = cv.generate_codes(TEXT, speaker="ryan", seed=5, max_new_tokens=9).codes
    got, prof = profiled(cv, lambda: cv.generate_codes(TEXT, speaker="ryan", seed=5, max_new_tokens=9).codes, ops=False)
    np.testing.assert_array_equal(got, want)
    assert prof["predictor/:graphs"] == len(got) and prof["predictor/:compute"] > 0
    assert {k.partition("/")[2] for k in prof} <= {":build", ":alloc", ":compute", ":graphs", ":nodes", ":splits"}
    for phase in ("prefill", "talker", "predictor"):
        assert prof[f"{phase}/:splits"] == prof[f"{phase}/:graphs"]


def test_plumbing_per_phase_and_off_after(cv: qtts.Model) -> None:
    """bench.profile.plumbing: per phase the laps and counts, profiling off again on leaving,
    also when the block raises."""
    with plumbing(cv) as got:
        codes = cv.generate_codes(TEXT, speaker="ryan", seed=5, max_new_tokens=9).codes
    assert set(got) == {"prefill", "talker", "predictor", "other"}
    assert got["predictor"]["graphs"] == len(codes) and got["talker"]["compute"] > 0
    assert set(got["talker"]) <= {"build", "alloc", "compute", "graphs", "nodes", "splits"}
    with pytest.raises(ValueError, match="max_new_tokens"), plumbing(cv):
        cv.generate_codes(TEXT, speaker="ryan", max_new_tokens=0)
    with cv.engine.session() as s:
        assert s.profile() == {}  # off: nothing recorded since
    cv.generate_codes(TEXT, speaker="ryan", seed=5, max_new_tokens=3)
    with cv.engine.session() as s:
        assert s.profile() == {}


def test_predictor_nan_fails_cleanly(gguf_dir: Path, tmp_path: Path) -> None:
    """select_token's error inside the graph's sampling op reaches the caller as the same ValueError."""
    bad = corrupt.nan_tensor(gguf_dir / f"{CV}.gguf", tmp_path / "nan.gguf", TN.CODE_PRED_OUTPUT_NORM)
    model = qtts.Model(bad, n_threads=2, device="cpu", voice_cache=False)
    for sample in (False, True):
        with pytest.raises(ValueError, match="non-finite logits"):
            model.synthesize("Hi.", speaker="ryan", max_new_tokens=3, subtalker_dosample=sample, seed=0)


def test_summarize_splits_phases_and_overhead() -> None:
    raw = {"talker/QMATMUL": 40.0, "talker/ADD": 10.0, "talker/:build": 2.0, "talker/:graphs": 10.0,
           "predictor/QMATMUL": 100.0, "predictor/SAMPLE": 5.0, "prefill/QMATMUL": 3.0}
    p = summarize(raw, 10, {"talker_ms_per_frame": 6.0, "predictor_ms_per_frame": 12.0})
    assert list(p["phases"]) == ["prefill", "talker", "predictor"]
    t = p["phases"]["talker"]
    assert t["ops"] == {"QMATMUL": 4.0, "ADD": 1.0} and t["plumbing"] == {"build": 0.2, "graphs": 1.0}
    assert t["op_ms_per_frame"] == 5.0 and t["overhead_ms_per_frame"] == pytest.approx(1.0)
    assert p["phases"]["predictor"]["overhead_ms_per_frame"] == pytest.approx(1.5)
    assert "overhead_ms_per_frame" not in p["phases"]["prefill"]
    text = format_profile("q8_0", p)
    assert "predictor" in text and "QMATMUL 10.00" in text
