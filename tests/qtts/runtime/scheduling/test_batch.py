"""Continuous batching: a request's codes and audio do not depend on the company it keeps. The
expected values come from the single-sequence path (generate, synthesize, stream), which the
reference parity tests pin."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.errors import QttsError
from qtts.runtime.engine.engine import SessionHandle, native_params
from qtts.runtime.scheduling.job import Job
from qtts.runtime.scheduling.scheduler import QueueFull, Scheduler, SchedulerClosed, default_limits
from qtts.runtime.settings.config import GenerationConfig
from qtts.runtime.synthesis.prompt import Prompt, build_prompt, resolve_voice
from tests.chunks import assert_chunks_equal
from tests.fixtures.device import TEST_DEVICE, device_precision, on_test_device

TEXTS = ["Hello world, this is a tiny test.", "Short.", "A longer sentence, with a few more words than the others."]
REF_TEXT = "The quick brown fox jumps."
GREEDY = dict(do_sample=False, subtalker_dosample=False)


def _clip(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 24000
    return (0.3 * np.sin(2 * np.pi * (140 + 60 * t) * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2, device=on_test_device("auto"),
                      precision=device_precision())


@pytest.fixture(scope="module")
def vd(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_voice_design-f32.gguf", n_threads=2, device=on_test_device("auto"),
                      precision=device_precision())


@pytest.fixture(scope="module")
def base(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=2, voice_cache=False,
                      device=on_test_device("auto"), precision=device_precision())


@pytest.fixture(scope="module")
def base_portable(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=2, voice_cache=False, ops="portable",
                      device=on_test_device("auto"), precision=device_precision())


@pytest.fixture(scope="module")
def cv_portable(gguf_dir: Path) -> qtts.Model:
    return qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2, ops="portable",
                      device=on_test_device("auto"), precision=device_precision())


@pytest.fixture(scope="module")
def voices(base: qtts.Model) -> dict[str, qtts.Voice]:
    return {"icl": base.create_voice((_clip(24000, 1), 24000), REF_TEXT),
            "xvec": base.create_voice((_clip(30000, 2), 24000), x_vector_only_mode=True)}


Case = tuple[Prompt, GenerationConfig]


def _case(m: qtts.Model, s: SessionHandle, text: str, seed: int, frames: int, sample: bool, *,
          non_streaming_mode: bool, **voice: object) -> Case:
    cond = resolve_voice(m.context, language="english", **{"speaker": None, "instruct": None, **voice})
    given = dict(max_new_tokens=frames + 1, **({} if sample else GREEDY))
    config = GenerationConfig.resolve(m.generation_defaults, given, seed, frame_budget=None)
    return build_prompt(m.context, s, text, cond, non_streaming_mode=non_streaming_mode), config


def _run_batched(s: SessionHandle, m: qtts.Model, cases: list[Case], joins: list[int]) -> list[np.ndarray]:
    """Each case joins the batch at its frame step `joins[i]`; all codes once every one ended."""
    batch = m.engine.batch(len(cases))
    owner: dict[int, int] = {}
    codes: list[list[np.ndarray]] = [[] for _ in cases]
    ended = 0
    step = 0
    while ended < len(cases):
        for i, (p, cfg) in enumerate(cases):
            if joins[i] == step:
                owner[s.batch_add(batch, p.embeddings, p.trailing, cfg)] = i
        for slot, c, reason, _ in s.batch_step(batch, 1):
            codes[owner[slot]].append(c)
            ended += reason is not None
        step += 1
    return [np.concatenate(c) for c in codes]


def _cases(m: qtts.Model, s: SessionHandle, voices: dict[str, qtts.Voice], sample: bool) -> list[Case]:
    if m.variant == "custom_voice":
        return [_case(m, s, TEXTS[0], 1, 18, sample, non_streaming_mode=True, speaker="ryan"),
                _case(m, s, TEXTS[1], 2, 9, sample, non_streaming_mode=False, speaker="vivian"),
                _case(m, s, TEXTS[2], 3, 25, sample, non_streaming_mode=True, speaker="ryan")]
    if m.variant == "voice_design":
        return [_case(m, s, TEXTS[0], 4, 14, sample, non_streaming_mode=True, instruct="A calm voice."),
                _case(m, s, TEXTS[2], 5, 21, sample, non_streaming_mode=False, instruct="Fast and loud.")]
    return [_case(m, s, TEXTS[0], 6, 16, sample, non_streaming_mode=False, voice=voices["icl"]),
            _case(m, s, TEXTS[1], 7, 11, sample, non_streaming_mode=False, voice=voices["xvec"]),
            _case(m, s, TEXTS[2], 8, 23, sample, non_streaming_mode=True, voice=voices["icl"]),
            _case(m, s, TEXTS[2], 9, 7, sample, non_streaming_mode=True, voice=voices["xvec"])]


@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("which", ["cv", "vd", "base", "base_portable"])
def test_batched_codes_equal_alone(request: pytest.FixtureRequest, voices: dict[str, qtts.Voice], which: str,
                                   sample: bool) -> None:
    m: qtts.Model = request.getfixturevalue(which)
    with m.engine.session() as s:
        cases = _cases(m, s, voices, sample)
        alone = [s.generate(p.embeddings, p.trailing, cfg)[0] for p, cfg in cases]
        joins = [0, 2, 5, 1][:len(cases)]
        batched = _run_batched(s, m, cases, joins)
    for i, (a, b) in enumerate(zip(alone, batched, strict=True)):
        assert len(a) > 0
        np.testing.assert_array_equal(b, a, err_msg=f"case {i}")


def _many(m: qtts.Model, s: SessionHandle, voices: dict[str, qtts.Voice], n: int) -> list[Case]:
    """n cases of different texts, lengths (2..12 frames), seeds, streaming modes, greedy or seeded
    sampling, and voices: ICL and x-vector on a Base model, speakers or instructions otherwise."""
    cases = []
    for i in range(n):
        if m.variant == "custom_voice":
            voice: dict[str, object] = {"speaker": ("ryan", "vivian")[i % 2]}
        elif m.variant == "voice_design":
            voice = {"instruct": ("A calm voice.", "Fast and loud.")[i % 2]}
        else:
            voice = {"voice": voices[("icl", "xvec")[i % 2]]}
        # case 3's prompt is past one attention window (kKvBucket, 256 positions): it joins at
        # step 4, growing every lane while the others run, whose windows are then wider than alone
        text = " ".join([TEXTS[2]] * 25) if i == 3 else TEXTS[i % 3]
        cases.append(_case(m, s, text, 100 + i, 2 + (i * 7) % 11, i % 4 == 3, non_streaming_mode=i % 3 == 0,
                           **voice))
    return cases


@pytest.mark.parametrize("which", ["cv", "vd", "base", "base_portable"])
def test_64_slots_equal_alone(request: pytest.FixtureRequest, voices: dict[str, qtts.Voice], which: str) -> None:
    """64 requests at once, joining over the first 5 steps (later ones into slots freed by earlier
    ones): each one's codes are those it gets alone."""
    m: qtts.Model = request.getfixturevalue(which)
    with m.engine.session() as s:
        cases = _many(m, s, voices, 64)
        alone = [s.generate(p.embeddings, p.trailing, cfg)[0] for p, cfg in cases]
        batched = _run_batched(s, m, cases, [(i * 3) % 5 for i in range(64)])
    for i, (a, b) in enumerate(zip(alone, batched, strict=True)):
        assert len(a) > 0
        np.testing.assert_array_equal(b, a, err_msg=f"case {i}")


