"""Shared fixtures: tiny reference checkpoints and their GGUF conversions (built once, cached).

Tests that need torch and the qwen-tts reference carry the `reference` marker: set here for every
test that uses `fixture_root` (directly or through gguf_dir, reference_models, ...) or a fixture
named reference_*, explicitly on the few that call _need_reference() themselves. The rest, the
torch-free group, runs with `python -m pytest -m "not reference"`; QTTS_BLOCK_TORCH=1 makes
`import torch` fail (and a test that asks for the reference fail instead of skipping), which
proves that the group needs no torch.
"""
from __future__ import annotations

import importlib.abc
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.build import MODEL_NAMES

IN_CI = bool(os.environ.get("CI"))
BLOCK_TORCH = bool(os.environ.get("QTTS_BLOCK_TORCH"))


class _TorchBlocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"import of {name} blocked by QTTS_BLOCK_TORCH")
        return None


if BLOCK_TORCH:
    if "torch" in sys.modules:
        raise RuntimeError("QTTS_BLOCK_TORCH is set but torch was imported before tests/conftest.py")
    sys.meta_path.insert(0, _TorchBlocker())


def pytest_configure(config: pytest.Config) -> None:
    from tests.fixtures.device import check_test_device

    try:
        check_test_device()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "fixture_root" in names or any(n.startswith("reference") for n in names):
            item.add_marker(pytest.mark.reference)


def _need_reference() -> None:
    try:
        from tests.fixtures import refmodels  # noqa: F401  (installs import stubs, imports qwen_tts)
    except ImportError as e:  # the reference is a test dependency: CI must have it
        msg = f"the qwen-tts reference is not installed ({e}); see README.md for the test command"
        if IN_CI or BLOCK_TORCH:
            pytest.fail(msg)
        pytest.skip(msg)


def _need_aligner_reference() -> None:
    _need_reference()
    try:
        from tests.fixtures.aligner import install_stubs

        install_stubs()
        import qwen_asr  # noqa: F401
    except ImportError as e:
        msg = f"the qwen-asr reference is not installed ({e}); see README.md for the test command"
        if IN_CI or BLOCK_TORCH:
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def reference_aligner_dir() -> Path:
    """The tiny Qwen3-ForcedAligner checkpoint, built with qwen-asr's classes (tests/fixtures/aligner.py)."""
    _need_aligner_reference()
    from tests.fixtures.aligner import ensure_aligner

    return ensure_aligner()


@pytest.fixture(scope="session")
def aligner_gguf(reference_aligner_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny aligner converted at F32, BF16, Q8_0 and Q4_K, by type."""
    from qtts.convert.checkpoint import convert

    out = tmp_path_factory.mktemp("aligner")
    return {t: convert(reference_aligner_dir, out / f"aligner-{t}.gguf", t) for t in ("f32", "bf16", "q8_0", "q4_k")}


@pytest.fixture(scope="session")
def reference_aligner(reference_aligner_dir: Path):
    """qwen-asr's Qwen3ForcedAligner over the tiny checkpoint (float32, CPU)."""
    from tests.fixtures.aligner import load_reference

    return load_reference(reference_aligner_dir)


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


@pytest.fixture
def clock_stands_still(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunk pacing's clock stopped (qtts/runtime/synthesis/pacing.py): no audio is ever played out, so
    streams keep the plain doubling schedule however loaded the machine is. For the tests that
    compare where chunks end; tests/qtts/runtime/synthesis/test_pacing.py checks the pacing itself."""
    from qtts.runtime.synthesis import pacing

    monkeypatch.setattr(pacing, "now", lambda: 0.0)


@pytest.fixture
def lock_waiters(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """`lock_waiters(n)` returns once n threads wait for an engine's lock
    (qtts/runtime/engine/engine_lock.py): a test then checks that they still wait, instead of sleeping
    for a time a busy machine could outlast before the threads even get there."""
    from qtts.runtime.engine.engine_lock import EngineLock

    waiting: set[int] = set()
    changed = threading.Condition()
    real = EngineLock._wait

    def _wait(self: EngineLock) -> bool:
        with changed:
            waiting.add(threading.get_ident())
            changed.notify_all()
        return real(self)

    monkeypatch.setattr(EngineLock, "_wait", _wait)

    def until(n: int) -> None:
        with changed:
            assert changed.wait_for(lambda: len(waiting) >= n, timeout=120), f"{len(waiting)} of {n} threads wait"

    return until
