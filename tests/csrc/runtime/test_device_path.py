"""What the GPU path adds, proven on the CPU (docs/kernels.md, "Precision" and "Sampling on the
device"): the exact precision's padded product, the precision option, and the code predictor's
sampling inside its frame graph against the host sampler."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts._native import core
from tests.fixtures.device import device_precision, on_test_device, ops_device

TEXT = "Hello world, this is a tiny test."


@pytest.mark.parametrize(("h", "m", "k", "n"), [(1, 8, 32, 1), (1, 8, 32, 4), (3, 5, 16, 9), (2, 7, 8, 16),
                                                 (1, 4, 8, 17), (2, 3, 8, 2)])
@pytest.mark.parametrize("every_width", [False, True])
def test_exact_product_pads_and_slices(h: int, m: int, k: int, n: int, every_width: bool) -> None:
    """every_width (exact on Vulkan) pads the narrowest products too, one column included."""
    rng = np.random.default_rng(h * 1000 + n)
    a = rng.standard_normal((h, m, k)).astype(np.float32)
    b = rng.standard_normal((h, n, k)).astype(np.float32)
    got = core.ops.mul_mat_exact(a, b, every_width=every_width)
    want = np.einsum("hmk,hnk->hnm", a.astype(np.float64), b.astype(np.float64))
    assert got.shape == (h, n, m)
    assert np.abs(got - want).max() <= 1e-5


def test_precision_option(gguf_dir: Path) -> None:
    """About the CPU (it stays there under QTTS_TEST_DEVICE). On the CPU, fast is the vocoder's
    conv stack in BF16 where the CPU has AMX tiles (the tiny models' upsampling convs, voc_in and
    the first transposed conv read 32 or more channels); auto is fast unless the file is F32; the
    portable path and CPUs without tiles compute in F32 whatever the choice."""
    path = gguf_dir / "tiny_custom_voice-f32.gguf"
    fast = "fast" if core.ops.has_bf16_tiles() else "exact"
    for file_type, choice, want in [("f32", "auto", "exact"), ("f32", "exact", "exact"), ("f32", "fast", fast),
                                    ("q8_0", "auto", fast), ("bf16", "auto", fast), ("q8_0", "exact", "exact")]:
        m = qtts.Model(gguf_dir / f"tiny_custom_voice-{file_type}.gguf", device="cpu", voice_cache=False,
                       precision=choice)
        assert m.precision == want, (file_type, choice)
    assert qtts.Model(path, device="cpu", voice_cache=False, ops="portable", precision="fast").precision == "exact"
    with pytest.raises(ValueError, match="precision must be one of auto, exact, fast, got 'tf32'"):
        qtts.load(path, precision="tf32", device="cpu")
    with pytest.raises(TypeError, match="precision must be a str"):
        qtts.Model(path, precision=1, device="cpu")


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
    m = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1, ops=ops, voice_cache=False,
                   device=ops_device(ops), precision=device_precision())
    got = []
    for on_device in (False, True):
        with m.engine.session() as s:
            s.native.device_sampling = on_device
        got.append(m.generate_codes(TEXT, speaker="ryan", max_new_tokens=30, **settings).codes)
    assert got[0].shape == (29, 16)
    np.testing.assert_array_equal(got[0], got[1])


def test_top_p_stays_on_the_host(gguf_dir: Path) -> None:
    m = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1, ops="portable", voice_cache=False,
                   device=on_test_device(), precision=device_precision())
    got = []
    for on_device in (False, True):
        with m.engine.session() as s:
            s.native.device_sampling = on_device
        got.append(m.generate_codes(TEXT, speaker="ryan", max_new_tokens=12, seed=5, subtalker_top_p=0.8).codes)
    np.testing.assert_array_equal(got[0], got[1])


def _batched_codes(m: qtts.Model, texts: list[str], settings: list[dict], device: bool) -> list[np.ndarray]:
    """Each request's codes when all of them run in one batch (joining at steps 0, 1, 2, ...),
    the batch's code predictor sampling on the host or in its frame graph."""
    from qtts.runtime.settings.config import GenerationConfig
    from qtts.runtime.synthesis.prompt import build_prompt, resolve_voice

    with m.engine.session() as s:
        s.native.device_sampling = device
        cond = resolve_voice(m.context, language="english", speaker="ryan", instruct=None, voice=None)
        cases = [(build_prompt(m.context, s, t, cond, non_streaming_mode=True),
                  GenerationConfig.resolve(m.generation_defaults, kw, kw.get("seed"), frame_budget=None))
                 for t, kw in zip(texts, settings, strict=True)]
        batch = m.engine.batch(len(cases))
        owner: dict[int, int] = {}
        codes: list[list[np.ndarray]] = [[] for _ in cases]
        ended = step = 0
        while ended < len(cases):
            if step < len(cases):
                p, cfg = cases[step]
                owner[s.batch_add(batch, p.embeddings, p.trailing, cfg)] = step
            for slot, c, reason, _ in s.batch_step(batch, 1):
                codes[owner[slot]].append(c)
                ended += reason is not None
            step += 1
        s.native.device_sampling = False
    return [np.concatenate(c) for c in codes]


