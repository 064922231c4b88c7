"""The Scheduler's pipelined vocoder (runtime/scheduling/scheduler_vocoder.py): a step's chunks decoded on
the Scheduler's own session while the next step runs. What runs by default off the CPU, forced
here on the CPU: every job's chunks are still exactly Model.stream's, in order, through piece
ends, in-context voices, cancels, streamed text and failures."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.errors import QttsError
from qtts.runtime.engine.engine import SessionHandle
from qtts.runtime.scheduling.scheduler import Scheduler
from tests.chunks import assert_chunks_equal

TEXTS = ["Hello world, this is a tiny test.", "Short.", "A longer sentence, with a few more words than the others."]


def _clip(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 24000
    return (0.3 * np.sin(2 * np.pi * (140 + 60 * t) * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


@pytest.fixture(scope="module", params=["native", "portable"])
def base(request: pytest.FixtureRequest, gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=2, voice_cache=False, ops=request.param)


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2)


@pytest.mark.usefixtures("clock_stands_still")
def test_pipelined_chunks_equal_model_stream(base: qtts.Model) -> None:
    icl = base.create_voice((_clip(24000, 1), 24000), "The quick brown fox jumps.")
    xvec = base.create_voice((_clip(30000, 2), 24000), x_vector_only_mode=True)
    reqs = [dict(text=TEXTS[0], voice=icl, seed=1, max_new_tokens=20),
            dict(text=TEXTS[2] + " " + TEXTS[0], voice=xvec, seed=2, max_new_tokens=9, split_sentences=40),
            dict(text=TEXTS[1], voice=icl, seed=3, max_new_tokens=14, do_sample=False),
            dict(text=TEXTS[2], voice=xvec, seed=4, max_new_tokens=17)]
    with Scheduler(base, max_batch=3, max_queue=4, pipelined_vocoder=True) as sched:
        assert sched.pipelined_vocoder
        jobs = [sched.submit(**r) for r in reqs]
        got = [list(j) for j in jobs]
    for r, job, chunks in zip(reqs, jobs, got, strict=True):
        assert_chunks_equal(chunks, list(base.stream(**r)))
        assert job.done and job.timings.vocoder_ms_per_frame > 0


@pytest.mark.usefixtures("clock_stands_still")
def test_pipelined_cancel_and_streamed_text(cv: qtts.Model) -> None:
    kw = dict(speaker="ryan", seed=5, max_new_tokens=16)
    want = list(cv.stream(TEXTS[2], non_streaming_mode=False, **kw))
    with Scheduler(cv, max_batch=2, max_queue=2, pipelined_vocoder=True) as sched:
        long = sched.submit(TEXTS[0], speaker="ryan", seed=1, max_new_tokens=10_000, frame_budget=None)
        text = sched.submit_text(**kw)
        for word in TEXTS[2].split(" "):
            text.write(word + " ")
        text.end_text()
        it = iter(long)
        next(it)
        long.cancel()
        rest = list(it)
        assert_chunks_equal(list(text), want)
    assert rest[-1].stop_reason == "cancelled" and long.stop_reason == "cancelled"


@pytest.mark.usefixtures("clock_stands_still")
def test_pipelined_push_failure_reaches_its_consumer(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A push that fails in the vocoder's thread fails the jobs it carried (at the worker's next
    barrier); the Scheduler goes on."""
    push = SessionHandle.decode_streams_push
    state = {"fail": True}

    def decode_streams_push(self: SessionHandle, items: list) -> object:
        if state["fail"]:
            raise QttsError("graph compute failed")
        return push(self, items)

    monkeypatch.setattr(SessionHandle, "decode_streams_push", decode_streams_push)
    with Scheduler(cv, max_batch=2, pipelined_vocoder=True) as sched:
        job = sched.submit(TEXTS[0], speaker="ryan", max_new_tokens=12)
        with pytest.raises(QttsError, match="graph compute"):
            list(job)
        state["fail"] = False
        ok = sched.submit(TEXTS[1], speaker="ryan", seed=3, max_new_tokens=6)
        assert_chunks_equal(list(ok), list(cv.stream(TEXTS[1], speaker="ryan", seed=3, max_new_tokens=6)))


def test_pipelined_default_and_bad_value(cv: qtts.Model) -> None:
    with Scheduler(cv, max_batch=1) as sched:
        assert not sched.pipelined_vocoder  # the CPU: the push and the step share the same cores
    with pytest.raises(TypeError, match="pipelined_vocoder must be a bool or None, got str"):
        Scheduler(cv, pipelined_vocoder="yes")
