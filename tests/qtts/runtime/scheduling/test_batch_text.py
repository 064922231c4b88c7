"""Streamed text in the batch loop (docs/serving.md, "Streamed text in a batch"): a job whose text
arrives later yields the samples of Model.stream(full text, non_streaming_mode=False) with the
same seed, alone or beside other requests, and a slot waiting for text holds up nobody. The
expected values come from the single-sequence path, which the reference parity tests pin."""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.runtime.scheduling.scheduler import Job, Scheduler
from qtts.runtime.settings.config import GenerationConfig
from qtts.runtime.synthesis.prompt import build_prompt, resolve_voice

TEXT = "Hello world, this is a streaming test. It's got two sentences: don't stop!"
LONG = ("The first sentence is here. A second, longer sentence follows it, with clauses; "
        "then the end comes at last!")
GREEDY = dict(do_sample=False, subtalker_dosample=False)
REF_TEXT = "The quick brown fox jumps."


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)


@pytest.fixture(scope="module")
def base(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=1, voice_cache=False)


def _cuts(text: str, how: str) -> list[str]:
    if how == "chars":
        return list(text)
    words = text.split(" ")  # as an LLM's deltas: each word with the space before it
    return [words[0]] + [" " + w for w in words[1:]]


def _delayed(parts: list[str], seed: int, gate: threading.Event | None = None, at: int = 0) -> Iterator[str]:
    """The parts with short random delays; with `gate`, the parts from `at` on only once it is set."""
    rng = random.Random(seed)
    for i, p in enumerate(parts):
        if gate is not None and i == at:
            assert gate.wait(60)
        if rng.random() < 0.3:
            time.sleep(rng.random() * 0.01)
        yield p


def _check(model: qtts.Model, job: Job, text: str, **kwargs: object) -> list[qtts.AudioChunk]:
    got = list(job)
    want = list(model.stream(text, non_streaming_mode=False, **kwargs))
    np.testing.assert_array_equal(np.concatenate([c.codes for c in got]), np.concatenate([c.codes for c in want]))
    np.testing.assert_array_equal(np.concatenate([c.samples for c in got]),
                                  np.concatenate([c.samples for c in want]))
    assert got[-1].stop_reason == want[-1].stop_reason and job.stop_reason == want[-1].stop_reason
    assert all(c.stop_reason is None for c in got[:-1])
    return got


@pytest.mark.parametrize("how", ["chars", "words"])
@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_text_job_alone_equals_stream(cv: qtts.Model, how: str, sampling: str) -> None:
    args = dict(speaker="ryan", seed=7, max_new_tokens=30, **(GREEDY if sampling == "greedy" else {}))
    with Scheduler(cv, max_batch=2, max_queue=2, first_chunk_frames=2, max_chunk_frames=4) as sched:
        job = sched.submit_text(_delayed(_cuts(TEXT, how), 1), **args)
        _check(cv, job, TEXT, **args)
        assert job.timings.time_to_first_audio_ms is not None


def test_text_jobs_among_others_equal_stream(cv: qtts.Model) -> None:
    """Two streamed-text jobs (one split into sentences, with delays) and two whole-text requests
    in one batch; the second whole-text request is queued behind a text job that waits for its
    first word, and runs anyway."""
    reqs = [dict(speaker="ryan", seed=1, max_new_tokens=24),
            dict(speaker="vivian", seed=2, max_new_tokens=12, split_sentences=40, **GREEDY)]
    plain = [dict(text="Short.", speaker="vivian", seed=3, max_new_tokens=9),
             dict(text="Another short one.", speaker="ryan", seed=4, max_new_tokens=8, **GREEDY)]
    with Scheduler(cv, max_batch=3, max_queue=4) as sched:
        jobs = [sched.submit_text(_delayed(_cuts(TEXT, "chars"), 5), **reqs[0])]
        late = sched.submit_text(**reqs[1])  # no text yet: queued, not admitted
        others = [sched.submit(**r) for r in plain]
        for other, r in zip(others, plain, strict=True):  # they ran while `late` had no word
            want = list(cv.stream(**r))
            np.testing.assert_array_equal(other.result(timeout=120).samples,
                                          np.concatenate([c.samples for c in want]))
        for part in _delayed(_cuts(LONG, "words"), 6):
            late.write(part)
        late.end_text()
        jobs.append(late)
        for job, r, text in zip(jobs, reqs, (TEXT, LONG), strict=True):
            _check(cv, job, text, **r)
        assert sched.stats.running == 0 and sched.stats.requests_total == 4


def test_waiting_slot_sits_out_without_holding_others(cv: qtts.Model) -> None:
    gate = threading.Event()
    args = dict(speaker="ryan", seed=5, max_new_tokens=30)
    with Scheduler(cv, max_batch=2, max_queue=2) as sched:
        parts = _cuts(TEXT, "words")
        job = sched.submit_text(_delayed(parts, 2, gate, at=3), **args)  # stops after three words
        first = next(iter(job))  # it runs, then waits for its fourth word
        assert len(first.codes) > 0
        other = sched.submit("A request that runs meanwhile.", speaker="vivian", seed=6, max_new_tokens=10)
        want = list(cv.stream("A request that runs meanwhile.", speaker="vivian", seed=6, max_new_tokens=10))
        audio = other.result(timeout=120)
        assert not job.done and sched.stats.running == 1  # the text job is still waiting for text
        np.testing.assert_array_equal(audio.samples, np.concatenate([c.samples for c in want]))
        gate.set()
        rest = list(job)
        got = np.concatenate([first.samples, *[c.samples for c in rest]])
        np.testing.assert_array_equal(got, np.concatenate([c.samples for c in cv.stream(TEXT, non_streaming_mode=False,
                                                                                         **args)]))


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_waiting_since_tells_when_a_job_waits_for_text(cv: qtts.Model) -> None:
    """Job.waiting_since (the server's idle timeout reads it): set while the job has no text it
    can speak (queued before its first word, or all its text spoken), cleared while it has."""
    with Scheduler(cv, max_batch=1, max_queue=2) as sched:
        job = sched.submit_text(speaker="ryan", seed=5, max_new_tokens=200)
        _until(lambda: job.waiting_since is not None, "a job without text waits for it")
        first = job.waiting_since
        job.write("Hello there, this is a sentence ")
        assert len(next(iter(job)).codes) > 0  # it speaks what it was given ...
        # ... and then waits again, since later
        _until(lambda: job.waiting_since is not None and job.waiting_since > first, "a new wait")
        job.end_text()
        list(job)
        assert job.waiting_since is None