@pytest.mark.parametrize("which", ["cv", "cv_portable"])
def test_talker_step_nodes_do_not_grow_with_the_batch(request: pytest.FixtureRequest, which: str) -> None:
    """One batched talker step is the same graph, node for node, at 1, 8 and 64 slots (the
    fused attention on the CPU's native path, the masked window on the portable one). On the
    test device, in exact, products under 17 columns are padded (docs/gpu.md, "Precision"): the
    graph is the same at 4 and 8 slots and at 17 and 64."""
    m: qtts.Model = request.getfixturevalue(which)
    widths = [(4, 8), (17, 64)] if TEST_DEVICE else [(1, 8, 64)]
    nodes = {}
    with m.engine.session() as s:
        p, cfg = _case(m, s, TEXTS[0], 1, 6, False, non_streaming_mode=True, speaker="ryan")
        for n in sorted({n for group in widths for n in group}):
            batch = m.engine.batch(n)
            assert batch.talker_step_nodes == 0
            for _ in range(n):
                s.batch_add(batch, p.embeddings, p.trailing, cfg)
            s.batch_step(batch, 2)  # the first frame samples the prefill's logits, the second steps
            nodes[n] = batch.talker_step_nodes
            assert batch.cache_bytes > 0
    for group in widths:
        assert nodes[group[0]] > 0 and all(nodes[n] == nodes[group[0]] for n in group), nodes


