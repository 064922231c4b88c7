"""bench batch --streams' report: the end-to-end ratio and where a frame and stream went
(qtts.bench.batch)."""
from __future__ import annotations

from qtts.bench.batch import format_bulk


def _run(b: int, audio_s_per_s: float, wall: float, compute: dict[str, float]) -> dict:
    return {"audio_s_per_s": audio_s_per_s, "vocoder_ms_per_frame": compute["vocoder"], "wall_ms_per_frame": wall,
            "compute_ms_per_frame": compute}


def test_streams_report_splits_each_batch_size() -> None:
    one = {"talker": 15.0, "predictor": 26.0, "vocoder": 27.0, "prefill": 1.5}
    eight = {"vocoder": 23.0, "predictor": 7.5, "talker": 3.5, "prefill": 1.5, "other": 0.25}
    r = {"benchmark": "batch --streams", "release": "0.6B-Base", "type": "q4_k", "threads": 2, "load_avg": 0.5,
         "load_avg_end": 0.75,
         "results": {"streams": 8, "frames": 24, "offline_100_ms_per_frame": 22.0, "alone_ms_per_frame": 26.0,
                     "together_ms_per_frame": 22.5, "precision": "fast",
                     "end_to_end": {"1": _run(1, 1.1, 72.0, one), "8": _run(8, 2.2, 36.5, eight)}}}
    lines = format_bulk(r).splitlines()
    assert lines[0] == ("0.6B-Base q4_k random weights, 8 streams x 24 frames, 2 threads, fast precision, "
                        "load 0.50 -> 0.75")
    assert lines[2].endswith("; x2.00")
    # the phases in generation order, then the wall time the graphs do not account for
    assert lines[3] == ("  B = 1, ms per frame and stream: 72.0 = prefill 1.5 + talker 15.0 + predictor 26.0 + "
                        "vocoder 27.0 + outside the graphs 2.5")
    assert lines[4] == ("  B = 8, ms per frame and stream: 36.5 = prefill 1.5 + talker 3.5 + predictor 7.5 + "
                        "vocoder 23.0 + other 0.2 + outside the graphs 0.8")


def test_streams_report_without_the_split() -> None:
    """A results file recorded before the split was measured still prints."""
    r = {"benchmark": "batch --streams", "release": "0.6B-Base", "type": "q4_k", "threads": 2, "load_avg": 0.5,
         "load_avg_end": 0.75,
         "results": {"streams": 8, "frames": 24, "offline_100_ms_per_frame": 22.0, "alone_ms_per_frame": 26.0,
                     "together_ms_per_frame": 22.5,
                     "end_to_end": {"1": {"audio_s_per_s": 1.0, "vocoder_ms_per_frame": 27.0},
                                    "8": {"audio_s_per_s": 1.8, "vocoder_ms_per_frame": 24.0}}}}
    assert len(format_bulk(r).splitlines()) == 3
