"""Loading converted models: metadata, devices, threads, the text projection vs the reference, and
closing a model (its native objects freed, work refused, ggml's log lines)."""
from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.threads import available_cpus, physical_cores, resolve_threads
from tests.fixtures.build import MODEL_NAMES

TEXTS = ["Hello world, this is a tiny test.", "我叫通义千问。", "Speak slowly in a warm, calm voice."]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_text_projection_matches_reference(name: str, gguf_dir: Path, reference_models) -> None:
    import torch

    ref = reference_models(name)
    talker = ref.model.talker
    m = qtts.load(gguf_dir / f"{name}-f32.gguf", n_threads=1)
    for text in TEXTS:
        ids = m.tokenizer.assistant_ids(text)
        with torch.no_grad():
            want = talker.text_projection(talker.get_text_embeddings()(torch.tensor([ids])))[0].numpy()
        got = m.text_embedding(ids)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-5
    for out_type in ("bf16", "q8_0"):
        mq = qtts.load(gguf_dir / f"{name}-{out_type}.gguf", n_threads=1)
        ids = m.tokenizer.assistant_ids(TEXTS[0])
        a, b = m.text_embedding(ids).ravel(), mq.text_embedding(ids).ravel()
        assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) > 0.999


def test_model_properties(gguf_dir: Path) -> None:
    m = qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf")
    assert m.variant == "custom_voice" and m.size == "1b7"
    assert m.speakers == ["dylan", "ryan", "vivian"]
    assert "auto" in m.languages and "english" in m.languages
    assert not any("dialect" in lang for lang in m.languages)
    assert m.device == "CPU"
    # "<device>/<path>": on the CPU "auto" picks the native audio networks
    assert m.ops == "native"
    assert m.devices == {"talker": "CPU/native", "code_predictor": "CPU/native", "codec_decoder": "CPU/native",
                         "codec_encoder": "CPU/native"}
    assert m.generation_defaults["top_k"] == 50
    assert m.hparams["code_predictor"]["has_projection"] is True
    base = qtts.load(gguf_dir / "tiny_base-f32.gguf")
    assert base.devices["speaker_encoder"] == "CPU/native" and base.speakers == []
    portable = qtts.load(gguf_dir / "tiny_base-f32.gguf", ops="portable")
    assert portable.ops == "portable" and set(portable.devices.values()) == {"CPU/portable"}
    # the portable conv copies are extra weight memory, the size of the panels they come from
    assert portable.engine.weight_bytes - base.engine.weight_bytes == portable.engine.portable_weight_bytes > 0
    assert base.hparams["code_predictor"]["has_projection"] is False


def test_thread_defaults() -> None:
    assert 1 <= physical_cores() <= len(available_cpus())
    assert resolve_threads(None) == physical_cores()
    assert resolve_threads(10**4) == len(available_cpus())
    with pytest.raises(ValueError, match="n_threads"):
        resolve_threads(0)


def test_unknown_device(gguf_dir: Path) -> None:
    with pytest.raises(ValueError, match="unknown device 'nope'; available: auto, cpu"):
        qtts.load(gguf_dir / "tiny_voice_design-f32.gguf", device="nope")


def test_closed_model_refuses_work(gguf_dir: Path) -> None:
    with qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1) as m:
        assert not m.closed
        assert len(m.synthesize("Hi.", speaker="ryan", max_new_tokens=3).samples)
    assert m.closed and "closed" in repr(m)
    m.close()  # idempotent
    calls = [lambda: m.synthesize("Hi.", speaker="ryan"),
             lambda: m.stream("Hi.", speaker="ryan"),  # at the call, not at the first chunk
             lambda: m.stream_text(iter(["Hi."]), speaker="ryan"),
             lambda: m.generate_codes("Hi.", speaker="ryan"),
             lambda: m.decode(np.zeros((1, m.num_code_groups), dtype=np.int32)),
             lambda: m.synthesize_batch(["Hi."], speaker="ryan")]
    for call in calls:
        with pytest.raises(RuntimeError, match=r"closed \(close\(\) was called\)"):
            call()
    # what was read at load stays readable
    assert m.variant == "custom_voice" and m.speakers == ["dylan", "ryan", "vivian"] and m.sample_rate == 24000


