"""Long text: split by default in the API as at the command line, a chunked talker prefill whose
memory is linear in the prompt (and whose codes stay those of the reference), and buffers that
an outsized request grew given back when it ends."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.runtime.text.text import SPLIT_ABOVE_CHARS, split_text, text_pieces
from tests.qtts.runtime.synthesis.test_generate import CASES, GREEDY, TEXT, prompt_of, reference_run

LONG = "x" * 6000  # no sentence end, clause mark or space: one prompt of ~6000 tokens unless split


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)


def test_text_pieces() -> None:
    short = "A sentence. Another one."
    assert text_pieces(short, "auto") == [short]
    assert text_pieces(short, True) == split_text(short) == [short]
    assert text_pieces(short, 12) == ["A sentence.", "Another one."]
    assert text_pieces(LONG, False) == [LONG]
    pieces = text_pieces(LONG, "auto")
    assert pieces == text_pieces(LONG, True) and "".join(pieces) == LONG
    assert [len(p) for p in pieces] == [SPLIT_ABOVE_CHARS] * (len(LONG) // SPLIT_ABOVE_CHARS)
    edge = "y" * SPLIT_ABOVE_CHARS
    assert text_pieces(edge, "auto") == [edge] and len(text_pieces(edge + " z", "auto")) == 2
    for bad, err in (("yes", ValueError), (0, ValueError), (-1, ValueError), (1 << 21, ValueError), (2.5, TypeError),
                     (None, TypeError)):
        with pytest.raises(err, match="split_sentences"):
            text_pieces(short, bad)  # type: ignore[arg-type]


def test_api_splits_long_text_by_default(cv: qtts.Model) -> None:
    """As the CLI: text over SPLIT_ABOVE_CHARS is synthesized piece by piece unless told not to."""
    text = " ".join(["This sentence is a filler of moderate length."] * 12)
    n = len(split_text(text))
    assert len(text) > SPLIT_ABOVE_CHARS and n > 1
    kw = dict(speaker="ryan", max_new_tokens=3, seed=1, **GREEDY)
    default = cv.synthesize(text, **kw)
    assert len(default.codes) == 2 * n
    np.testing.assert_array_equal(default.samples, cv.synthesize(text, split_sentences=True, **kw).samples)
    assert len(cv.synthesize(text, split_sentences=False, **kw).codes) == 2
    chunks = list(cv.stream(text, **kw))
    assert sum(len(c.codes) for c in chunks) == 2 * n
    np.testing.assert_allclose(np.concatenate([c.samples for c in chunks]), default.samples, atol=1e-5)
    assert len(cv.synthesize(LONG, **kw).codes) == 2 * len(LONG) // SPLIT_ABOVE_CHARS
    # short text stays one piece, exactly as before
    np.testing.assert_array_equal(cv.synthesize(TEXT, **kw).samples,
                                  cv.synthesize(TEXT, split_sentences=False, **kw).samples)


def test_long_prompt_memory_is_bounded_and_given_back(cv: qtts.Model) -> None:
    kw = dict(speaker="ryan", max_new_tokens=4, seed=1, **GREEDY)
    cv.synthesize(TEXT, **kw)
    base = cv.engine.memory()
    heads = cv.hparams["talker"]["head_count"]
    n = len(cv.tokenizer.encode(LONG))
    quadratic = n * n * heads * 4  # one layer's [n, n, heads] F32 attention scores
    it = cv.stream(LONG, split_sentences=False, **kw)
    next(it)  # the prefill is done: its graphs have sized the compute buffers
    during = cv.engine.memory()
    assert during["compute_buffers"] < quadratic / 8, (during, quadratic)
    assert during["kv_cache"] > base["kv_cache"]  # one prompt of n positions, not pieces
    rest = list(it)
    assert rest[-1].stop_reason == "max_new_tokens"
    given_back = cv.engine.memory()
    assert all(given_back[k] <= base[k] for k in base), (given_back, base)
    # a stream abandoned after its prefill gives them back when the next generation begins
    it = cv.stream(LONG, split_sentences=False, **kw)
    next(it)
    it.close()
    cv.synthesize(TEXT, **kw)
    after = cv.engine.memory()
    assert all(after[k] <= base[k] for k in base), (after, base)


@pytest.mark.parametrize("chunk", [1, 5])
@pytest.mark.parametrize("non_streaming_mode", [True, False])
@pytest.mark.parametrize("case", [0, 3, 4])
def test_chunked_prefill_keeps_reference_codes(case, non_streaming_mode, chunk, gguf_dir: Path, reference_models):
    name, request = CASES[case]
    m = qtts.load(gguf_dir / f"{name}-f32.gguf", n_threads=1)
    with m.engine.session() as s:
        s.prefill_chunk = chunk
        assert s.prefill_chunk == chunk
    want = reference_run(reference_models(name), name, request, non_streaming_mode=non_streaming_mode,
                         max_new_tokens=21, **GREEDY)
    got = m.generate_codes(TEXT, **request, non_streaming_mode=non_streaming_mode, max_new_tokens=21, **GREEDY)
    np.testing.assert_array_equal(got.codes, want["codes"])


def test_chunked_prefill_matches_one_graph(cv: qtts.Model) -> None:
    name, request = CASES[0]
    p = prompt_of(cv, request, True)
    with cv.engine.session() as s:
        default = s.prefill_chunk
        whole = s.talker_prefill(p.embeddings)
        assert len(p.embeddings) < default
        try:
            for chunk in (1, 3, len(p.embeddings) - 1):
                s.prefill_chunk = chunk
                for got, want in zip(s.talker_prefill(p.embeddings), whole, strict=True):
                    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        finally:
            s.prefill_chunk = default
        with pytest.raises(ValueError, match="prefill_chunk"):
            s.prefill_chunk = 0
