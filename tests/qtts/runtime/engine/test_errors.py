"""The two error families at the native boundary: bad input is ValueError, an engine failure on
valid input is qtts.QttsError carrying ggml's error lines."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qtts


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1)


def test_kv_cache_too_large_is_an_engine_failure(cv: qtts.Model) -> None:
    embd = np.zeros((1, cv.hidden_size), dtype=np.float32)
    # far more positions than any machine's memory holds: the cache buffer cannot be allocated
    with cv.engine.session() as s, pytest.raises(qtts.QttsError, match="KV cache") as info:
        s.talker_prefill(embd, n_ctx=2**31 - 1)
    assert not isinstance(info.value, ValueError)
    assert info.value.ggml_log, "ggml's reasons are carried along"
    # the session is still usable afterwards
    with cv.engine.session() as s:
        logits, hidden = s.talker_prefill(embd)
    assert np.isfinite(logits).all() and hidden.shape == (cv.hidden_size,)


def test_bad_input_is_still_value_error(cv: qtts.Model) -> None:
    with cv.engine.session() as s:
        with pytest.raises(ValueError, match="embeddings"):
            s.talker_prefill(np.zeros((1, cv.hidden_size + 1), dtype=np.float32))
        with pytest.raises(ValueError, match="n_frames"):
            s.generate_next(0)
