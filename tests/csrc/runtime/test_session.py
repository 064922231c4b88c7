"""The native Session over one native Model (runtime/session.h): sessions of any thread count
share the model's weights and compute the same values; bad ids are refused by the core."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qtts._native import core


def test_sessions_share_one_model(gguf_dir: Path) -> None:
    native = core.Model(str(gguf_dir / "tiny_voice_design-f32.gguf"), "cpu")
    s1, s2 = core.Session(native, 1), core.Session(native, 2)
    ids = [1, 2, 3, 4]
    np.testing.assert_allclose(s1.text_embed(ids), s2.text_embed(ids), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="outside the text vocabulary"):
        s1.text_embed([10**6])
