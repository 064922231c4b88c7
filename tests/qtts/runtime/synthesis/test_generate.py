"""Code generation vs the reference (float32): prompt embeddings, talker prefill, greedy codes
end to end; seeded sampling; argument validation."""
from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import numpy as np
import pytest

import qtts
from qtts.runtime.settings.config import MAX_NEW_TOKENS, frame_budget_of
from qtts.runtime.synthesis.prompt import build_prompt, resolve_voice

TEXT = "Hello world, this is a tiny test."
GREEDY = dict(do_sample=False, subtalker_dosample=False)

# (model, request): a named language, auto, a dialect speaker with auto (dylan -> beijing
# dialect id), an instruct (the tiny CustomVoice is "1b7"), VoiceDesign with auto and a language.
CASES = [
    ("tiny_custom_voice", dict(speaker="ryan", language="english")),
    ("tiny_custom_voice", dict(speaker="vivian", language="auto")),
    ("tiny_custom_voice", dict(speaker="dylan", language="auto")),
    ("tiny_custom_voice", dict(speaker="ryan", language="chinese", instruct="Speak happily.")),
    ("tiny_voice_design", dict(instruct="A warm, calm voice.", language="auto")),
    ("tiny_voice_design", dict(instruct="Deep voice", language="english")),
]


@pytest.fixture(scope="module")
def models(gguf_dir: Path):
    cache: dict[str, qtts.Model] = {}

    def get(name: str) -> qtts.Model:
        if name not in cache:
            cache[name] = qtts.load(gguf_dir / f"{name}-f32.gguf", n_threads=2)
        return cache[name]

    return get


@contextlib.contextmanager
def captured(ref):
    """Record the prompt the reference hands its talker and the codes it hands the codec."""
    import torch

    got: dict[str, np.ndarray] = {}
    talker, codec = ref.model.talker, ref.model.speech_tokenizer
    generate, decode = talker.generate, codec.decode

    def talker_generate(*args, **kwargs):
        got["prompt"] = kwargs["inputs_embeds"][0].numpy().copy()
        got["trailing"] = kwargs["trailing_text_hidden"][0].numpy().copy()
        return generate(*args, **kwargs)

    def codec_decode(items):
        got["codes"] = items[0]["audio_codes"].numpy().copy()
        return decode(items)

    talker.generate, codec.decode = talker_generate, codec_decode
    try:
        with torch.no_grad():
            yield got
    finally:
        del talker.generate, codec.decode


def reference_run(ref, name: str, request: dict, **kwargs) -> dict[str, np.ndarray]:
    with captured(ref) as got:
        if name == "tiny_custom_voice":
            ref.generate_custom_voice(text=TEXT, **request, **kwargs)
        else:
            ref.generate_voice_design(text=TEXT, **request, **kwargs)
    return got


def prompt_of(m: qtts.Model, request: dict, non_streaming_mode: bool):
    voice = resolve_voice(m.context, language=request.get("language", "auto"), speaker=request.get("speaker"),
                          instruct=request.get("instruct"))
    with m.engine.session() as s:
        return build_prompt(m.context, s, TEXT, voice, non_streaming_mode=non_streaming_mode)


@pytest.mark.parametrize("non_streaming_mode", [True, False])
@pytest.mark.parametrize(("name", "request_"), CASES)
def test_prompt_and_greedy_codes_match_reference(name, request_, non_streaming_mode, models, reference_models):
    m = models(name)
    want = reference_run(reference_models(name), name, request_, non_streaming_mode=non_streaming_mode,
                         max_new_tokens=21, **GREEDY)
    p = prompt_of(m, request_, non_streaming_mode)
    assert p.embeddings.shape == want["prompt"].shape and p.trailing.shape == want["trailing"].shape
    assert np.abs(p.embeddings - want["prompt"]).max() <= 1e-5
    assert np.abs(p.trailing - want["trailing"]).max() <= 1e-5

    got = m.generate_codes(TEXT, **request_, non_streaming_mode=non_streaming_mode, max_new_tokens=21, **GREEDY)
    assert got.codes.dtype == np.int32 and got.codes.shape == (20, 16)
    assert got.stop_reason == "max_new_tokens"  # the tiny model emits no EOS this early
    np.testing.assert_array_equal(got.codes, want["codes"])
    assert got.timings["frames"] == 20 and got.timings["prefill_ms"] > 0


