"""What the GPU path adds, proven on the CPU (docs/kernels.md, "Precision" and "Sampling on the
device"): the exact precision's padded product, the precision option, and the code predictor's
sampling inside its frame graph against the host sampler."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts._native import core

TEXT = "Hello world, this is a tiny test."


@pytest.mark.parametrize(("h", "m", "k", "n"), [(1, 8, 32, 1), (1, 8, 32, 4), (3, 5, 16, 9), (2, 7, 8, 16),
                                                 (1, 4, 8, 17), (2, 3, 8, 2)])
def test_exact_product_pads_and_slices(h: int, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(h * 1000 + n)
    a = rng.standard_normal((h, m, k)).astype(np.float32)
    b = rng.standard_normal((h, n, k)).astype(np.float32)
    got = core.ops.mul_mat_exact(a, b)
    want = np.einsum("hmk,hnk->hnm", a.astype(np.float64), b.astype(np.float64))
    assert got.shape == (h, n, m)
    assert np.abs(got - want).max() <= 1e-5


def test_precision_option(gguf_dir: Path) -> None:
    path = gguf_dir / "tiny_custom_voice-f32.gguf"
    for choice in ("auto", "exact", "fast"):
        # the CPU has no faster arithmetic: every choice computes in F32
        assert qtts.Model(path, device="cpu", voice_cache=False, precision=choice).precision == "exact"
    with pytest.raises(ValueError, match="precision must be one of auto, exact, fast, got 'tf32'"):
        qtts.load(path, precision="tf32")
    with pytest.raises(TypeError, match="precision must be a str"):
        qtts.Model(path, precision=1)


@pytest.mark.parametrize("ops", ["native", "portable"])
@pytest.mark.parametrize("settings", [
    dict(do_sample=False, subtalker_dosample=False),
    dict(seed=3),
    dict(seed=7, subtalker_top_k=5, subtalker_temperature=0.7),
    dict(seed=1, subtalker_top_k=0),
])
def test_device_sampling_follows_the_host_sampler(gguf_dir: Path, ops: str, settings: dict) -> None:
    """The stock-op sampler draws the host RNG's numbers in the same order and picks by the same
    rule, so the codes are the host sampler's (the sums are float, not double: a draw within
    rounding of a boundary could differ, which these 435 draws per case do not hit)."""
    m = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1, ops=ops, voice_cache=False)
    got = []
    for on_device in (False, True):
        with m.engine.session() as s:
            s.native.device_sampling = on_device
        got.append(m.generate_codes(TEXT, speaker="ryan", max_new_tokens=30, **settings).codes)
    assert got[0].shape == (29, 16)
    np.testing.assert_array_equal(got[0], got[1])


def test_top_p_stays_on_the_host(gguf_dir: Path) -> None:
    m = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1, ops="portable", voice_cache=False)
    got = []
    for on_device in (False, True):
        with m.engine.session() as s:
            s.native.device_sampling = on_device
        got.append(m.generate_codes(TEXT, speaker="ryan", max_new_tokens=12, seed=5, subtalker_top_p=0.8).codes)
    np.testing.assert_array_equal(got[0], got[1])