def test_batch_cache_too_large_names_the_bytes(cv: qtts.Model) -> None:
    batch = cv.engine.batch(2)
    with cv.engine.session() as s:
        p, cfg = _case(cv, s, TEXTS[1], 1, 5, False, non_streaming_mode=True, speaker="ryan")
        params = native_params(cfg)
        params.max_new_tokens = 2**31 - 1  # more positions than any cache holds
        with pytest.raises(ValueError, match=r"needs \d+ bytes"):
            batch._native.add(p.embeddings, p.trailing, params)
        assert s.batch_active(batch) == []
        slot = s.batch_add(batch, p.embeddings, p.trailing, cfg)  # the batch is still usable
        assert s.batch_step(batch, 10)[0][0] == slot


def test_batch_bad_input(cv: qtts.Model) -> None:
    for bad in (0, 100_000):
        with pytest.raises(ValueError, match="max_batch"):
            cv.engine.batch(bad)
    batch = cv.engine.batch(1)
    with cv.engine.session() as s:
        p, cfg = _case(cv, s, TEXTS[1], 1, 5, False, non_streaming_mode=True, speaker="ryan")
        with pytest.raises(ValueError, match="n_frames"):
            s.batch_step(batch, 0)
        assert s.batch_step(batch, 3) == []  # nothing to step
        slot = s.batch_add(batch, p.embeddings, p.trailing, cfg)
        with pytest.raises(ValueError, match="slots are in use"):
            s.batch_add(batch, p.embeddings, p.trailing, cfg)
        with pytest.raises(ValueError, match="out of range"):
            s.batch_remove(batch, 1)
        with pytest.raises(ValueError, match="prompt"):
            s.batch_add(batch, p.embeddings[:, :3], p.trailing, cfg)
        s.batch_remove(batch, slot)
        with pytest.raises(ValueError, match="holds no generation"):
            s.batch_remove(batch, slot)
        with pytest.raises(ValueError, match="not started"):
            s.decode_stream_push(np.zeros((1, 16), dtype=np.int32), stream=12345)


def test_decode_streams_are_independent(cv: qtts.Model) -> None:
    a = cv.generate_codes(TEXTS[0], speaker="ryan", seed=1, max_new_tokens=12).codes
    b = cv.generate_codes(TEXTS[2], speaker="vivian", seed=2, max_new_tokens=9).codes
    with cv.engine.session() as s:
        want_a, want_b = s.decode(a), s.decode(b)
        ids = cv.engine.new_stream_id(), cv.engine.new_stream_id()
        for i in ids:
            s.decode_stream_reset(stream=i)
        got: dict[int, list[np.ndarray]] = {i: [] for i in ids}
        for k in range(0, 12, 3):  # interleaved pushes
            got[ids[0]].append(s.decode_stream_push(a[k:k + 3], stream=ids[0]))
            got[ids[1]].append(s.decode_stream_push(b[k:k + 3], stream=ids[1]))
        for i in ids:
            s.decode_stream_close(i)
    np.testing.assert_allclose(np.concatenate(got[ids[0]]), want_a, atol=1e-5)
    np.testing.assert_allclose(np.concatenate(got[ids[1]]), want_b, atol=1e-5)