@pytest.mark.parametrize(("penalty", "max_new_tokens"), [(1.05, 60), (1.5, 21)])
def test_repetition_penalty_matches_reference(penalty, max_new_tokens, models, reference_models):
    name, request = CASES[0]
    m = models(name)
    kwargs = dict(max_new_tokens=max_new_tokens, **GREEDY)
    got = m.generate_codes(TEXT, **request, repetition_penalty=penalty, **kwargs)
    unpenalised = m.generate_codes(TEXT, **request, repetition_penalty=1.0, **kwargs)
    assert (got.codes[:, 0] != unpenalised.codes[:, 0]).any(), "the penalty should change this run"
    want = reference_run(reference_models(name), name, request, repetition_penalty=penalty, **kwargs)
    np.testing.assert_array_equal(got.codes, want["codes"])


def test_prefill_logits_match_reference(models, reference_models):
    import torch

    name, request = CASES[2]
    m = models(name)
    p = prompt_of(m, request, True)
    x = torch.from_numpy(p.embeddings)[None]
    with torch.no_grad():
        out = reference_models(name).model.talker(inputs_embeds=x, use_cache=False,
                                                  attention_mask=torch.ones(1, x.shape[1], dtype=torch.long))
    want_logits, want_hidden = out.logits[0, -1].numpy(), out.past_hidden[0, -1].numpy()
    with m.engine.session() as s:
        logits, hidden = s.talker_prefill(p.embeddings)

    def cos(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    assert cos(logits, want_logits) >= 0.99999 and np.abs(logits - want_logits).max() <= 1e-4
    assert cos(hidden, want_hidden) >= 0.99999 and np.abs(hidden - want_hidden).max() <= 1e-4


def test_seeded_sampling(models):
    m = models("tiny_voice_design")
    kwargs = dict(instruct="Bright voice", max_new_tokens=16)
    a = m.generate_codes(TEXT, seed=7, **kwargs)
    b = m.generate_codes(TEXT, seed=7, **kwargs)
    c = m.generate_codes(TEXT, seed=8, **kwargs)
    np.testing.assert_array_equal(a.codes, b.codes)
    assert a.seed == 7 and a.codes.shape == c.codes.shape
    assert not np.array_equal(a.codes, c.codes)
    # With a greedy talker the seed only reaches cb0 through the predictor's codes fed back,
    # so the first frame's cb0 (from the prefill alone) cannot depend on it.
    d = m.generate_codes(TEXT, seed=7, do_sample=False, **kwargs)
    e = m.generate_codes(TEXT, seed=8, do_sample=False, **kwargs)
    assert d.codes[0, 0] == e.codes[0, 0] and not np.array_equal(d.codes[:, 1:], e.codes[:, 1:])
    assert m.generate_codes(TEXT, **kwargs).seed != m.generate_codes(TEXT, **kwargs).seed


def test_stopping_invariants(models):
    m = models("tiny_custom_voice")
    for seed, n in [(3, 400), (0, 2)]:
        r = m.generate_codes(TEXT, speaker="ryan", seed=seed, top_k=0, temperature=1.0, max_new_tokens=n)
        assert r.codes.shape[1] == 16 and len(r.codes) <= n - 1
        assert r.codes.min(initial=0) >= 0 and r.codes.max(initial=0) < 2048  # EOS is never a frame
        assert (r.stop_reason == "max_new_tokens") == (len(r.codes) == n - 1)
        if n <= 2:  # EOS is masked until 2 tokens exist
            assert r.stop_reason == "max_new_tokens"


def test_validation(models):
    cv, vd = models("tiny_custom_voice"), models("tiny_voice_design")
    with pytest.raises(ValueError, match="unknown speaker 'bob'; available: dylan, ryan, vivian"):
        cv.generate_codes(TEXT, speaker="bob")
    with pytest.raises(ValueError, match="needs a speaker"):
        cv.generate_codes(TEXT)
    with pytest.raises(ValueError, match=r"unsupported language 'klingon'; supported: auto, chinese, english"):
        cv.generate_codes(TEXT, speaker="ryan", language="klingon")
    with pytest.raises(ValueError, match="unsupported language"):
        cv.generate_codes(TEXT, speaker="dylan", language="beijing_dialect")
    with pytest.raises(ValueError, match="only for custom_voice"):
        vd.generate_codes(TEXT, speaker="ryan", instruct="x")
    for text in ("", "   \n"):
        with pytest.raises(ValueError, match="empty"):
            vd.generate_codes(text, instruct="x")
    with pytest.raises(ValueError, match="max_new_tokens"):
        vd.generate_codes(TEXT, instruct="x", max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        vd.generate_codes(TEXT, instruct="x", top_p=0.0)
    # max_new_tokens=1 always gave empty audio (at most max_new_tokens - 1 frames): refused
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[2, "):
        cv.generate_codes(TEXT, speaker="ryan", max_new_tokens=1)
    # Case-insensitive names, as the reference.
    codes = cv.generate_codes(TEXT, speaker="Ryan", language="English", max_new_tokens=3, **GREEDY).codes
    assert codes.shape == (2, 16)


def test_instruct_ignored_by_small_custom_voice(models, monkeypatch):
    m = models("tiny_custom_voice")
    monkeypatch.setattr(m, "context", dataclasses.replace(m.context, size="0b6"))  # what the checks read
    with pytest.raises(ValueError, match="ignores instruct"):
        m.generate_codes(TEXT, speaker="ryan", instruct="Speak happily.")
    assert m.generate_codes(TEXT, speaker="ryan", max_new_tokens=3).codes.shape == (2, 16)


def test_base_model_needs_a_voice(gguf_dir: Path):
    m = qtts.load(gguf_dir / "tiny_base-f32.gguf", n_threads=1)
    with pytest.raises(ValueError, match="clones a voice"):
        m.generate_codes(TEXT)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("ops", ["native", "portable"])
def test_decode_step_logits_match_reference(ops, models, reference_models):
    """One KV-cached talker step on the summed frame input (docs/model.md, "Generation loop")
    against the reference run over the whole sequence without a cache, with the fused cached
    attention (native) and with ggml's (portable; docs/kernels.md, "Cached attention")."""
    import torch

    name, request = CASES[0]
    m = models(name)
    if ops == "portable":
        m = qtts.Model(m.path, n_threads=2, voice_cache=False, ops="portable")
    assert m.devices["talker"] == m.devices["code_predictor"] == f"CPU/{ops}"
    p = prompt_of(m, request, False)
    codes = m.generate_codes(TEXT, **request, non_streaming_mode=False, max_new_tokens=3, **GREEDY).codes[0]
    talker = reference_models(name).model.talker
    with torch.no_grad():
        c = torch.from_numpy(codes.astype(np.int64))
        x = talker.model.codec_embedding(c[:1])[0] + torch.from_numpy(p.trailing[0])
        for g in range(1, len(codes)):
            x = x + talker.code_predictor.model.codec_embedding[g - 1](c[g:g + 1])[0]
        seq = torch.cat([torch.from_numpy(p.embeddings), x[None]])[None]
        out = talker(inputs_embeds=seq, use_cache=False, attention_mask=torch.ones(1, seq.shape[1], dtype=torch.long))
    want_logits, want_hidden = out.logits[0, -1].numpy(), out.past_hidden[0, -1].numpy()
    L = p.embeddings.shape[0]
    with m.engine.session() as s:
        s.talker_prefill(p.embeddings, n_ctx=L + 1)
        logits, hidden = s.talker_step(codes.tolist(), p.trailing[:1], L)
        assert _cos(logits, want_logits) >= 0.99999 and np.abs(logits - want_logits).max() <= 1e-4
        assert _cos(hidden, want_hidden) >= 0.99999 and np.abs(hidden - want_hidden).max() <= 1e-4
        with pytest.raises(ValueError, match="outside the cache"):
            s.talker_step(codes.tolist(), p.trailing[:1], 10**6)


@pytest.mark.parametrize("out_type", ["bf16", "q8_0"])
def test_quantized_prefill_logits(out_type, gguf_dir: Path, models, capsys):
    name, request = CASES[0]
    p = prompt_of(models(name), request, True)
    with models(name).engine.session() as s:
        ref_logits, _ = s.talker_prefill(p.embeddings)
    q = qtts.load(gguf_dir / f"{name}-{out_type}.gguf", n_threads=2)
    with q.engine.session() as s:
        logits, _ = s.talker_prefill(p.embeddings)
    cos = _cos(logits, ref_logits)
    with capsys.disabled():
        print(f"\n{out_type}: tiny CustomVoice prefill logits cosine vs F32 = {cos:.6f}")
    assert cos > 0.99


def test_quantized_matmul_paths_agree(gguf_dir: Path, models, capsys):
    """The Q8_0 talker through the native quantized matmul (the default) and through ggml's
    mul_mat: different kernels (the logits differ), as close to the F32 model. The path in effect
    when a model loads is the one it keeps for the Q8_0 weights it packs (docs/kernels.md,
    "Packed Q8_0"): only the quantized matmul reads those."""
    name, request = CASES[0]
    p = prompt_of(models(name), request, True)
    with models(name).engine.session() as s:
        ref_logits, _ = s.talker_prefill(p.embeddings)
    from qtts.runtime.engine.engine import set_matmul_path

    logits, packed = {}, {}
    for path in ("ggml", "native"):
        set_matmul_path(path)
        try:
            q = qtts.load(gguf_dir / f"{name}-q8_0.gguf", n_threads=2)
            with q.engine.session() as s:
                logits[path], _ = s.talker_prefill(p.embeddings)
            packed[path] = q
        finally:
            set_matmul_path("native")
    assert packed["ggml"].engine.packed_bytes == 0
    cos = {path: _cos(v, ref_logits) for path, v in logits.items()}
    with capsys.disabled():
        print(f"\nq8_0 prefill logits cosine vs F32: native {cos['native']:.6f}, ggml {cos['ggml']:.6f}")
    assert not np.array_equal(logits["native"], logits["ggml"])
    assert cos["native"] >= cos["ggml"] - 1e-4 and _cos(logits["native"], logits["ggml"]) > 0.999
    if packed["native"].engine.packed_bytes:
        set_matmul_path("ggml")
        try:
            with packed["native"].engine.session() as s:
                again, _ = s.talker_prefill(p.embeddings)
        finally:
            set_matmul_path("native")
        np.testing.assert_array_equal(again, logits["native"])


def test_frame_budget(models):
    name, request = CASES[0]
    m = models(name)
    r = m.generate_codes(TEXT, **request, max_new_tokens=50, frame_budget=7, **GREEDY)
    assert r.stop_reason == "budget" and r.codes.shape == (7, 16)
    full = m.generate_codes(TEXT, **request, max_new_tokens=50, frame_budget=None, **GREEDY)
    assert full.stop_reason == "max_new_tokens" and full.codes.shape == (49, 16)
    np.testing.assert_array_equal(r.codes, full.codes[:7])
    auto = m.generate_codes(TEXT, **request, max_new_tokens=400, **GREEDY)
    # "auto": the text's own budget (tests/qtts/runtime/settings/test_settings.py checks what it allows)
    assert auto.stop_reason == "budget" and auto.codes.shape[0] == frame_budget_of(TEXT, "auto")
    for bad in (0, -3, "big", 2**31):
        with pytest.raises(ValueError, match="frame_budget"):
            m.generate_codes(TEXT, **request, frame_budget=bad)
    for bad in (2.5, True):  # a wrong type, bool included
        with pytest.raises(TypeError, match="frame_budget"):
            m.generate_codes(TEXT, **request, frame_budget=bad)


# EOS is suppressed (min_new_tokens) so that only the interruption can end these generations early
ENDLESS = dict(max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS, frame_budget=None)


@contextlib.contextmanager
def _again_and_again(act: Callable[[], None]) -> Iterator[None]:
    """`act` every 5 ms in a thread of its own while the block runs: it lands in the generation
    loop however slow the machine is (a single shot after a fixed delay can land before the loop
    starts, or after it ended)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            act()
            stop.wait(0.005)

    t = threading.Thread(target=loop)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def test_ctrl_c_stops_within_a_frame(models):
    """SIGINT sent again and again until the native loop's per-frame poll of Python's signal
    handlers (csrc/bindings/session.cpp, `interruptible`) takes one, whose handler raises
    KeyboardInterrupt: the loop stops there, and never polls again. One that went on would take
    the next SIGINT at its next frame, so the outcome rests on counts, not on the machine's speed."""
    from qtts.runtime.engine.engine import SessionHandle

    name, request = CASES[0]
    m = models(name)
    in_loop = SessionHandle.generate.__code__  # the frame that called the native loop
    taken: list[int] = []

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if frame is not None and frame.f_code is in_loop:
            taken.append(signum)
            if len(taken) == 1:
                raise KeyboardInterrupt
        # anywhere else (before the loop, after it): ignored

    main = threading.main_thread().ident
    assert main is not None
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt), _again_and_again(lambda: signal.pthread_kill(main, signal.SIGINT)):
            m.generate_codes(TEXT, **request, **ENDLESS, seed=1)
    finally:
        signal.signal(signal.SIGINT, previous)  # which first runs on_sigint for a SIGINT still pending
    assert taken == [signal.SIGINT]
    # the session is usable afterwards
    assert m.generate_codes(TEXT, **request, max_new_tokens=3, **GREEDY).codes.shape == (2, 16)


def test_cancel_from_another_thread(models):
    name, request = CASES[0]
    m = models(name)
    with _again_and_again(m.cancel):
        r = m.generate_codes(TEXT, **request, **ENDLESS, seed=2)
    assert r.stop_reason == "cancelled" and r.codes.shape[0] < MAX_NEW_TOKENS - 1


@pytest.mark.parametrize("out_type", ["bf16", "q8_0"])
def test_quantized_models_generate(out_type, gguf_dir: Path, models):
    # Random tiny weights make later frames chaotic under rounding, so only frame 0 is compared.
    kwargs = dict(speaker="ryan", max_new_tokens=21, **GREEDY)
    want = models("tiny_custom_voice").generate_codes(TEXT, **kwargs).codes
    got = qtts.load(gguf_dir / f"tiny_custom_voice-{out_type}.gguf", n_threads=2).generate_codes(TEXT, **kwargs)
    assert got.codes.shape == (20, 16) and got.stop_reason == "max_new_tokens"
    np.testing.assert_array_equal(got.codes[0], want[0])


def test_sample_tokens_binding():
    from qtts.runtime.engine.engine import sample_tokens

    logits = np.random.default_rng(0).standard_normal((64, 3072)).astype(np.float32)
    assert sample_tokens(logits, False, 1.0, 0, 1.0, 0) == list(np.argmax(logits, axis=1))
    assert sample_tokens(logits, True, 0.9, 1, 1.0, 5) == list(np.argmax(logits, axis=1))  # top-k 1
    a = sample_tokens(logits, True, 0.9, 50, 1.0, 7)
    assert a == sample_tokens(logits, True, 0.9, 50, 1.0, 7) != sample_tokens(logits, True, 0.9, 50, 1.0, 8)
    top50 = np.argsort(-logits, axis=1)[:, :50]
    assert all(t in row for t, row in zip(a, top50, strict=True))
    with pytest.raises(ValueError, match="logits"):
        sample_tokens(np.zeros(5, np.float32), False, 1.0, 0, 1.0, 0)