def test_closed_base_model_refuses_cloning(gguf_dir: Path) -> None:
    m = qtts.load(gguf_dir / "tiny_base-f32.gguf", n_threads=1)
    clip = (np.random.default_rng(0).standard_normal(24000) * 0.1).astype(np.float32)
    m.close()
    for call in (lambda: m.create_voice(clip, x_vector_only_mode=True),
                 lambda: m.synthesize("Hi.", ref_audio=clip, x_vector_only_mode=True),
                 lambda: m.speaker_embedding(clip), lambda: m.encode(clip)):
        with pytest.raises(RuntimeError, match=r"close\(\)"):
            call()


def test_close_frees_the_native_objects(gguf_dir: Path) -> None:
    # the weights, both sessions (with their thread pools) and a batch go at close(), not at collection
    m = qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2, vocoder_threads=1)
    assert len(m.synthesize("Hi.", speaker="ryan", max_new_tokens=9).samples)
    batch = m.engine.batch(2)
    e = m.engine
    natives = [weakref.ref(x) for x in (e._native_model, e._session, e._vocoder, batch._native)]
    assert all(r() is not None for r in natives)
    m.close()
    assert [r() for r in natives] == [None] * 4


def test_close_waits_for_a_stream_another_thread_runs(gguf_dir: Path, lock_waiters: Callable[[int], None]) -> None:
    m = qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)
    it = m.stream("Hello there.", speaker="ryan", max_new_tokens=12, min_new_tokens=11, seed=1)
    first = next(it)
    rest: list[qtts.AudioChunk] = []
    closer = threading.Thread(target=m.close, name="closer")
    closer.start()
    lock_waiters(1)
    assert closer.is_alive() and not m.closed  # the stream holds the model
    rest.extend(it)  # this thread finishes the stream; close() goes on
    closer.join(60)
    assert m.closed and rest[-1].stop_reason == "max_new_tokens" and first.index == 0


def test_close_refuses_an_unfinished_stream_in_its_own_thread(gguf_dir: Path) -> None:
    m = qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)
    it = m.stream("Hello there.", speaker="ryan", max_new_tokens=12, seed=1)
    next(it)
    with pytest.raises(RuntimeError, match="cannot close this qtts.Model now: .*unfinished stream"):
        m.close()
    it.close()
    m.close()
    assert m.closed


def test_close_refuses_a_running_scheduler(gguf_dir: Path) -> None:
    m = qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)
    sched = qtts.Scheduler(m, max_batch=2)
    job = sched.submit("Hello there.", speaker="ryan", max_new_tokens=4000, min_new_tokens=3999, frame_budget=None)
    next(iter(job))  # in its slot
    with pytest.raises(RuntimeError, match=r"Scheduler runs requests.*Scheduler\.close"):
        m.close()
    sched.close(cancel=True)
    assert job.result(60).stop_reason == "cancelled"
    m.close()
    with pytest.raises(RuntimeError, match="closed"):
        sched.submit("Hi.", speaker="ryan")


def test_ggml_log_lines_reach_logging(gguf_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    m = qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)
    embd = np.zeros((1, m.hidden_size), dtype=np.float32)
    caplog.set_level(logging.INFO, logger="qtts")
    with pytest.raises(qtts.QttsError) as info, m.engine.session() as s:
        s.talker_prefill(embd, n_ctx=2**31 - 1)  # a KV cache no machine can allocate
    logged = [r.getMessage() for r in caplog.records if r.name == "qtts" and r.levelno == logging.ERROR]
    assert info.value.ggml_log, "the exception still carries ggml's lines"
    assert logged and all(any(line in msg for msg in logged) for line in info.value.ggml_log)
    m.close()


def test_ggml_debug_lines_follow_the_logger_level(gguf_dir: Path, caplog: pytest.LogCaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """ggml's debug lines (here GGML_SCHED_DEBUG's split of each graph, which ggml prints in
    pieces) reach logging only while the "qtts" logger is enabled for DEBUG, one record a line."""
    monkeypatch.setenv("GGML_SCHED_DEBUG", "1")  # read by each scheduler as it is made

    def split_lines(level: int) -> list[str]:
        caplog.clear()
        caplog.set_level(level, logger="qtts")
        m = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1, device="cpu", voice_cache=False)
        m.generate_codes("Hi.", speaker="ryan", max_new_tokens=2, do_sample=False, subtalker_dosample=False)
        m.close()
        return [r.getMessage() for r in caplog.records if r.name == "qtts" and "SPLIT" in r.getMessage()]

    lines = split_lines(logging.DEBUG)
    assert lines and all(line == "ggml: ## SPLIT #0: CPU # 0 inputs" for line in lines), lines[:3]
    assert all(r.levelno == logging.DEBUG for r in caplog.records if "SPLIT" in r.getMessage())
    assert split_lines(logging.INFO) == []