@pytest.mark.parametrize("ops", ["native", "portable"])
def test_synthesize_batch_equals_synthesize(cv: qtts.Model, cv_portable: qtts.Model, ops: str) -> None:
    """Each piece decoded whole and alone, as synthesize decodes it, on both ops paths."""
    cv = cv if ops == "native" else cv_portable
    long = "First sentence of a few. Second one, a little longer than that."
    texts = [TEXTS[0], TEXTS[1], long]
    kw = dict(speaker=["ryan", "vivian", "ryan"], seed=[1, 2, 3], split_sentences=[False, False, 30],
              max_new_tokens=25)
    got = cv.synthesize_batch(texts, max_batch=2, **kw)
    for i, (text, audio) in enumerate(zip(texts, got, strict=True)):
        want = cv.synthesize(text, speaker=kw["speaker"][i], seed=kw["seed"][i],
                             split_sentences=kw["split_sentences"][i], max_new_tokens=25)
        np.testing.assert_array_equal(audio.codes, want.codes)
        np.testing.assert_array_equal(audio.samples, want.samples)
        assert audio.stop_reason == want.stop_reason and audio.timings.frames == want.timings.frames
    assert cv.synthesize_batch([]) == []
    with pytest.raises(TypeError, match="speaker"):
        cv.synthesize_batch(texts, speaker=["ryan"])  # a list of another length is shared: not a str
    with pytest.raises(ValueError, match="max_batch"):
        cv.synthesize_batch(texts, max_batch=0)


@pytest.mark.parametrize("ops", ["native", "portable"])
def test_icl_voice_batch_equals_synthesize(base: qtts.Model, base_portable: qtts.Model,
                                           voices: dict[str, qtts.Voice], ops: str) -> None:
    base = base if ops == "native" else base_portable
    vs = [voices["icl"], voices["xvec"]]
    got = base.synthesize_batch(TEXTS[:2], voice=vs, seed=4, max_new_tokens=15)
    for text, v, audio in zip(TEXTS[:2], vs, got, strict=True):
        np.testing.assert_array_equal(audio.samples, base.synthesize(text, voice=v, seed=4, max_new_tokens=15).samples)


@pytest.mark.usefixtures("clock_stands_still")
def test_scheduler_chunks_equal_model_stream(base: qtts.Model, voices: dict[str, qtts.Voice]) -> None:
    reqs = [dict(text=TEXTS[0], voice=voices["icl"], seed=1, max_new_tokens=20),
            dict(text=TEXTS[2] + " " + TEXTS[0], voice=voices["xvec"], seed=2, max_new_tokens=9, split_sentences=40),
            dict(text=TEXTS[1], voice=voices["icl"], seed=3, max_new_tokens=14, do_sample=False)]
    with Scheduler(base, max_batch=2, max_queue=4, first_chunk_frames=2, max_chunk_frames=4) as sched:
        jobs = [sched.submit(**r) for r in reqs]
        got = [list(j) for j in jobs]
        assert sched.stats.requests_total == 3 and sched.stats.frames_total == sum(
            len(c.codes) for g in got for c in g)
    for r, job, chunks in zip(reqs, jobs, got, strict=True):
        want = list(base.stream(**r, first_chunk_frames=2, max_chunk_frames=4))
        assert_chunks_equal(chunks, want)
        assert job.done and job.timings.time_to_first_audio_ms is not None
        audio = job.result(timeout=0)
        np.testing.assert_array_equal(audio.samples, np.concatenate([c.samples for c in want]))