@pytest.mark.parametrize("x_vector_only", [False, True])
def test_clone_text_job_equals_stream(base: qtts.Model, x_vector_only: bool) -> None:
    rng = np.random.default_rng(1)
    t = np.arange(24000) / 24000
    wav = (0.3 * np.sin(2 * np.pi * (140 + 60 * t) * t) + 0.05 * rng.standard_normal(24000)).astype(np.float32)
    voice = base.create_voice((wav, 24000), None if x_vector_only else REF_TEXT, x_vector_only_mode=x_vector_only)
    args = dict(voice=voice, seed=4, max_new_tokens=20)
    with Scheduler(base, max_batch=2, max_queue=2) as sched:
        job = sched.submit_text(_delayed(_cuts(TEXT, "words"), 3), **args)
        _check(base, job, TEXT, **args)


def test_native_slot_waits_for_its_text(cv: qtts.Model) -> None:
    """The engine level: a text-open slot steps no frame without its next text row and says so;
    fed row by row, its codes are the whole text's."""
    with cv.engine.session() as s:
        cond = resolve_voice(cv.context, language="english", speaker="ryan", instruct=None, voice=None)
        config = GenerationConfig.resolve(cv.generation_defaults, dict(max_new_tokens=12, **GREEDY), 1,
                                          frame_budget=None)
        whole = build_prompt(cv.context, s, TEXT, cond, non_streaming_mode=False)
        want = s.generate(whole.embeddings, whole.trailing, config)[0]
        ids = cv.tokenizer.prompt_text_ids(TEXT)
        opened = build_prompt(cv.context, s, "", cond, non_streaming_mode=False, text_ids=ids[:1], text_open=True)
        batch = cv.engine.batch(2)
        slot = s.batch_add(batch, opened.embeddings, opened.trailing, config, text_open=True)
        codes = []
        (step,) = s.batch_step(batch, 3)  # the prompt's logits give frame 0; frame 1 needs token 1
        assert step[0] == slot and len(step[1]) == 1 and step[2] is None and step[3]["needs_text"]
        codes.append(step[1])
        (idle,) = s.batch_step(batch, 1)
        assert len(idle[1]) == 0 and idle[3]["needs_text"]
        rows = [*ids[1:], cv.engine.text_ids["tts_eos"]]
        for i, tid in enumerate(rows):
            s.batch_append(batch, slot, s.text_embed([tid]), i + 1 == len(rows), config)
            (step,) = s.batch_step(batch, 1)
            codes.append(step[1])
            if step[2] is not None:
                break
        while step[2] is None:
            (step,) = s.batch_step(batch, 4)
            codes.append(step[1])
        np.testing.assert_array_equal(np.concatenate(codes), want)
        with pytest.raises(ValueError, match="slot"):
            s.batch_append(batch, slot, s.text_embed([1]), True, config)  # it ended: the slot is free


def test_cancel_and_close_mid_text(cv: qtts.Model) -> None:
    with Scheduler(cv, max_batch=2, max_queue=2) as sched:
        job = sched.submit_text(speaker="ryan", seed=1, max_new_tokens=50)
        job.write("Hello there, ")
        first = next(iter(job))
        assert len(first.samples) > 0
        job.cancel()  # while it waits for text
        rest = list(job)
        assert rest[-1].stop_reason == "cancelled" and job.stop_reason == "cancelled"
        queued = sched.submit_text(speaker="ryan")  # never a word: cancelled in the queue
        queued.cancel()
        assert list(queued)[-1].stop_reason == "cancelled"
        deadline = time.monotonic() + 120  # a hang guard
        while sched.stats.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sched.stats.running == 0 and sched.stats.cancelled_total == 2
    sched = Scheduler(cv, max_batch=1, max_queue=1)
    job = sched.submit_text(speaker="ryan", seed=1, max_new_tokens=50)
    job.write("Waiting for more ")
    sched.close(cancel=True, timeout=60)
    assert list(job)[-1].stop_reason == "cancelled"


def test_bad_text(cv: qtts.Model) -> None:
    with Scheduler(cv, max_batch=1, max_queue=2) as sched:
        empty = sched.submit_text(iter([]), speaker="ryan")
        with pytest.raises(ValueError, match="text is empty"):
            list(empty)
        bad = sched.submit_text(iter(["Hello ", 3]), speaker="ryan")  # type: ignore[list-item]
        with pytest.raises(TypeError, match="fragment must be a str"):
            list(bad)
        with pytest.raises(TypeError, match="iterable"):
            sched.submit_text("whole text", speaker="ryan")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="speaker"):
            sched.submit_text(speaker="nobody")
        whole = sched.submit("Hi.", speaker="ryan", max_new_tokens=3)
        with pytest.raises(TypeError, match="only a submit_text job"):
            whole.write("more")
        whole.result(timeout=60)
