"""Shared fixtures: tiny reference checkpoints and their GGUF conversions (built once, cached)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.build import MODEL_NAMES

IN_CI = bool(os.environ.get("CI"))


def _need_reference() -> None:
    try:
        from tests.fixtures import refmodels  # noqa: F401  (installs import stubs, imports qwen_tts)
    except ImportError as e:  # the reference is a test dependency: CI must have it
        msg = f"the qwen-tts reference is not installed ({e}); see README.md for the test command"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def fixture_root() -> Path:
    _need_reference()
    from tests.fixtures.build import ensure_fixtures

    return ensure_fixtures()


@pytest.fixture(scope="session")
def gguf_dir(fixture_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every tiny model converted at every output type: <variant>-<type>.gguf."""
    from qtts.convert.checkpoint import convert

    out = tmp_path_factory.mktemp("gguf")
    for name in MODEL_NAMES:
        for t in ("f32", "bf16", "q8_0"):
            convert(fixture_root / name, out / f"{name}-{t}.gguf", t)
    return out


@pytest.fixture(scope="session")
def reference_models(fixture_root: Path):
    """The reference's own Qwen3TTSModel wrappers (float32, CPU), loaded lazily per variant."""
    import torch
    from qwen_tts import Qwen3TTSModel

    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = Qwen3TTSModel.from_pretrained(str(fixture_root / name), dtype=torch.float32,
                                                        device_map="cpu")
        return cache[name]

    return get