def test_cancel_stops_within_a_frame_and_frees_the_slot(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    # the worker waits after the first chunk until the consumer has cancelled: left to run, it
    # would make as many frames meanwhile as the machine's load lets it
    cancelled = threading.Event()
    put = Job._put

    def held(self: Job, item: object) -> None:
        put(self, item)
        if isinstance(item, qtts.AudioChunk) and not cancelled.is_set():
            cancelled.wait(120)

    monkeypatch.setattr(Job, "_put", held)
    with Scheduler(cv, max_batch=1, max_queue=1) as sched:
        job = sched.submit(TEXTS[0], speaker="ryan", max_new_tokens=10_000, frame_budget=None, seed=1)
        waiting = sched.submit(TEXTS[1], speaker="ryan", seed=2, max_new_tokens=5)
        with pytest.raises(QueueFull):
            sched.submit(TEXTS[1], speaker="ryan")
        it = iter(job)
        first = next(it)
        job.cancel()
        cancelled.set()
        rest = list(it)
        assert rest[-1].stop_reason == "cancelled" and job.stop_reason == "cancelled"
        assert len(first.codes) == 1 and sum(len(c.codes) for c in rest) <= 1  # within a frame
        assert list(waiting)[-1].stop_reason == "max_new_tokens"  # the slot was freed for it
        queued = sched.submit(TEXTS[1], speaker="ryan", seed=3, max_new_tokens=5)
        queued.cancel()
        assert queued.result(timeout=30).stop_reason in ("cancelled", "max_new_tokens")
        assert sched.stats.cancelled_total >= 1 and sched.stats.running == 0
    with pytest.raises(SchedulerClosed):
        sched.submit(TEXTS[1], speaker="ryan")


def test_cancel_takes_no_more_engine_work(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel that lands while a batch step runs (as a shutdown's does) ends the jobs without
    another step, and without vocoding their frames that nobody will hear: on busy cores each
    costs seconds past --shutdown-timeout."""
    calls: list[str] = []
    step, push = SessionHandle.batch_step, SessionHandle.decode_streams_push

    def batch_step(self: SessionHandle, batch: object, n: int) -> object:
        calls.append("step")
        out = step(self, batch, n)
        if calls.count("step") == 6:  # mid-stream, while the step is in flight
            sched.close(cancel=True, timeout=0)
            calls.append("cancelled")
        return out

    def decode_streams_push(self: SessionHandle, items: list) -> object:
        calls.append("push")
        return push(self, items)

    monkeypatch.setattr(SessionHandle, "batch_step", batch_step)
    monkeypatch.setattr(SessionHandle, "decode_streams_push", decode_streams_push)
    sched = Scheduler(cv, max_batch=2)
    jobs = [sched.submit(TEXTS[0], speaker="ryan", seed=i, max_new_tokens=10_000, frame_budget=None)
            for i in range(2)]
    chunks = [list(job) for job in jobs]
    sched.close(timeout=60)
    assert calls[calls.index("cancelled") + 1:] == []  # no step, no push after the cancel
    for job, got in zip(jobs, chunks, strict=True):
        assert job.stop_reason == "cancelled" and got[-1].stop_reason == "cancelled" and not len(got[-1].samples)
        audio = job.result(timeout=0)
        assert len(audio.samples) == len(audio.codes) * 1920  # the codes kept are those whose audio was sent


@pytest.mark.usefixtures("clock_stands_still")
def test_async_iteration_and_close_cancel(cv: qtts.Model) -> None:
    kw = dict(speaker="ryan", seed=5, max_new_tokens=12)
    want = list(cv.stream(TEXTS[0], **kw))

    async def consume(sched: Scheduler) -> list[qtts.AudioChunk]:
        return [c async for c in sched.submit(TEXTS[0], **kw)]

    with Scheduler(cv, max_batch=2) as sched:
        got = asyncio.run(consume(sched))
    assert_chunks_equal(got, want)
    sched = Scheduler(cv, max_batch=1)
    jobs = [sched.submit(TEXTS[0], speaker="ryan", max_new_tokens=10_000, frame_budget=None) for _ in range(3)]
    sched.close(cancel=True, timeout=60)
    assert all(j.done and j.stop_reason == "cancelled" for j in jobs)


def test_errors_reach_the_consumer(cv: qtts.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    with Scheduler(cv, max_batch=2) as sched:
        with pytest.raises(TypeError, match="temperature"):
            sched.submit(TEXTS[0], speaker="ryan", temperature="hot")
        with pytest.raises(ValueError, match="speaker"):
            sched.submit(TEXTS[0], speaker="nobody")

        def fail(*args: object) -> None:
            raise QttsError("graph compute failed")

        monkeypatch.setattr(SessionHandle, "batch_step", fail)
        job = sched.submit(TEXTS[0], speaker="ryan", max_new_tokens=5)
        with pytest.raises(QttsError, match="graph compute"):
            list(job)
        with pytest.raises(QttsError):
            job.result(timeout=10)
        monkeypatch.undo()
        # the scheduler goes on, and eager calls from another thread work meanwhile
        job = sched.submit(TEXTS[0], speaker="ryan", max_new_tokens=30, seed=11)
        other: list[qtts.Audio] = []
        t = threading.Thread(target=lambda: other.append(cv.synthesize(TEXTS[1], speaker="ryan", max_new_tokens=4)))
        t.start()
        assert job.result(timeout=60).stop_reason == "max_new_tokens"
        t.join(60)
        assert other[0].codes.shape == (3, 16)


def test_server_limits_follow_the_device(cv: qtts.Model) -> None:
    assert default_limits(cv) == ((8, 32) if cv.device == "CPU" else (64, 256))

    class OnGpu:
        device = "CUDA0"

    assert default_limits(OnGpu()) == (64, 256)  # type: ignore[arg-type]