@pytest.mark.parametrize("ops", ["native", "portable"])
@pytest.mark.parametrize("mode", ["greedy", "sampled", "mixed"])
def test_batched_device_sampling_follows_the_host_sampler(gguf_dir: Path, ops: str, mode: str) -> None:
    """The batch's code predictor as one frame graph over every lane, sampling inside it, gives
    the codes of its step-by-step pass with the host sampler: greedy, seeded sampling with one
    setting for all lanes, and a mix of settings (which keeps the host sampler)."""
    m = qtts.Model(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=1, ops=ops, voice_cache=False,
                   device=ops_device(ops), precision=device_precision())
    texts = [TEXT, "Short.", "A longer sentence, with a few more words than the others.", TEXT]
    greedy = dict(do_sample=False, subtalker_dosample=False)
    sampled = [dict(seed=11 + i, subtalker_top_k=5, subtalker_temperature=0.8) for i in range(4)]
    settings = {"greedy": [dict(greedy, max_new_tokens=8 + 3 * i) for i in range(4)],
                "sampled": [dict(kw, max_new_tokens=8 + 3 * i) for i, kw in enumerate(sampled)],
                "mixed": [dict(greedy, max_new_tokens=9), dict(sampled[0], max_new_tokens=12),
                          dict(seed=4, max_new_tokens=10), dict(greedy, max_new_tokens=6)]}[mode]
    host = _batched_codes(m, texts, settings, device=False)
    dev = _batched_codes(m, texts, settings, device=True)
    for i, (a, b) in enumerate(zip(host, dev, strict=True)):
        assert len(a) > 1
        np.testing.assert_array_equal(b, a, err_msg=f"request {i}")


def test_portable_graphs_have_only_stock_ops(gguf_dir: Path) -> None:
    """Every op of the portable path's graphs is a stock ggml op (what any backend computes): a
    custom CPU op there would run on the CPU between device parts, with copies both ways, as the
    codec transformers' linear layers once did (docs/kernels.md, "Portable graphs"). Checked with
    the per-op profile over an in-context clone's encoders, generation and decode."""
    from tests.profiling import profiled

    m = qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=1, ops="portable", voice_cache=False,
                   device=on_test_device(), precision=device_precision())
    rng = np.random.default_rng(0)
    clip = (0.1 * rng.standard_normal(24000)).astype(np.float32)
    with m.engine.session() as s:
        s.native.device_sampling = True  # as on a device: the code predictor samples in its graph

    def run() -> None:
        voice = m.create_voice((clip, 24000), "Hello there.")
        m.synthesize(TEXT, voice=voice, max_new_tokens=6, seed=0)

    _, prof = profiled(m, run)
    ops = {k.partition("/")[2] for k in prof if not k.partition("/")[2].startswith(":")}
    assert {"MUL_MAT", "MUL_MAT_ACT", "SIN", "SOFT_MAX"} <= ops  # the audio nets and the transformers ran
    assert not ops & {"CUSTOM", "QMATMUL", "SAMPLE"}, sorted(ops)
