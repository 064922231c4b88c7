"""`qtts-cli bench serve`: a live server per batch size driven by Poisson-arriving streaming
clients (qtts.bench.serve), run as a user would on the tiny CustomVoice model; and the rules its
figures follow (arrival times, first audio, underruns) on hand-made client records."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from qtts.bench.serve import summarize
from qtts.bench.serve_clients import UNDERRUN_TOLERANCE_S, Stream, poisson_arrivals
from qtts.cli import build_parser

SPF, RATE = 1920, 24000  # samples per frame, sample rate


def test_bench_serve_command(gguf_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    cmd = [sys.executable, "-m", "qtts.cli", "bench", "serve", "-m", str(gguf_dir / "tiny_custom_voice-f32.gguf"),
           "--batches", "1,2", "--clients", "3", "--rate", "20", "--frames", "6", "-t", "1", "--duration", "300",
           "--json", str(out), "-q"]
    # --duration is each B's deadline, which the three requests meet in seconds on a quiet machine: a
    # generous one keeps a busy machine from cutting them short; the timeout is a hang guard
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert r["benchmark"] == "serve" and r["clients"] == 3 and r["batches"] == [1, 2]
    assert r["underrun_tolerance_ms"] == UNDERRUN_TOLERANCE_S * 1e3
    assert isinstance(r["load_avg"], float) and isinstance(r["load_avg_end"], float)
    x = r["results"]["model"]
    assert x["device"] == "CPU" and x["variant"] == "custom_voice"
    assert list(x["batches"]) == ["1", "2"]
    for b, row in x["batches"].items():
        assert row["batch"] == int(b) and row["requests"] == 3 and row["completed"] == 3
        assert row["rejected"] == row["failed"] == row["timed_out"] == 0
        assert 1 <= row["frames_min"] <= row["frames_max"] <= 6
        assert row["audio_s"] >= 3 * row["frames_min"] / 12.5 and row["audio_s_per_s"] > 0
        assert row["ms_per_frame"] > 0
        assert 0 < row["first_audio_p50_ms"] <= row["first_audio_p95_ms"] <= row["first_audio_max_ms"]
        assert row["no_audio"] == 0
        assert isinstance(row["underruns"], int) and 0 <= row["underruns"] <= 3
        assert row["talker_step_nodes"] > 0
        assert row["load_avg_start"] >= 0 and row["load_avg_end"] >= 0
    # the batched step's graph does not grow with B (docs/serving.md, "Batching")
    assert x["batches"]["1"]["talker_step_nodes"] == x["batches"]["2"]["talker_step_nodes"]
    table = p.stdout.splitlines()
    assert "3 streaming clients at 20 requests/s" in table[0]
    header = table.index(next(line for line in table if line.split()[:3] == ["B", "sent", "done"]))
    rows = [line.split() for line in table[header + 1:header + 3]]
    assert [row[:3] for row in rows] == [["1", "3", "3"], ["2", "3", "3"]]


def test_poisson_arrivals_are_seeded() -> None:
    a = poisson_arrivals(200, 10.0, seed=3)
    assert a == poisson_arrivals(200, 10.0, seed=3) and a != poisson_arrivals(200, 10.0, seed=4)
    assert a[0] == 0.0 and all(x < y for x, y in zip(a[:-1], a[1:], strict=True))
    assert a[-1] / 199 == pytest.approx(0.1, rel=0.25)  # mean gap 1 / rate


def _stream(start: float, first: float | None, frames: int, end: float, lag: float = 0.0, status: int = 200,
            timed_out: bool = False) -> Stream:
    return Stream(start_s=start, end_s=end, status=status, first_audio_s=first, samples=frames * SPF, lag_s=lag,
                  timed_out=timed_out)


def test_summary_of_the_streams() -> None:
    streams = [_stream(0.0, 0.1, 10, 1.0), _stream(0.5, 0.3, 10, 2.0, lag=UNDERRUN_TOLERANCE_S + 0.01),
               _stream(1.0, 0.2, 5, 3.0, timed_out=True), _stream(1.5, None, 0, 1.6, status=429)]
    r = summarize(4, streams, SPF, RATE, (1.0, 2.0), 779)
    assert r.no_audio == 0
    assert (r.requests, r.completed, r.rejected, r.failed, r.timed_out) == (4, 2, 1, 0, 1)
    assert r.audio_s == pytest.approx(25 * SPF / RATE) and r.wall_s == pytest.approx(3.0)
    assert r.audio_s_per_s == pytest.approx(2.0 / 3.0)
    assert r.ms_per_frame == pytest.approx((1000 / 10 + 1500 / 10) / 2)
    assert r.first_audio_p50_ms == pytest.approx(200.0) and r.first_audio_max_ms == pytest.approx(300.0)
    assert r.underruns == 1 and r.worst_lag_ms == pytest.approx((UNDERRUN_TOLERANCE_S + 0.01) * 1e3)
    assert (r.frames_min, r.frames_max, r.talker_step_nodes) == (10, 10, 779)


def test_requests_without_audio_are_late_not_left_out() -> None:
    """A request still queued at the deadline counts as infinitely late: the percentiles it
    reaches are None, the others stay figures."""
    heard = [_stream(0.1 * i, 0.1 * (i + 1), 10, 2.0) for i in range(9)]
    r = summarize(8, [*heard, _stream(1.0, None, 0, 3.0, timed_out=True)], SPF, RATE, (0.0, 0.0), 1)
    assert r.no_audio == 1 and r.timed_out == 1 and r.completed == 9
    assert r.first_audio_p50_ms == pytest.approx(550.0)
    assert r.first_audio_p95_ms is None and r.first_audio_max_ms is None


@pytest.mark.parametrize("flag,value", [("--batches", "1,0"), ("--batches", "1,x"), ("--batches", "257"),
                                        ("--clients", "0"), ("--rate", "-1"), ("--duration", "0")])
def test_bad_flags_are_usage_errors(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["bench", "serve", flag, value])
    assert e.value.code == 2 and f"argument {flag}" in capsys.readouterr().err
